"""`capgeo batches DATA --batch-size B -o batches.jsonl`: training batches without false negatives."""

from __future__ import annotations

import click

from capgeo import terminal
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
from capgeo.terminal import shown
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
    emit(result, json_out, print_batches)


def print_batches(result: dict) -> None:
    console = terminal.console(highlight=False)
    spec = None if result["encoder"] is None else result["encoder"]["spec"]
    epochs = f" x {result['epochs']} epochs" if result["epochs"] > 1 else ""
    console.print(f"Batches of {result['batch_size']} for {result['n_captions']:,} captions of "
                  f"{result['n_groups']:,} images{epochs}, seed {result['seed']}")
    console.print(f"Near-duplicates: cosine >= {result['threshold']:g} under encoder {shown(spec)}")
    total = result["n_captions"] * result["epochs"]
    short = f", {result['n_short_batches']:,} short of {result['batch_size']}" if result["n_short_batches"] else ""
    console.print(f"  batches              {result['n_batches']:,}{short}")
    console.print(f"  captions placed      {result['n_placed']:,} of {total:,}")
    console.print(f"  not placed           {result['n_not_placed']:,} ({result['share_not_placed']:.2%}; "
                  f"{result['n_captions'] % result['batch_size']:,} per epoch are past the last full batch)")
    console.print(f"  rearranged batches   {result['n_rearranged_batches']:,}")
    avoided = result["conflicts_avoided"]
    console.print(f"  conflicts avoided    {avoided['same_image']:,} same image, {avoided['exact_copy']:,} exact copy, "
                  f"{avoided['near_duplicate']:,} near-duplicate")
    console.print("  (rearranged, avoided: against a plain shuffle of the same seed)")
