"""The words two captions share and those only one of them has, marked for the terminal: in one
colour and another, or [shared] and {differs} where there is no colour (`capgeo dupes`, `capgeo leak`)."""

from __future__ import annotations

from capgeo.display import visible

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
        rendered.append(visible(text[at:span["start"]]))
        word = visible(text[span["start"]:span["end"]])
        if plain:
            opening, closing = SHARED_MARKS if span["kind"] == "shared" else DIFFERING_MARKS
            rendered.append(f"{opening}{word}{closing}")
        else:
            rendered.append(word, style=SHARED_STYLE if span["kind"] == "shared" else DIFFERING_STYLE)
        at = span["end"]
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
