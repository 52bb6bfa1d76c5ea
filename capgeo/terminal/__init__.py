"""The terminal renderer layer: the console every command prints its summary to, and the renderers
that draw typed results on it (capgeo.terminal.<finding>)."""

from __future__ import annotations

from capgeo.display import visible

#: narrower than this, tables would be cut to one character a cell ("n…", "4…"): lay them out at this
#: width and let the terminal wrap the lines, which loses nothing
MIN_WIDTH = 80


def console(**options):
    """A rich Console at least MIN_WIDTH columns wide (unless ``width`` is given)."""
    from rich.console import Console

    made = Console(**options)
    if "width" not in options and made.width < MIN_WIDTH:
        made = Console(width=MIN_WIDTH, **options)
    made.on_broken_pipe = _broken_pipe   # ended as every command's write to a closed pipe is (capgeo.cli)
    return made


def _broken_pipe() -> None:
    # rich calls this inside its own `except BrokenPipeError`, and would exit with status 1
    import errno

    raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def shown(text, before_tag: bool = False) -> str:
    """User text for a string that rich reads as markup: made visible, and its brackets escaped
    (a file named caps[train].jsonl would print as caps.jsonl; one with [/x] would end in a traceback).

    rich's escape doubles a final backslash so that it cannot escape a tag that follows; where
    none follows, the doubled backslash was shown ("backslash\\\\"): ``before_tag`` says which."""
    from rich.markup import escape

    text = visible(str(text))
    escaped = escape(text)
    if not before_tag and text.endswith("\\") and not text.endswith("\\\\"):
        return escaped[:-1]  # the backslash escape() added
    return escaped


def print_unclipped(console, table) -> None:
    """A table whose cells must not be cut ("0.…", "26…" in a bucket table of nine edges at 80
    columns): laid out at the least width that keeps every word whole when the console is narrower,
    as MIN_WIDTH does for narrow terminals; the terminal wraps the long lines, which loses nothing."""
    # the minimum: every cell at its longest word, headers wrapped at their spaces (which loses nothing)
    needed = console.measure(table, options=console.options.update_width(10_000)).minimum
    if needed <= console.width:
        console.print(table)
        return
    width = console.width
    console.width = needed
    try:
        console.print(table)
    finally:
        console.width = width


def add_whole_word_columns(table, headers, **options) -> None:
    """Columns whose headers wrap at their spaces but never cut a word ("0.6-…", "batch…"); with
    :func:`print_unclipped`, no cell is cut either."""
    for header in headers:
        table.add_column(header, min_width=max(map(len, str(header).split()), default=1), **options)
