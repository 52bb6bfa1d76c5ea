"""`capgeo truncation`: what the context length does to the caption geometry."""

from __future__ import annotations

import click

from capgeo.cli.options import (
    PairThreshold,
    comma_separated_floats,
    dataset_options,
    emit,
    encode_from_options,
    encoder_options,
    floats_text,
    json_option,
    load_from_options,
    refuse_path_clashes,
    reproduce_command,
    seed_option,
)
from capgeo.cli.pass_options import block_size_option
from capgeo.defaults import TRUNCATION_LISTED_PAIRS
from capgeo.geometry.profile_options import ProfileOptions
from capgeo.terminal.truncation import print_truncation

#: the defaults shared with `capgeo profile`, read from their one place (the dataclass fields)
DEFAULTS = ProfileOptions()

def _parse_lengths(ctx, param, value):
    if value is None:
        return None
    from capgeo.errors import CapgeoError
    from capgeo.findings.truncation import parse_lengths

    try:
        return parse_lengths(value)
    except CapgeoError as error:
        raise click.BadParameter(str(error).removeprefix("--lengths: ")) from None


@click.command(short_help="What the context length does to the caption geometry of DATA.")
@dataset_options
@encoder_options
@click.option("--lengths", callback=_parse_lengths, default=None, metavar="L1,L2,...",
              help="Maximum token lengths to compare (start/end tokens included); the encoder's full context "
                   "is always added as the reference. Default: 32,64,77,128,248, those below the context.")
@click.option("--batch-size", type=click.IntRange(min=2), default=None, metavar="B",
              help="Effective contrastive batch of the in-batch bucket composition (default 128, the paper's, "
                   "or every image of a smaller dataset). The same batches are used at every length.")
@click.option("--n-batches", type=click.IntRange(min=1), default=DEFAULTS.n_batches, show_default=True,
              help="Random batches drawn (the same ones at every length).")
@click.option("--buckets", callback=comma_separated_floats, default=floats_text(DEFAULTS.buckets), show_default=True,
              metavar="EDGES",
              help="Cosine edges of the in-batch hardness buckets.")
@click.option("--threshold", type=PairThreshold(), default=None, metavar="T",
              help="Near-duplicate cosine (pairs of different groups); default: the profile's, "
                   f"{DEFAULTS.near_duplicate_threshold:g}.")
@seed_option("Seed of the batch draws.")
@click.option("--top", "max_listed", type=click.IntRange(min=0), default=TRUNCATION_LISTED_PAIRS, show_default=True,
              metavar="N",
              help="Truncation-only near-duplicate pairs listed per length (0: none; all are counted).")
@click.option("--top-k", type=click.IntRange(min=1), default=DEFAULTS.top_k, show_default=True,
              help="Companions kept per caption in the pairwise pass.")
@block_size_option
@json_option
def truncation(lengths, threshold, max_listed, json_out, **options):
    """What the context length does to the caption geometry of DATA: for each maximum
    token length, the share of captions cut, the negative and hardest-companion cosines,
    the in-batch buckets and the near-duplicate pairs; the pairs that are near-duplicates
    only because of truncation, with the cut point in their text; and how far each
    caption's embedding moves when more of it is seen. See `capgeo docs truncation`."""
    from capgeo.pipeline import truncation_dataset

    refuse_path_clashes()
    captions = load_from_options(options)
    # the pipeline checks every option before the encoding
    run = truncation_dataset(
        captions, encode_from_options(options),
        _profile_options(options),
        lengths=lengths, threshold=threshold, max_listed=max_listed, command=reproduce_command())
    emit(run.profile, json_out, print_truncation)


def _profile_options(options: dict) -> ProfileOptions:
    """The options `capgeo truncation` shares with `capgeo profile`, read from the command's kwargs."""
    batch_size = options["batch_size"]
    return ProfileOptions(batch_sizes=None if batch_size is None else (batch_size,), n_batches=options["n_batches"],
                          buckets=options["buckets"], seed=options["seed"], top_k=options["top_k"],
                          block_size=options["block_size"])
