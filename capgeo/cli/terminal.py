"""The console every command prints its summary to."""

from __future__ import annotations

#: narrower than this, tables were cut to one character a cell ("n…", "4…"): lay them out at this
#: width and let the terminal wrap the lines, which loses nothing
MIN_WIDTH = 80


def console(**options):
    """A rich Console at least MIN_WIDTH columns wide (unless ``width`` is given)."""
    from rich.console import Console

    made = Console(**options)
    if "width" not in options and made.width < MIN_WIDTH:
        made = Console(width=MIN_WIDTH, **options)
    return made
