"""`capgeo negatives DATA -o FILE`: hard negatives per caption, for losses that train on mined tuples."""

from __future__ import annotations

import click

from capgeo import terminal
from capgeo.terminal import shown
from capgeo.cli.options import (
    FiniteFloatRange,
    dataset_options,
    emit,
    encode_from_options,
    encoder_options,
    forced,
    json_option,
    load_from_options,
    refuse_path_clashes,
    row_file_output,
)
from capgeo.defaults import FIXED_BLOCK_SIZE, NEGATIVE_SUFFIXES
from capgeo.defaults import NEGATIVES_K as DEFAULT_K
from capgeo.defaults import NEGATIVES_MAX_COSINE as DEFAULT_MAX_COSINE
from capgeo.defaults import NEGATIVES_MIN_COSINE as DEFAULT_MIN_COSINE
from capgeo.defaults import NEGATIVES_PER_IMAGE as DEFAULT_PER_IMAGE
from capgeo.progress import counts_passes


@click.command("negatives", short_help="Each caption's K hardest negatives from other images, as training rows.")
@dataset_options
@encoder_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              callback=row_file_output(NEGATIVE_SUFFIXES),
              help="Rows (anchor id and text, negative ids, texts, cosines) to FILE: .jsonl or .parquet.")
@click.option("-k", "--negatives", "k", type=click.IntRange(min=1), default=DEFAULT_K, show_default=True,
              help="Negatives per caption, hardest first.")
@click.option("--min-cosine", type=FiniteFloatRange(-1.0, 1.0), default=DEFAULT_MIN_COSINE, show_default=True,
              metavar="C", help="Keep negatives with cosine >= C.")
@click.option("--max-cosine", type=FiniteFloatRange(-1.0, 1.0), default=DEFAULT_MAX_COSINE, show_default=True,
              metavar="C", help="Keep negatives with cosine < C; above it are exact and near-exact duplicates, "
                                "false negatives.")
@click.option("--per-image", type=click.IntRange(min=0), default=DEFAULT_PER_IMAGE, show_default=True, metavar="N",
              help="At most N of an anchor's negatives from one image (0: no limit).")
@click.option("--margin", type=FiniteFloatRange(-2.0, 2.0), default=None, metavar="M",
              help="Keep negatives with cosine <= the anchor's lowest positive cosine (another caption of its "
                   "image) minus M, as sentence-transformers' absolute_margin (default: no margin).")
@click.option("--block-size", type=click.IntRange(min=1), default=FIXED_BLOCK_SIZE, show_default=True,
              help="Rows per block of the pairwise pass; memory grows with it.")
@json_option
@counts_passes
def negatives(output, k, min_cosine, max_cosine, per_image, margin, block_size, json_out, **options):
    """Each caption's K hardest companions from other images with --min-cosine <= cosine <
    --max-cosine, written as training rows, and the quantiles of anchor-negative cosine.
    HN-CLIP itself needs no mining (its Gbar term weighs the in-batch negatives); this
    serves other hard-negative losses. See `capgeo docs negatives`."""
    from capgeo.pipeline import negatives_dataset

    per_image = per_image or None  # 0: no limit
    refuse_path_clashes()
    captions = load_from_options(options)
    summary = negatives_dataset(captions, output, encode_from_options(options), k=k, min_cosine=min_cosine,
                                max_cosine=max_cosine, per_image=per_image, margin=margin, block_size=block_size,
                                force=forced())
    click.echo(f"Wrote {output}", err=True)
    if summary["k"] < k:
        each = "" if per_image is None else f", at most {per_image} of each (--per-image)"
        click.echo(f"Note: -k {k} capped at {summary['k']}, the most negatives any caption has (the captions of "
                   f"other images{each})", err=True)
    emit(summary, json_out, print_negatives)


def print_negatives(summary: dict) -> None:
    from rich.table import Table

    console = terminal.console(highlight=False)
    levels = list(summary["cosines"][0]["quantiles"])
    spec = None if summary["encoder"] is None else summary["encoder"]["spec"]
    table = Table(title=f"Anchor-negative cosine, {summary['min_cosine']:g} <= cosine < {summary['max_cosine']:g} "
                        f"(encoder {shown(spec)})", title_justify="left")
    for column in ("negative rank", "count", "mean", *levels):
        table.add_column(column, justify="right")
    for entry in summary["cosines"]:
        cells = [entry["mean"], *entry["quantiles"].values()]
        table.add_row(entry["rank"], f"{entry['count']:,}", *("n/a" if v is None else f"{v:.3f}" for v in cells))
    console.print(table)
    rules = [f"at most {summary['per_image']} per image" if summary["per_image"] else "any number per image"]
    if summary["margin"] is not None:
        rules.append(f"margin {summary['margin']:g} below the lowest positive")
    console.print(f"{summary['n_negatives']:,} negatives for {summary['n_anchors']:,} captions ({', '.join(rules)}; "
                  f"no text of the anchor's own image, no text twice); {summary['n_anchors_short']:,} captions have "
                  f"fewer than {summary['k']} in range.")
