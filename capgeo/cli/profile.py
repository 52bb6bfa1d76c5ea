"""`capgeo profile`: the geometry profile of a dataset's captions."""

from __future__ import annotations

import click

from capgeo.cli.examples import epilog
from capgeo.cli.options import (
    FiniteFloatRange,
    PairThreshold,
    batch_size_options,
    comma_separated_floats,
    dataset_options,
    emit,
    encode_from_options,
    encoder_options,
    floats_text,
    image_embeddings_option,
    json_option,
    load_from_options,
    max_tokens_option,
    pair_options,
    ray_option,
    refuse_path_clashes,
    reproduce_command,
    row_file_output,
    seed_option,
    sweep_from_options,
    sweep_options,
    unused_option_notes,
)
from capgeo.cli.pass_options import block_size_option, precision_option
from capgeo.defaults import COMPANION_MODES, MAX_LOGIT_SCALE, PAIRWISE_MODES
from capgeo.defaults import PER_CAPTION_SUFFIXES as TABLE_SUFFIXES
from capgeo.geometry.profile_options import ProfileOptions
from capgeo.progress import counts_passes

#: every option's default, read from the one place it lives (the dataclass field)
DEFAULTS = ProfileOptions()


@click.command(short_help="The caption geometry of DATA in one terminal summary (and JSON).",
               epilog=epilog("profile"))
@dataset_options
@encoder_options
@max_tokens_option
@batch_size_options
@click.option("--buckets", callback=comma_separated_floats, default=floats_text(DEFAULTS.buckets), show_default=True,
              metavar="EDGES",
              help="Cosine edges of the hardness buckets of in-batch negatives.")
@click.option("--relative-buckets", is_flag=True,
              help="Also bucket by the dataset's own pairwise quantiles (p50, p90, p99): "
                   "comparable across encoders whose cosines live on different scales.")
@click.option("--relative-quantiles", callback=comma_separated_floats, default=None, metavar="LEVELS",
              help=f"Pairwise quantile levels of the relative bucket edges (default {floats_text(DEFAULTS.relative_quantiles)}); "
                   "implies --relative-buckets.")
@click.option("--top-k", type=click.IntRange(min=1), default=DEFAULTS.top_k, show_default=True,
              help="Companions (most similar captions of other groups) kept per caption.")
@block_size_option
@precision_option
@seed_option("Seed of the batch draws and of sampling.")
@click.option("--near-duplicate-threshold", "--threshold", "near_duplicate_threshold", type=PairThreshold(),
              default=DEFAULTS.near_duplicate_threshold, show_default=True, metavar="T",
              help="Cosine at or above which two captions of different images count as near-duplicates "
                   "(--threshold, as in dupes, leak and truncation).")
@click.option("--mode", type=click.Choice(PAIRWISE_MODES), default=DEFAULTS.mode, show_default=True,
              help="exact: all pairs; sampled: estimate from sampled pairs (large datasets); "
                   f"auto: sampled above {DEFAULTS.sampled_above:,} captions.")
@click.option("--sampled-above", type=click.IntRange(min=2), default=DEFAULTS.sampled_above, show_default=True,
              metavar="N", help="With --mode auto, estimate from sampled pairs above this many captions.")
@click.option("--sampled-pairs", type=click.IntRange(min=2), default=DEFAULTS.sampled_pairs, show_default=True,
              metavar="N",
              help="Pairs drawn in sampled mode (every share is then within +-sqrt(ln 40 / 2N) at 95%).")
@click.option("--companions", type=click.Choice(COMPANION_MODES), default=DEFAULTS.companions, show_default=True,
              help="Hardest companions in sampled mode: exact blockwise top-k, or approximate with faiss "
                   "(recall measured on a sample and reported).")
@click.option("--no-companions", is_flag=True,
              help="Leave the per-caption top-k companion lists out of the JSON (keeps the hardest one).")
@click.option("--logit-scale", type=FiniteFloatRange(min=0, min_open=True, max=MAX_LOGIT_SCALE), default=None, metavar="S",
              help="Logit scale s for the gamma suggestion (default: the checkpoint's, else 100).")
