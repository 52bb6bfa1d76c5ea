"""The terminal renderer of `capgeo negatives`: the typed summary (capgeo.findings.negatives'
NegativesExport) as a table of anchor-negative cosines per rank and one line of counts."""

from __future__ import annotations

from capgeo import terminal
from capgeo.terminal import shown


def print_negatives(summary, console=None) -> None:
    """Print a NegativesExport (to ``console``, default the terminal's)."""
    from rich.table import Table

    console = console or terminal.console(highlight=False)
    rules = summary.rules
    levels = [name for name, _ in summary.cosines[0].quantiles]
    spec = None if summary.encoder is None else summary.encoder.spec
    table = Table(title=f"Anchor-negative cosine, {rules.min_cosine:g} <= cosine < {rules.max_cosine:g} "
                        f"(encoder {shown(spec)})", title_justify="left")
    for column in ("negative rank", "count", "mean", *levels):
        table.add_column(column, justify="right")
    for entry in summary.cosines:
        cells = [entry.mean, *(value for _, value in entry.quantiles)]
        table.add_row(entry.rank, f"{entry.count:,}", *("n/a" if v is None else f"{v:.3f}" for v in cells))
    console.print(table)
    kept = [f"at most {rules.per_image} per image" if rules.per_image else "any number per image"]
    if rules.margin is not None:
        kept.append(f"margin {rules.margin:g} below the lowest positive")
    console.print(f"{summary.n_negatives:,} negatives for {summary.n_anchors:,} captions ({', '.join(kept)}; "
                  f"no text of the anchor's own image, no text twice); {summary.n_anchors_short:,} captions have "
                  f"fewer than {rules.k} in range.")
