"""`capgeo gamma`: a starting HN-CLIP gamma with the numbers behind it."""

from __future__ import annotations

import click

from capgeo.cli.examples import epilog
from capgeo.cli.options import (
    FiniteFloatRange,
    batch_size_options,
    dataset_options,
    emit,
    encode_from_options,
    encoder_options,
    gamma_list,
    image_embeddings_option,
    json_option,
    load_from_options,
    refuse_path_clashes,
    reproduce_command,
    seed_option,
    sweep_from_options,
    sweep_options,
)
from capgeo.defaults import GAMMA_HARD_EDGE, MAX_LOGIT_SCALE
from capgeo.progress import counts_passes
from capgeo.terminal.gamma import print_gamma


@click.command(short_help="A starting HN-CLIP gamma for DATA, with its reasons and numbers.",
               epilog=epilog("gamma"))
@dataset_options
@encoder_options
@click.option("--logit-scale", type=FiniteFloatRange(min=0, min_open=True, max=MAX_LOGIT_SCALE), default=None, metavar="S",
              help="Logit scale s (exp of CLIP's logit_scale). Default: the checkpoint's when it has one, else 100 "
                   "(the paper's).")
@click.option("--grid", callback=gamma_list, default=None, metavar="G1,G2,...",
              help="gamma values of the diagnostics table. Default: 0 to 1 in steps of 0.125.")
@batch_size_options
@seed_option("Seed of the batch draw.")
@click.option("--hard-edge", type=FiniteFloatRange(-1, 1), default=GAMMA_HARD_EDGE, show_default=True,
              help="Caption cosine at or above which an in-batch negative counts as hardest-bucket.")
@image_embeddings_option("Adds the loss at initialisation.")
@sweep_options
@json_option
@counts_passes
def gamma(logit_scale, grid, hard_edge, image_embeddings, json_out, **options):
    """Suggest an HN-CLIP gamma for this dataset, encoder, logit scale and batch size.

    The rule (`capgeo docs gamma`) picks the gamma that makes each row's boosted softmax as
    concentrated on the most similar captions as the paper's default (gamma 0.5, s 100,
    B 128) makes it on geometry like the paper's DOCCI statistics.
    """
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.pipeline import gamma_dataset

    refuse_path_clashes()
    captions = load_from_options(options)
    sweep = sweep_from_options(options)
    # the pipeline checks every option before the encoding
    run = gamma_dataset(captions, encode_from_options(options),
                        ProfileOptions(batch_sizes=options["batch_sizes"] or None, n_batches=options["n_batches"],
                                       seed=options["seed"]),
                        logit_scale=logit_scale, grid=grid, hard_edge=hard_edge, image_embeddings=image_embeddings,
                        sweep=sweep, command=reproduce_command())
    profile, resolved = run.profile, run.batch_sizes
    for note in resolved.notes:   # after the work, so that an error stays the only line
        click.echo(f"Note: {note}", err=True)
    emit(profile, json_out, print_gamma)
