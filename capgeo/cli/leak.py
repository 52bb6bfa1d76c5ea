"""`capgeo leak TRAIN EVAL [EVAL ...]`: evaluation captions with a twin in the training set."""

from __future__ import annotations

import click

from capgeo import terminal
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
def leak(train, evals, threshold, top, normalize, block_size, output, train_image_embeddings, eval_image_embeddings,
         image_threshold, json_out, **options):
    """Captions of the evaluation sets EVAL that have an exact or near-duplicate in the
    training set TRAIN (cosine >= --threshold under one encoder), per evaluation set: how many,
    the share, the closest pairs with shared and differing words highlighted, and the
    training ids to drop to remove the leak; and the evaluation images that are training
    images (by file name; with a CLIP-style encoder or image vectors, by identical bytes and
    image cosine >= --image-threshold). Formats are detected (see `capgeo info`); the
    dataset options (--format, --text-column, ...) apply to TRAIN and to every EVAL."""
    from capgeo.findings.leak import write_id_list
    from capgeo.pipeline import LeakImages, leak_datasets

    refuse_path_clashes()
    load_options = pop_load_options(options)
    notes: list[str] = []
    with column_notes():
        result = leak_datasets(train, evals, encode_from_options(options), load_options=load_options,
                               threshold=threshold, top=top, block_size=block_size, normalize=normalize,
                               on_skipped=warn_skipped, image_threshold=image_threshold, notes=notes,
                               images=LeakImages(train_image_embeddings, tuple(eval_image_embeddings)))
    if output is not None:
        write_id_list(result["train_ids_to_drop"], output)
        click.echo(f"Wrote {output} ({len(result['train_ids_to_drop']):,} training ids)", err=True)
    for note in notes:  # after the work, so that an error stays the only line
        click.echo(f"Note: {visible(note)}", err=True)
    emit(result, json_out, lambda shown: print_leak(shown, written_to=output))


def print_leak(result, written_to: str | None = None) -> None:
    """Print a leak result (its ``capgeo.leak/1`` dict or the typed :class:`capgeo.api.Leak`)."""
    from rich.text import Text

    from capgeo.api import Leak
    from capgeo.cli.dupes import highlighted, is_plain, legend
    from capgeo.terminal import shown
    from capgeo.display import short_id, visible

    leak = result if isinstance(result, Leak) else Leak.from_dict(result)
    console = terminal.console(highlight=False)
    plain = is_plain(console)  # piped, the shared and differing words are marked as `dupes` marks them
    spec = None if leak.encoder is None else leak.encoder["spec"]
    console.print(f"[dim]train {shown(leak.train_source)}: {leak.n_train_captions:,} captions; encoder "
                  f"{shown(spec)}; twin = exact duplicate or cosine >= {leak.threshold:g}"
                  + (f" (exact: --normalize {leak.normalize})" if leak.normalize else "") + "[/dim]")
    if any(entry.pairs for entry in leak.evals):
        console.print(legend(console))  # what the marks (or colours) on the words mean, as dupes says
    for entry in leak.evals:
        console.print()
        console.print(f"[bold]{shown(entry.source, before_tag=True)}[/bold]: {entry.n_leaked:,} of "
                      f"{entry.n_captions:,} eval captions ({entry.share_leaked:.1%}) have a training twin "
                      f"({entry.n_exact:,} exact)"
                      + (f"; dropping {entry.n_train_twins:,} training captions removes it" if entry.n_leaked
                         else ""))
        if entry.n_groups_leaked is not None:
            console.print(f"  images: {entry.n_groups_leaked:,} of {entry.n_groups:,} eval images have a caption "
                          f"twinned in training, {entry.n_groups_all_leaked:,} every caption; the twins sit in "
                          f"{entry.n_train_groups_twinned:,} training images")
        if entry.images:
            from capgeo.findings.image_leak import describe_image_leak

            console.print(f"  {visible(describe_image_leak(entry.images))}")
        for rank, pair in enumerate(entry.pairs, start=1):
            flag = "  [bold red]EXACT DUPLICATE[/]" if pair["exact_duplicate"] else ""
            console.print(f"  [bold]#{rank}[/bold]  cosine {pair['cosine']:.4f}  jaccard {pair['jaccard']:.2f}{flag}")
            for side in ("eval", "train"):
                console.print(Text.assemble(f"    {side:<6}", (visible(short_id(pair[f"{side}_id"])), "cyan"), "  ",
                                            highlighted(pair[f"{side}_text"], pair[f"spans_{side}"], plain)))
    console.print()
    where = (f"their ids are in {shown(str(written_to))}" if written_to is not None
             else "-o FILE writes their ids")
    console.print(f"[bold]{len(leak.train_ids_to_drop):,} training captions to drop[/bold] ({where})")
