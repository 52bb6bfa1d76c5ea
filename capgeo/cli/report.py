"""`capgeo report` and `capgeo compare`: self-contained HTML reports."""

from __future__ import annotations

import click

from capgeo.cli.examples import epilog
from capgeo.cli.options import (
    batch_options_from,
    batch_size_options,
    column_notes,
    dataset_options,
    default_output_stem,
    encode_from_options,
    encoder_options,
    force_option,
    forced,
    image_embeddings_option,
    max_tokens_option,
    pair_options,
    pop_load_options,
    ray_option,
    read_options,
    refuse_path_clashes,
    report_options_from,
    reproduce_command,
    seed_option,
    sweep_from_options,
    sweep_options,
    warn_skipped,
    writable_default_output,
    writable_output,
)
from capgeo.progress import counts_passes


def _default_output(source: str) -> str:
    return f"{default_output_stem(source)}.html"


DEFAULT_COMPARE_OUTPUT = "compare.html"


def _profile_inputs(source: str) -> dict | None:
    """The dataset and encoder files a saved profile names (for --fill-missing), or None."""
    from capgeo.errors import CapgeoError
    from capgeo.report.build import fill_missing_inputs, is_profile_file

    try:
        return fill_missing_inputs(source) if is_profile_file(source) else None
    except CapgeoError:
        return None  # another capgeo result: refused, in its words, when it is read


def _wrote(path, notes) -> None:
    from capgeo._atomic import stream_target, written_path

    # the full path: a default name lands in whatever folder the user happens to be in
    written = written_path(path)
    # a stream's size says nothing of what went into it (a pipe: 0)
    size = "" if stream_target(written) is not None else f" ({written.stat().st_size / 1e6:.1f} MB)"
    click.echo(f"Wrote {written}{size}", err=True)
    for note in notes:
        click.echo(f"  note: {note}", err=True)


_shared_profile_options = [
    batch_size_options,
    seed_option("Seed of the batch draws."),
]


def _profile_options(command):
    for decorator in reversed(_shared_profile_options):
        command = decorator(command)
    return command


@click.command(short_help="One self-contained HTML report of DATA's caption geometry (opens offline).",
               epilog=epilog("report"))
@dataset_options
@encoder_options
@_profile_options
@max_tokens_option
@click.option("--no-dupes", is_flag=True, help="Leave out the near-duplicate gallery.")
@click.option("--no-gamma", is_flag=True, help="Leave out the gamma diagnostics.")
@click.option("--no-map", is_flag=True, help="Leave out the caption map (`capgeo map`).")
@click.option("--truncation", is_flag=True,
              help="Add the context-length section of `capgeo truncation` (embeds DATA again at 32, 64, 77, 128, "
                   "248 tokens, those below the encoder's context).")
@click.option("--leak", "leak", multiple=True, type=click.Path(exists=True, dir_okay=True, path_type=str),
              metavar="EVAL", help="Add the train/eval leakage section of `capgeo leak DATA EVAL` (DATA as the "
                                   "training set); repeat for several evaluation sets.")
@click.option("--fill-missing", is_flag=True,
              help="For a saved profile: compute its missing dupes/gamma sections from the dataset it names "
                   "(re-reads and embeds it; the embedding cache makes this cheap).")
@click.option("--save-profile", type=click.Path(dir_okay=False, path_type=str), default=None,
              callback=writable_output, metavar="FILE",
              help="Also write the complete profile (with dupes and gamma) as JSON, to redraw the report later.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              callback=writable_output, metavar="FILE",
              help="HTML file to write (default: DATA's name with .html, in the current folder).")
