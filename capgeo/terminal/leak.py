"""The terminal renderer of `capgeo leak`: per evaluation set, how many captions have a training
twin, the images behind them, and the closest pairs with shared and differing words marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from capgeo import terminal

if TYPE_CHECKING:
    from capgeo.geometry.typed_profile import Leak


def print_leak(leak: "Leak", written_to: str | None = None) -> None:
    """Print a leak result (capgeo.geometry.typed_profile.Leak); ``written_to``: where -o wrote the ids."""
    from rich.text import Text

    from capgeo.display import short_id, visible
    from capgeo.terminal import shown
    from capgeo.terminal.dupes import highlighted, is_plain, legend

    console = terminal.console(highlight=False)
    plain = is_plain(console)  # piped, the shared and differing words are marked as `dupes` marks them
    spec = None if leak.encoder is None else leak.encoder.spec
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
        if entry.images is not None:
            from capgeo.findings.image_leak import describe_image_leak

            console.print(f"  {visible(describe_image_leak(entry.images))}")
        for rank, pair in enumerate(entry.pairs, start=1):
            flag = "  [bold red]EXACT DUPLICATE[/]" if pair.exact_duplicate else ""
            console.print(f"  [bold]#{rank}[/bold]  cosine {pair.cosine:.4f}  jaccard {pair.jaccard:.2f}{flag}")
            for side, caption_id, text, spans in (("eval", pair.eval_id, pair.eval_text, pair.spans_eval),
                                                  ("train", pair.train_id, pair.train_text, pair.spans_train)):
                console.print(Text.assemble(f"    {side:<6}", (visible(short_id(caption_id)), "cyan"), "  ",
                                            highlighted(text, spans, plain)))
    console.print()
    where = (f"their ids are in {shown(str(written_to))}" if written_to is not None
             else "-o FILE writes their ids")
    console.print(f"[bold]{len(leak.train_ids_to_drop):,} training captions to drop[/bold] ({where})")
