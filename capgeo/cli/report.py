"""`capgeo report` and `capgeo compare`: self-contained HTML reports."""

from __future__ import annotations

import click

from capgeo.cli.options import (
    dataset_options,
    encoder_options,
    load_from_options,
    reproduce_command,
    writable_output,
)


def _default_output(source: str) -> str:
    from pathlib import Path

    return f"{Path(source).stem or 'capgeo'}.html"


def _wrote(path, notes) -> None:
    from pathlib import Path

    size = Path(path).stat().st_size
    click.echo(f"Wrote {path} ({size / 1e6:.1f} MB)", err=True)
    for note in notes:
        click.echo(f"  note: {note}", err=True)


_shared_profile_options = [
    click.option("--batch-size", "batch_sizes", type=click.IntRange(min=2), multiple=True, metavar="B",
                 help="Batch size of the in-batch statistics and gamma diagnostics; repeat for several "
                      "(default 16 and 128, those the dataset can fill)."),
    click.option("--n-batches", type=click.IntRange(min=1), default=200, show_default=True,
                 help="Random batches drawn per batch size."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of the batch draws."),
]


def _profile_options(command):
    for decorator in reversed(_shared_profile_options):
        command = decorator(command)
    return command


@click.command()
@dataset_options
@encoder_options
@_profile_options
@click.option("--max-tokens", type=click.IntRange(min=2), default=None,
              help="Cut captions to this many tokens (default: the encoder's context length).")
@click.option("--no-dupes", is_flag=True, help="Leave out the near-duplicate gallery.")
@click.option("--no-gamma", is_flag=True, help="Leave out the gamma diagnostics.")
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
def report(batch_sizes, n_batches, seed, max_tokens, no_dupes, no_gamma, truncation, leak, fill_missing, save_profile,
           output, **options):
    """Write one self-contained HTML report of DATA's caption geometry: summary, alerts,
    figures, near-duplicate gallery, gamma diagnostics and provenance.

    DATA is a dataset, or a profile saved with `capgeo profile --json FILE` (or
    --save-profile), which is drawn without recomputing anything it holds.
    The file opens offline: plotly's JavaScript is inlined once."""
    from capgeo.report.build import build_report, fill_missing as complete, is_profile_file, load_saved_profile
    from capgeo.report.build import report_dataset, save_profile as write_profile

    source = options["data"]
    output = output or _default_output(source)
    if is_profile_file(source):
        if leak:
            from capgeo.errors import CapgeoError

            raise CapgeoError(f"--leak needs DATA to be a dataset, not a saved profile ({source}); "
                              "run `capgeo report DATASET --leak EVAL`")
        given = {**options, "max_tokens": max_tokens, "batch_size": batch_sizes}
        ignored = [name for name in ("encoder", "text_column", "captions_column", "id_column", "group_column",
                                     "split", "limit", "max_tokens", "batch_size") if given.get(name)]
        if ignored:
            click.echo(f"Note: {source} is a saved profile, drawn as it is; ignored: "
                       + ", ".join("--" + name.replace("_", "-") for name in ignored), err=True)
        report_input = load_saved_profile(source)
        if fill_missing:
            report_input = complete(report_input, device=options["device"], cache_dir=options["cache_dir"],
                                    use_cache=not options["no_cache"])
    else:
        captions = load_from_options(options)
        report_input = report_dataset(
            captions, options.pop("encoder"), device=options.pop("device"), cache_dir=options.pop("cache_dir"),
            use_cache=not options.pop("no_cache"), max_tokens=max_tokens, batch_sizes=batch_sizes or None,
            n_batches=n_batches, seed=seed, dupes=not no_dupes, gamma=not no_gamma, truncation=truncation,
            leak=leak, command=reproduce_command())
    if save_profile:
        write_profile(report_input.profile, save_profile)
        click.echo(f"Wrote {save_profile}", err=True)
    path = build_report(report_input, output, command=reproduce_command())
    _wrote(path, report_input.notes)


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=str))
@_profile_options
@click.option("--encoder", "encoders", multiple=True, metavar="SPEC",
              help="Encoder for dataset SOURCES; repeat to compare one dataset under several encoders "
                   "(default: the embedded all-MiniLM-L6-v2).")
@click.option("--device", default=None, help="cuda, mps or cpu; default: the best available.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Embedding cache folder (default: $CAPGEO_CACHE or ~/.cache/capgeo).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the embedding cache.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Keep only the first N captions of each dataset.")
@click.option("--label", "labels", multiple=True, help="Name of each profile in the figures, in order (default: "
                                                     "dataset name, plus the encoder when needed).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default="compare.html",
              callback=writable_output,
              show_default=True, metavar="FILE", help="HTML file to write.")
def compare(sources, encoders, limit, labels, batch_sizes, n_batches, seed, output, **options):
    """Compare saved profiles and/or datasets on one page: overlaid cosine distributions,
    bucket composition and caption lengths, summaries side by side.

    SOURCES are profile JSON files and/or datasets (profiled with each --encoder);
    for example `capgeo compare docci.json coco.json` or
    `capgeo compare DATA --encoder ViT-B-32/openai --encoder longclip-L`."""
    from capgeo.captions import load_captions
    from capgeo.errors import CapgeoError
    from capgeo.report.build import build_compare, is_profile_file, load_saved_profile, report_dataset

    profiles = []
    for source in sources:
        if is_profile_file(source):
            if encoders:
                click.echo(f"  note: {source} is a saved profile; --encoder does not apply to it", err=True)
            profiles.append(load_saved_profile(source).profile)
            continue
        captions = load_captions(source, limit=limit)
        for encoder in encoders or (None,):
            profiles.append(report_dataset(
                captions, encoder, device=options["device"], cache_dir=options["cache_dir"],
                use_cache=not options["no_cache"], batch_sizes=batch_sizes or None, n_batches=n_batches, seed=seed,
                dupes=False, gamma=True, command=reproduce_command()).profile)
    if len(profiles) < 2:
        raise CapgeoError("compare needs at least two profiles: give two or more SOURCES, "
                          "or one dataset with two or more --encoder")
    if labels and len(labels) != len(profiles):
        raise CapgeoError(f"--label given {len(labels)} times for {len(profiles)} profiles")
    path = build_compare(profiles, output, labels=labels or None, command=reproduce_command())
    _wrote(path, [])
