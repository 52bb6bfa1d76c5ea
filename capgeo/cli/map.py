"""`capgeo map`: a caption map (2-D projection of the caption embeddings) as one HTML page."""

from __future__ import annotations

import click

from capgeo.cli.options import (
    dataset_options,
    default_output_stem,
    encode_from_options,
    encoder_options,
    force_option,
    forced,
    load_from_options,
    refuse_path_clashes,
    reproduce_command,
    seed_option,
    writable_default_output,
    writable_output,
)
from capgeo.defaults import NEAR_DUPLICATE_THRESHOLD


@click.command("map", short_help="A caption map of DATA: a 2-D projection of its caption embeddings (HTML).")
@dataset_options
@encoder_options
@seed_option("Seed of the projection and of the sample.")
@click.option("--max-points", type=click.IntRange(min=1), default=None,
              help="Map at most this many captions, a random sample of them above it (default 100,000).")
@click.option("--threshold", type=click.FloatRange(-1, 1), default=NEAR_DUPLICATE_THRESHOLD, show_default=True,
              help="Cosine at or above which captions of different images form a near-duplicate set (marked), "
                   "and at or above which a caption leaks into an --leak evaluation set.")
@click.option("--leak", "leak", multiple=True, type=click.Path(exists=True, dir_okay=True, path_type=str),
              metavar="EVAL", help="Mark the captions of DATA with a twin in this evaluation set (`capgeo leak "
                                   "DATA EVAL`); repeat for several.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              callback=writable_output, metavar="FILE",
              help="HTML file to write (default: DATA's name with .map.html, in the current folder).")
@force_option
def map_command(seed, max_points, threshold, leak, output, **options):
    """Write a caption map of DATA: each caption a point of a 2-D projection (openTSNE) of its
    embedding, coloured by its hardest-companion cosine, near-duplicate sets and (--leak) leaked
    captions marked; hover shows id, image and text, a search box finds captions. Deterministic
    for --seed. Needs the map extra: pip install -e '.[map]'."""
    from capgeo.map import DEFAULT_MAX_POINTS, require_projection

    require_projection()   # before the (slow) encoding
    source = options["data"]
    defaults = () if output else ("--output",)
    output = output or writable_default_output(f"{default_output_stem(source)}.map.html")
    refuse_path_clashes(defaults=defaults, **{"--output": output})
    from capgeo.map import MapOptions, write_map

    captions = load_from_options(options)
    written = write_map(captions, output, MapOptions(seed=seed, max_points=max_points or DEFAULT_MAX_POINTS,
                                                     near_duplicate_threshold=threshold),
                        encode=encode_from_options(options), leak=leak, command=reproduce_command(), force=forced())
    from capgeo._atomic import written_path

    click.echo(f"Wrote {written_path(written)} ({written.stat().st_size / 1e6:.1f} MB)", err=True)
