"""`capgeo batches DATA --batch-size B -o batches.jsonl`: training batches without false negatives."""

from __future__ import annotations

import click

from capgeo.cli.options import (
    PairThreshold,
    dataset_options,
    emit,
    encode_from_options,
    encoder_options,
    forced,
    json_option,
    load_from_options,
    refuse_path_clashes,
    seed_option,
    writable_output,
)
from capgeo.defaults import BATCHES_EPOCHS, NEAR_DUPLICATE_THRESHOLD
from capgeo.progress import counts_passes


@click.command("batches", short_help="Training batches with no two captions of one image, copies or near-duplicates.")
@dataset_options
@encoder_options
@click.option("--batch-size", type=click.IntRange(min=2), required=True, metavar="B",
              help="Captions per batch: your training run's contrastive batch.")
@click.option("--threshold", type=PairThreshold(), default=NEAR_DUPLICATE_THRESHOLD, show_default=True,
              metavar="T", help="Captions of different images at cosine >= T are near-duplicates: never in one batch.")
@seed_option("Seed of the order; epoch e uses seed + e.")
@click.option("--epochs", type=click.IntRange(min=1), default=BATCHES_EPOCHS, show_default=True,
              help="Epochs of batches to plan, each in its own order.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), callback=writable_output,
              help="Write the batches to FILE (JSON lines: epoch, batch, indices, ids; docs/batches.md).")
@json_option
@counts_passes
def batches(batch_size, threshold, seed, epochs, output, json_out, **options):
    """Plan epochs of training batches of B captions in which no two captions describe one image,
    are exact copies, or are near-duplicates (cosine >= --threshold): each a false negative in a
    contrastive batch. Prints how many batches the plan rearranged against a plain shuffle, the
    share of captions it left out, and the conflicts the plain shuffle would have had. Load the
    file in training with capgeo.training.sampler.HNCLIPBatchSampler.from_jsonl. See
    `capgeo docs batches`."""
    from capgeo.pipeline import batches_dataset

    refuse_path_clashes()
    captions = load_from_options(options)
    result = batches_dataset(captions, encode_from_options(options), batch_size=batch_size, threshold=threshold,
                             seed=seed, epochs=epochs, output=output, force=forced())
    if output:
        click.echo(f"Wrote {output}", err=True)
    from capgeo.terminal.batches import print_batches

    emit(result, json_out, print_batches)

