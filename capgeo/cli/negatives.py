"""`capgeo negatives DATA -o FILE`: hard negatives per caption, for losses that train on mined tuples."""

from __future__ import annotations

import click

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
def negatives(output, json_out, **options):
    """Each caption's K hardest companions from other images with --min-cosine <= cosine <
    --max-cosine, written as training rows, and the quantiles of anchor-negative cosine.
    HN-CLIP itself needs no mining (its Gbar term weighs the in-batch negatives); this
    serves other hard-negative losses. See `capgeo docs negatives`."""
    from capgeo.pipeline import negatives_dataset
    from capgeo.terminal.negatives import print_negatives

    rules = {name: options.pop(name) for name in ("k", "min_cosine", "max_cosine", "per_image", "margin")}
    rules["per_image"] = rules["per_image"] or None  # 0: no limit
    block_size = options.pop("block_size")
    refuse_path_clashes()
    captions = load_from_options(options)
    summary = negatives_dataset(captions, output, encode_from_options(options), **rules, block_size=block_size,
                                force=forced())
    click.echo(f"Wrote {output}", err=True)
    if summary.rules.k < rules["k"]:
        each = "" if rules["per_image"] is None else f", at most {rules['per_image']} of each (--per-image)"
        click.echo(f"Note: -k {rules['k']} capped at {summary.rules.k}, the most negatives any caption has (the "
                   f"captions of other images{each})", err=True)
    emit(summary, json_out, print_negatives)