@image_embeddings_option("Adds the image-caption pairs section (capgeo docs pairs).")
@pair_options
@sweep_options
@force_option
@ray_option
@counts_passes
def report(output, **options):
    """Write one self-contained HTML report of DATA's caption geometry: summary, alerts,
    figures, near-duplicate gallery, gamma diagnostics and provenance.

    DATA is a dataset, or a profile saved with `capgeo profile --json FILE` (or
    --save-profile), which is drawn without recomputing anything it holds.
    The file opens offline: plotly's JavaScript is inlined once."""
    from capgeo.report.build import CommandHooks, write_report

    source = options.pop("data")
    sweep = sweep_from_options(options)
    defaults = () if output else ("--output",)
    output = output or writable_default_output(_default_output(source))
    # what --fill-missing reads, which only the profile names, is an input too
    refuse_path_clashes(defaults=defaults, extra_inputs=_profile_inputs(source) if options["fill_missing"] else None,
                        **{"--output": output})
    with column_notes():
        written = write_report(
            source, output, encode=encode_from_options(options, max_tokens=options.pop("max_tokens")),
            options=batch_options_from(options), report=report_options_from(options, sweep),
            load_options=pop_load_options(options),
            hooks=CommandHooks(reproduce_command(), on_skipped=warn_skipped,
                               on_saved=lambda path: click.echo(f"Wrote {path}", err=True)),
            force=forced())
    if written.ignored_options:
        click.echo(f"Note: {source} is a saved profile, drawn as it is; ignored: "
                   + ", ".join("--" + name.replace("_", "-") for name in written.ignored_options), err=True)
    _wrote(written.path, written.notes)


def _print_side_by_side(profiles, labels, stderr: bool = False) -> None:
    """The compare page's headline numbers as a short table on the terminal, one column per profile
    (on stderr where the page itself goes to standard output)."""
    from rich.table import Table
    from rich.text import Text

    from capgeo import terminal
    from capgeo.display import visible
    from capgeo.report.summary import headline_rows

    table = Table(title="Side by side (the page has the figures)", title_justify="left")
    table.add_column("")
    for label in labels:
        table.add_column(terminal.shown(label), overflow="fold")
    for label, values in headline_rows(profiles):   # plain text holding dataset names: never markup
        table.add_row(Text(label), *(Text(visible(value)) for value in values))
    terminal.console(stderr=stderr).print(table)


@click.command(short_help="Several profiles or datasets side by side on one HTML page.")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=str))
@_profile_options
@click.option("--encoder", "encoders", multiple=True, metavar="SPEC",
              help="Encoder for dataset SOURCES; repeat to compare one dataset under several encoders "
                   "(default: the embedded all-MiniLM-L6-v2).")
@click.option("--device", default=None, help="cuda, mps or cpu; default: the best available.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Embedding cache folder (default: $CAPGEO_CACHE or ~/.cache/capgeo).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the embedding cache.")
@read_options
@click.option("--label", "labels", multiple=True, help="Name of each profile in the figures, in order (default: "
                                                     "dataset name, plus the encoder when needed).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              callback=writable_output, metavar="FILE",
              help=f"HTML file to write (default: {DEFAULT_COMPARE_OUTPUT} in the current folder).")
@force_option
def compare(sources, encoders, labels, output, **options):
    """Compare saved profiles and/or datasets on one page: overlaid cosine distributions,
    bucket composition and caption lengths, summaries side by side.

    SOURCES are profile JSON files and/or datasets (profiled with each --encoder, read with
    the dataset options --format, --text-column, ..., --limit, which apply to each dataset); for example `capgeo compare docci.json coco.json` or
    `capgeo compare DATA --encoder ViT-B-32/openai --encoder longclip-L`."""
    from capgeo._atomic import is_standard_output
    from capgeo.report.build import CommandHooks, CompareOptions, write_compare

    defaulted = output is None
    output = output or writable_default_output(DEFAULT_COMPARE_OUTPUT)
    refuse_path_clashes(defaults=("--output",) if defaulted else (), **({"--output": output} if defaulted else {}))
    with column_notes():
        path, notes = write_compare(
            sources, output, CompareOptions(encoders, labels), encode=encode_from_options(options, encoder=False),
            options=batch_options_from(options), load_options=pop_load_options(options),
            hooks=CommandHooks(reproduce_command(), on_skipped=warn_skipped,
                               on_profiles=lambda profiles, shown: _print_side_by_side(
                                   profiles, shown, stderr=is_standard_output(output))),
            force=forced())
    if defaulted:
        notes = [f"{DEFAULT_COMPARE_OUTPUT} is the default name; -o FILE writes elsewhere", *notes]
    _wrote(path, notes)
