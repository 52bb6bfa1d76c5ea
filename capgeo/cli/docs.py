"""`capgeo docs [TOPIC]`: the documentation pages, from an installed wheel as from a checkout."""

from __future__ import annotations

import sys

import click

from capgeo import terminal

HELP = """Show a documentation page (the pages cited as `capgeo docs TOPIC` by other commands' help
and messages), or list the pages without TOPIC. Pages are Markdown, printed as written (pipe them to a
pager or a Markdown viewer)."""


@click.command("docs", help=HELP, short_help="Show a documentation page, or list them.")
@click.argument("topic", required=False)
def docs(topic):
    from capgeo import manual

    if topic is None:
        from rich.markup import escape
        from rich.table import Table

        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(overflow="fold")
        for name, title in manual.topics().items():
            table.add_row(escape(name), escape(title))
        terminal.console(highlight=False).print(table)
        return
    text = manual.page(topic)
    # as written, on a terminal too: rich's Markdown cut the cells of the pages' wide tables ("docci_desc…")
    from capgeo._atomic import write_all

    write_all(sys.stdout, text.encode("utf-8"))
