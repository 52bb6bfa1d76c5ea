"""`capgeo leak TRAIN EVAL [EVAL ...]`: evaluation captions with a twin in the training set."""

from __future__ import annotations

import click

from capgeo.cli.examples import epilog
from capgeo.cli.options import (
    FiniteFloatRange,
    emit,
    encode_from_options,
    encoder_options,
    column_notes,
    image_embeddings_option,
    image_threshold_option,
    json_option,
    pop_load_options,
    read_options,
    refuse_path_clashes,
    warn_skipped,
    writable_output,
)
from capgeo.defaults import FIXED_BLOCK_SIZE, LEAK_NORMALIZE, LEAK_NORMALIZE_RULES
from capgeo.defaults import LEAK_THRESHOLD as DEFAULT_THRESHOLD
from capgeo.defaults import LEAK_TOP as DEFAULT_TOP
from capgeo.display import visible
from capgeo.progress import counts_passes

#: the command's options that make its LeakOptions (capgeo.findings.leak)
LEAK_OPTIONS = ("threshold", "top", "normalize", "block_size", "image_threshold")


@click.command("leak", short_help="Evaluation captions with an exact or near twin among the training captions.",
               epilog=epilog("leak"))
@click.argument("train", type=click.Path(dir_okay=True, path_type=str))
@click.argument("evals", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str),
                metavar="EVAL [EVAL ...]")
@read_options
@encoder_options
@click.option("--threshold", type=FiniteFloatRange(-1.0, 1.0), default=DEFAULT_THRESHOLD, show_default=True,
              metavar="T", help="An eval caption leaks when a training caption has cosine >= T with it "
                                "(exact duplicates always count).")
@click.option("--top", type=click.IntRange(min=0), default=DEFAULT_TOP, show_default=True, metavar="N",
              help="Closest (eval, train) pairs shown per evaluation set (0: none; every twin is still counted, and "
                   "-o lists every training id to drop).")
@click.option("--normalize", type=click.Choice(LEAK_NORMALIZE_RULES), default=LEAK_NORMALIZE, show_default=True,
              help="What two texts may differ by and still be exact twins: none (as written), whitespace (and "
                   "Unicode forms), case (and letter case: every command's rule), period (and a final period).")
@click.option("--block-size", type=click.IntRange(min=1), default=FIXED_BLOCK_SIZE, show_default=True,
              help="Rows per block of the train x eval pass; memory grows with it.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              callback=writable_output, help="Write the training ids to drop (one per line) to FILE, atomically.")
@image_embeddings_option("Used instead of the encoder's image tower to find TRAIN's images among each EVAL's by "
                         "image cosine (and, where the sets name their images, by identical bytes).",
                         "--train-image-embeddings", whose="TRAIN's image vectors")
@image_embeddings_option("Repeat once per EVAL, in the order of the EVAL arguments.", "--eval-image-embeddings",
                         whose="An EVAL's image vectors", multiple=True)
@image_threshold_option("across TRAIN and each EVAL: the encoder's image tower, or the image vectors given")
@json_option
@counts_passes
def leak(train, evals, output, json_out, **options):
    """Captions of the evaluation sets EVAL that have an exact or near-duplicate in the
    training set TRAIN (cosine >= --threshold under one encoder), per evaluation set: how many,
    the share, the closest pairs with shared and differing words highlighted, and the
    training ids to drop to remove the leak; and the evaluation images that are training
    images (by file name; with a CLIP-style encoder or image vectors, by identical bytes and
    image cosine >= --image-threshold). Formats are detected (see `capgeo info`); the
    dataset options (--format, --text-column, ...) apply to TRAIN and to every EVAL."""
    from capgeo.findings.leak import LeakOptions, write_id_list
    from capgeo.pipeline import LeakImages, leak_datasets
    from capgeo.terminal.leak import print_leak

    refuse_path_clashes()
    load_options = pop_load_options(options)
    leak_options = LeakOptions(**{name: options.pop(name) for name in LEAK_OPTIONS})
    images = LeakImages(options.pop("train_image_embeddings"), tuple(options.pop("eval_image_embeddings")))
    notes: list[str] = []
    with column_notes():
        result = leak_datasets(train, evals, encode_from_options(options), load_options=load_options,
                               options=leak_options, on_skipped=warn_skipped, notes=notes, images=images)
    if output is not None:
        write_id_list(result.train_ids_to_drop, output)
        click.echo(f"Wrote {output} ({len(result.train_ids_to_drop):,} training ids)", err=True)
    for note in notes:  # after the work, so that an error stays the only line
        click.echo(f"Note: {visible(note)}", err=True)
    emit(result, json_out, lambda shown: print_leak(shown, written_to=output))
