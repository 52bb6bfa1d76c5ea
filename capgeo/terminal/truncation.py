"""`capgeo truncation` on the terminal: the truncation section of a typed profile (docs/truncation.md)."""

from __future__ import annotations

from capgeo import terminal
from capgeo.display import visible

#: characters of the unseen part shown on the terminal (the JSON has the whole text)
UNSEEN_SHOWN = 240
SEEN_STYLE = ""
UNSEEN_STYLE = "dim"
CUT_MARK = " ‖ "


def _fmt(value, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def print_truncation(result, console=None) -> None:
    """The truncation section of a typed profile on ``console`` (default: the terminal's, without
    highlighting)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = console or terminal.console(highlight=False)
    section, encoder, dataset = result.truncation, result.encoder, result.dataset
    tokens = section.tokens
    console.print(Text(f"{visible(dataset.source)}: {section.n_captions:,} captions, {section.n_groups:,} "
                       f"groups; encoder {visible(encoder.spec)} ({visible(encoder.name)}, context "
                       f"{section.context_length} tokens)",
                       style="dim"))
    console.print(f"Caption tokens: mean {_fmt(tokens.mean, '.1f')}, median "
                  f"{_fmt(tokens.quantile('p50'), '.0f')}, p90 {_fmt(tokens.quantile('p90'), '.0f')}, "
                  f"max {_fmt(tokens.max, '.0f')}")

    per_length = section.per_length
    names = [f"{entry.max_tokens}" + ("*" if entry.reference else "") for entry in per_length]

    geometry = Table(title="Geometry by maximum token length", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("tokens", "cut", "neg mean", "HC mean", "HC p50", "HC p90",
                   f">= {section.threshold:g}", "cut-only"):
        geometry.add_column(column, justify="right", no_wrap=True)
    for name, entry in zip(names, per_length):
        hardest = entry.hardest_companion
        geometry.add_row(name, f"{entry.share_cut:.1%}", _fmt(entry.pairwise.mean), _fmt(hardest.mean),
                         _fmt(hardest.quantile("p50")), _fmt(hardest.quantile("p90")),
                         f"{entry.near_duplicates.n_pairs:,}",
                         f"{entry.near_duplicates.n_truncation_only:,}")
    console.print(geometry)
    console.print(Text(f"tokens: maximum token length L (* the full context, the reference); "
                       f"neg: cosine of captions of different groups; HC: hardest companion (each caption's most "
                       f"similar caption of another group); >= {section.threshold:g}: near-duplicate pairs of "
                       "different groups; cut-only: of those, the pairs below it at full context.", style="dim"))

    buckets = Table(title=f"In-batch negatives, B = {section.batch_size}, {section.n_batches} batches "
                          f"(seed {section.seed}, the same batches at every length)", title_justify="left",
                    box=box.SIMPLE_HEAD)
    terminal.add_whole_word_columns(buckets, ("tokens", *per_length[0].buckets.labels, "hardest p50"),
                                    justify="right")
    for name, entry in zip(names, per_length):
        buckets.add_row(name, *(f"{share:.2%}" for share in entry.buckets.shares),
                        _fmt(entry.hardest_in_batch.quantile("p50")))
    terminal.print_unclipped(console, buckets)

    moved = Table(title="How far embeddings move: cosine to the full-context embedding", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for column in ("tokens", "all: mean", "all: p10", "cut: n", "cut: mean", "cut: p10", "cut: min"):
        moved.add_column(column, justify="right")
    for name, entry in zip(names, per_length):
        # each a summary of cosines to the full-context embedding: of every caption, of the cut ones
        every, cut = entry.movement.all, entry.movement.cut
        moved.add_row(name, _fmt(every.mean), _fmt(every.quantile("p10")), f"{cut.count:,}",
                      _fmt(cut.mean), _fmt(cut.quantile("p10")), _fmt(cut.min))
    console.print(moved)
    _render_pairs(section, console)


def _render_pairs(section, console) -> None:
    from rich.text import Text

    pairs = section.truncation_only_pairs
    if not pairs:
        counted = sum((entry.near_duplicates.n_truncation_only if entry.near_duplicates else None) or 0
                      for entry in section.per_length)
        if counted:  # --top 0: counted in the table above, none listed
            console.print(f"{counted:,} truncation-only near-duplicate pairs are counted above; none listed "
                          f"(--top {section.max_listed}).")
        else:
            console.print(f"No pair is a near-duplicate (cosine >= {section.threshold:g}) only because of "
                          "truncation.")
        return
    console.print(Text.assemble(
        ("Near-duplicates only because of truncation", "bold"),
        f" (cosine >= {section.threshold:g} when cut, below at full context). ",
        ("seen by the encoder", SEEN_STYLE), CUT_MARK, ("not seen", UNSEEN_STYLE)))
    for number, pair in enumerate(pairs, start=1):
        console.print(Text.assemble(
            (f"{number}. L={pair.max_tokens}", "bold"),
            f"  cosine {pair.cosine_at_length:.4f} at {pair.max_tokens} tokens, "
            f"{pair.cosine_full:.4f} at {section.reference_length}"))
        for caption in (pair.a, pair.b):
            console.print(_caption_text(caption))


def _caption_text(caption):
    """One caption of a listed pair (a CutCaption), the part the encoder did not see dimmed."""
    from rich.padding import Padding
    from rich.text import Text

    text, offset = caption.text, caption.cut_offset
    heading = Text.assemble((visible(caption.id), "cyan"),
                            (f"  (group {visible(caption.group)}, {caption.tokens} tokens)", "dim"))
    body = Text()
    if offset is None:
        body.append(visible(text))
    else:
        body.append(visible(text[:offset]), style=SEEN_STYLE)
        unseen = text[offset:]
        if unseen.strip():
            body.append(CUT_MARK, style="bold red")
            shown = unseen if len(unseen) <= UNSEEN_SHOWN else unseen[:UNSEEN_SHOWN].rstrip() + " …"
            body.append(visible(shown.lstrip()), style=UNSEEN_STYLE)
    return Padding(Text.assemble(heading, "\n", body), (0, 0, 0, 4))
