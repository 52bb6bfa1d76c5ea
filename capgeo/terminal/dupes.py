"""The terminal renderer of the near-duplicate commands (`capgeo dupes`, `dupes-examples`,
`dupes-sets`): a typed ``capgeo.dupes/1`` section (capgeo.geometry.typed_profile's Dupes, or the
NearDuplicatePairs that holds one) as text, the words two captions share in one colour and those
only one of them has in another ([shared] and {differs} where there is no colour)."""

from __future__ import annotations

from capgeo.display import short_id, visible
from capgeo.terminal import shown

#: rich styles; differing words are also underlined so the two kinds differ without colour
SHARED_STYLE = "bold green"
DIFFERING_STYLE = "yellow underline"
#: marks around words where there is no colour (piped, redirected, -o FILE): [shared] and {differs}
SHARED_MARKS = ("[", "]")
DIFFERING_MARKS = ("{", "}")


def highlighted(text: str, spans, plain: bool = False):
    """The caption as rich Text with each span styled by its kind, or, in ``plain`` text,
    wrapped in its kind's marks."""
    from rich.text import Text

    # built piece by piece, each made visible on its own: the spans index the caption as it is,
    # and Text(caption).stylize(span) moved every mark after a "\r" or BEL, which Text drops
    rendered, at = Text(), 0
    for span in spans:  # sorted and never overlapping (`capgeo docs dupes`)
        rendered.append(visible(text[at:span.start]))
        word = visible(text[span.start:span.end])
        if plain:
            opening, closing = SHARED_MARKS if span.kind == "shared" else DIFFERING_MARKS
            rendered.append(f"{opening}{word}{closing}")
        else:
            rendered.append(word, style=SHARED_STYLE if span.kind == "shared" else DIFFERING_STYLE)
        at = span.end
    rendered.append(visible(text[at:]))
    return rendered


def is_plain(console) -> bool:
    """No colour (not a terminal, -o FILE, NO_COLOR): words are marked with brackets instead.
    (NO_COLOR sets ``no_color`` and leaves ``color_system`` as the terminal's.)"""
    return console.color_system is None or console.no_color


def legend(console):
    from rich.text import Text

    if is_plain(console):
        return Text(f"  {SHARED_MARKS[0]}word{SHARED_MARKS[1]}: in both captions   "
                    f"{DIFFERING_MARKS[0]}word{DIFFERING_MARKS[1]}: only in this caption")
    return Text.assemble("  ", ("shared word", SHARED_STYLE), "   ", ("only in this caption", DIFFERING_STYLE))


def render(result, console) -> None:
    """Print a dupes result (the typed Dupes section, or the NearDuplicatePairs of `capgeo dupes`) as text."""
    from rich.text import Text

    dupes = getattr(result, "section", result)  # a NearDuplicatePairs holds its section
    header = f"{dupes.n_captions:,} captions, {dupes.n_groups:,} groups"
    if dupes.encoder is not None:
        header += f", encoder {visible(dupes.encoder.spec)}"
    console.print(Text(header, style="dim"))
    if dupes.components is not None:
        _render_components(dupes, console)
    elif dupes.examples is not None:
        console.print(legend(console))
        _render_examples(dupes, console)
    else:
        console.print(legend(console))
        _render_pairs(dupes, console)


def _score_line(prefix: str, row):
    from rich.text import Text

    line = Text.assemble((prefix, "bold"), f"  cosine {row.cosine:.4f}", f"  jaccard {row.jaccard:.2f}")
    if row.exact_duplicate:
        line.append("  EXACT DUPLICATE", style="bold red")
    return line


def _caption_block(label: str, caption_id: str, group: str, text: str, spans, plain: bool):
    from rich.padding import Padding
    from rich.text import Text

    heading = Text.assemble((f"{label} " if label else "", "bold"), (visible(short_id(caption_id)), "cyan"))
    if group != caption_id:  # one caption per group (DOCCI, Urban-1K): the id says it already
        heading.append(f"  (group {visible(short_id(group))})", style="dim")
    return Padding(Text("\n").join([heading, highlighted(text, spans, plain)]), (0, 0, 0, 4))


def pairs_title(dupes) -> str:
    """What the list is: near-duplicates only when every pair listed reaches the near-duplicate threshold."""
    pairs = dupes.pairs or ()
    near = dupes.near_duplicates.threshold
    threshold, limit = dupes.threshold, dupes.limit
    listed_near = threshold is not None and threshold >= near
    kind = "near-duplicate pairs" if listed_near else "most similar pairs"
    if threshold is not None:
        bound = f"cosine >= {threshold:g}"
    elif pairs:
        bound = f"cosine {pairs[-1].cosine:.4f} to {pairs[0].cosine:.4f}"
    else:
        bound = "none"
    top = f", top {limit}" if limit else ""
    exact = ", exact copies left out" if dupes.skip_exact else ""
    return f"{len(pairs):,} {kind} of different images ({bound}{top}{exact})"