@click.option("--no-gamma", is_flag=True, help="Skip the gamma suggestion (see `capgeo gamma`).")
@click.option("--per-caption", type=click.Path(dir_okay=False, path_type=str), default=None, metavar="FILE",
              callback=row_file_output(TABLE_SUFFIXES),
              help="Also write one row per caption (companions, duplicates, hardness quantile) to FILE: "
                   "Parquet, CSV or JSONL by suffix, atomically.")
@image_embeddings_option("Adds the pairs section: image-text alignment, retrieval at initialisation, "
                         "cross-modal false negatives, saturation at the batch size, image twins (capgeo docs pairs).")
@pair_options
@click.option("--false-negatives", type=click.Path(dir_okay=False, path_type=str), default=None, metavar="FILE",
              callback=row_file_output(TABLE_SUFFIXES),
              help="With --image-embeddings: also write every cross-modal false negative (ids, cosines) to FILE, to "
                   "mask during training: Parquet, CSV or JSONL by suffix, atomically.")
@sweep_options
@json_option
@ray_option
@counts_passes
def profile(json_out, per_caption, max_tokens, logit_scale, no_gamma, batch_sizes, n_batches, buckets, relative_buckets,
            relative_quantiles, top_k, block_size, precision, seed, near_duplicate_threshold, mode, sampled_above,
            sampled_pairs, companions, no_companions, image_embeddings, delta, image_threshold, false_negatives,
            **options):
    """Profile the caption geometry of DATA: lengths and truncation, pairwise and
    hardest-companion cosines, in-batch hardness per batch size, duplicates."""
    from capgeo.geometry.profile_options import options_unused_by
    from capgeo.pipeline import ImageOptions, PairOptions, run_profile

    refuse_path_clashes()
    profile_options = ProfileOptions(
        batch_sizes=batch_sizes or None, n_batches=n_batches, buckets=buckets,
        relative_buckets=relative_buckets or relative_quantiles is not None, top_k=top_k, block_size=block_size,
        precision=precision, seed=seed, near_duplicate_threshold=near_duplicate_threshold, mode=mode,
        sampled_above=sampled_above, sampled_pairs=sampled_pairs, companions=companions,
        include_companions=not no_companions,
        **({} if relative_quantiles is None else {"relative_quantiles": relative_quantiles}))
    sweep = sweep_from_options(options)
    captions = load_from_options(options)
    from capgeo.geometry.estimate import pairwise_mode

    # the pipeline checks every option before the encoding
    run = run_profile(
        captions, encode_from_options(options, max_tokens=max_tokens), profile_options, command=reproduce_command(),
        gamma=not no_gamma, logit_scale=logit_scale, per_caption=per_caption,
        # the terminal summary shows none of the N x k companion lists: built only for the JSON
        companion_lists=json_out is not None,
        # the pairs section wherever there are image vectors: the file given, else the encoder's image tower
        pairs=PairOptions(image_embeddings, delta, image_threshold, false_negatives),
        images=ImageOptions() if image_embeddings is None else None, sweep=sweep,
    )
    result, resolved = run.profile, run.batch_sizes
    mode_used = result.options.mode_used
    unused = options_unused_by(mode_used, precision=precision, companions=companions, mode=mode)
    unused += unused_option_notes(
        ("sampled_pairs", pairwise_mode(mode, len(captions), sampled_above) == "exact",
         "applies to the sampled estimate; the exact pass took every pair"),
        ("sampled_above", mode != "auto", f"chooses the mode under --mode auto; --mode {mode} was given"),
        ("logit_scale", no_gamma and image_embeddings is None,
         "sets the scale of the suggested gamma, which --no-gamma left out"),
        *((name, result.pairs is None, "applies to the pairs section, which needs image vectors: give "
           "--image-embeddings or a CLIP-style --encoder over a dataset that names its images")
          for name in ("false_negatives", "delta", "image_threshold")))
    for note in [*resolved.notes, *run.image_notes, *unused]:   # after the work, so that an error stays the only line
        click.echo(f"Note: {note}", err=True)
    for written in (per_caption, false_negatives if result.pairs is not None else None):
        if written is not None:
            click.echo(f"Wrote {written}", err=True)
    from capgeo.terminal.profile import print_profile

    emit(result, json_out, print_profile)
