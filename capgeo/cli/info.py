"""`capgeo info DATA` (alias `capgeo datasets DATA`): what a dataset holds."""

from __future__ import annotations

import click

from capgeo import terminal
from capgeo.cli.options import (
    dataset_options,
    emit,
    json_option,
    load_from_options,
    refuse_path_clashes,
)

#: names the JSON of `capgeo info --json`
SCHEMA = "capgeo.info/1"

HELP = """Show what DATA holds: format, captions and groups, captions per group, splits,
caption length in words, examples, rows skipped while reading (with why), and where its
images are (how many groups name one, of which kind, and whether the first few are there).

DATA is a file or folder in any supported format, or a quoted glob or brace pattern naming
shards ('shards/*.parquet', 'shards/{00000..00099}.parquet'); see `capgeo docs formats`."""


def _show_info(json_out, **options):
    from capgeo.captions import summarize_captions
    from capgeo.images.summary import image_summary

    refuse_path_clashes()
    captions = load_from_options(options)
    summary = {"schema": SCHEMA, **summarize_captions(captions), "images": image_summary(captions)}
    emit(summary, json_out, _print_summary)


def _print_summary(summary: dict) -> None:
    from rich.table import Table

    from capgeo.terminal import shown  # dataset text: made visible, its brackets escaped

    per_group = summary["captions_per_group"]
    words = summary["words_per_caption"]
    splits = ", ".join(f"{shown(name)} {count:,}" for name, count in summary["splits"].items()) or "not given"
    histogram = ", ".join(f"{value}: {count:,}" for value, count in per_group["histogram"].items())
    skipped = ", ".join(f"{item['count']:,} {shown(item['reason'])}" for item in summary["skipped"]) or "none"

    table = Table(show_header=False, box=None, pad_edge=False,
                  title=f"[bold]{shown(summary['source'], before_tag=True)}[/]", title_justify="left")
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("format", shown(summary["format"]))
    if summary["layout"]:
        table.add_row("layout", shown(summary["layout"]))
    table.add_row("captions", f"{summary['n_captions']:,}")
    table.add_row("groups (images)", f"{summary['n_groups']:,}")
    table.add_row("captions/group", f"min {per_group['min']}, mean {per_group['mean']:g}, max {per_group['max']}"
                                    f"  [dim](groups by count: {histogram})[/]")
    table.add_row("splits", splits)
    table.add_row("words/caption",
                  f"mean {words['mean']:g}, median {words['median']:g}, p95 {words['p95']:g}, max {words['max']}")
    table.add_row("skipped", skipped)
    if "images" in summary:
        from capgeo.images.summary import describe_images

        table.add_row("images", shown(describe_images(summary["images"])))
    for number, example in enumerate(summary["examples"], start=1):
        table.add_row(f"example {number}",
                      f"[dim]{shown(example['caption_id'], before_tag=True)}[/] {shown(example['text'])}")
    terminal.console(highlight=False).print(table)


def _command(name: str) -> click.Command:
    # two commands over one function: each needs its own callback for click's parameter list
    def callback(json_out, **options):
        _show_info(json_out, **options)

    help_text = HELP if name == "info" else HELP + "\n\nSame as `capgeo info`."
    short_help = HELP.split(":")[0] + (": format, counts, lengths, examples." if name == "info" else " (same as info).")
    return click.command(name, help=help_text, short_help=short_help)(dataset_options(json_option(callback)))


info = _command("info")
datasets = _command("datasets")