def totals_line(dupes) -> str:
    """The exact count of near-duplicates behind the list, however many it shows."""
    line = dupes.near_duplicates.text()
    if dupes.skip_exact:
        line += f" {dupes.n_exact_skipped or 0:,} exact copies ranked above the last pair shown were skipped."
    elif any(row.exact_duplicate for row in dupes.pairs or ()):
        line += " --skip-exact leaves exact copies out of the list."
    return line


def _render_pairs(dupes, console) -> None:
    from rich.markup import escape

    plain = is_plain(console)
    console.print(f"[bold]{escape(pairs_title(dupes))}[/]")
    console.print(escape(totals_line(dupes)))
    for row in dupes.pairs or ():
        console.print()
        console.print(_score_line(f"#{row.rank}", row))
        console.print(_caption_block("A", row.id_a, row.group_a, row.text_a, row.spans_a, plain))
        console.print(_caption_block("B", row.id_b, row.group_b, row.text_b, row.spans_b, plain))


def _render_examples(dupes, console) -> None:
    from rich.padding import Padding
    from rich.text import Text

    for example in dupes.examples:
        query = example.query
        console.print()
        console.print(Text.assemble(
            (f"quantile {example.quantile:g}", "bold"),
            f" of hardest-companion cosine = {example.target_cosine:.4f};",
            f" this query's hardest companion {example.hardest_cosine:.4f}"))
        plain = is_plain(console)
        console.print(_caption_block("query", query.id, query.group, query.text, [], plain))
        for neighbour in example.neighbours:
            console.print(Padding(_score_line(f"neighbour {neighbour.neighbour_rank}", neighbour), (0, 0, 0, 2)))
            console.print(_caption_block("", neighbour.id_b, neighbour.group_b, neighbour.text_b,
                                         neighbour.spans_b, plain))
            if neighbour.only_a_words:
                console.print(Padding(Text.assemble(("only in query: ", "dim"),
                                                    (visible(", ".join(neighbour.only_a_words)), DIFFERING_STYLE)),
                                      (0, 0, 0, 4)))


def _render_components(dupes, console) -> None:
    from rich.table import Table

    components = dupes.components
    console.print(f"[bold]{len(components):,} near-duplicate sets[/] (connected components of pairs with "
                  f"cosine >= {dupes.components_threshold})")
    if not components:
        return
    table = Table(expand=True)
    for name in ("#", "size", "groups", "weakest", "strongest", "min pair"):
        table.add_column(name, justify="right", no_wrap=True)
    # one line per caption, cut to the width left over
    table.add_column("first captions", ratio=1, no_wrap=True, overflow="ellipsis")
    for row in components[:50]:
        member_min = "" if row.min_member_cosine is None else f"{row.min_member_cosine:.4f}"
        # a caption's own line breaks made one caption look like several
        first = "\n".join(shown(" ".join(text.split())) for text in row.texts[:3])
        table.add_row(str(row.component), str(row.size), str(row.n_groups), f"{row.weakest_link:.4f}",
                      f"{row.strongest_link:.4f}", member_min, first)
    console.print(table)
    if len(components) > 50:
        console.print(f"[dim]... {len(components) - 50:,} more sets (all of them in --output-format jsonl)[/]")
    console.print("[dim]min pair: the smallest cosine between any two members; weakest: the smallest "
                  "cosine among the pairs that hold the set together (its maximum spanning tree)[/]")
    if dupes.dedup is not None:
        _render_dedup(dupes.dedup, dupes.n_captions, dupes.n_groups, console)


def _render_dedup(dedup, n_captions: int, n_groups: int, console) -> None:
    def mean(value):
        return "n/a" if value is None else f"{value:.4f}"

    console.print(f"[bold]Keeping the {dedup.keep} caption of each of the {dedup.n_sets:,} sets[/] drops "
                  f"{dedup.n_captions_dropped:,} of {n_captions:,} captions and {dedup.n_groups_dropped:,} "
                  f"of {n_groups:,} images (images left with no caption); hardest-companion mean "
                  f"{mean(dedup.hardest_companion_mean_before)} -> {mean(dedup.hardest_companion_mean_after)}")
