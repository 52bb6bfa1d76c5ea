"""`capgeo encode`'s summary on the terminal, from its typed result (capgeo.encoders.embed.EncodeSummary)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from capgeo import terminal
from capgeo.terminal import shown

if TYPE_CHECKING:
    from capgeo.encoders.embed import EncodeSummary

#: what each origin of the vectors (capgeo.encoders.base.Embeddings.origin) is called in the summary
ORIGIN_WORDS = {"cache": "cache hit (nothing encoded)", "resumed": "resumed from a partial cache entry",
                "encoded": "encoded", "precomputed": "read from the vector file"}


def print_encode_summary(summary: EncodeSummary) -> None:
    """`capgeo encode`'s summary: the encoder, the captions, their tokens and where the vectors came from."""
    from rich.table import Table

    info = summary.encoder
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("encoder", shown(f"{info['name']} ({info['kind']}, spec {info['spec']!r})"))
    table.add_row("width", str(summary.width))
    context = f"{info['context_length']} tokens" if info["context_length"] else "n/a (precomputed)"
    table.add_row("context", context + (f", cut to {summary.max_tokens}"
                                        if summary.max_tokens and summary.max_tokens != info["context_length"]
                                        else ""))
    if info["logit_scale"] is not None:
        table.add_row("logit scale", f"{info['logit_scale']:.2f}")
    table.add_row("fingerprint", info["fingerprint"][:16])
    groups = f" in {summary.groups} groups" if summary.groups is not None else ""
    table.add_row("captions", f"{summary.captions}{groups}")
    tokens = summary.tokens
    if tokens:
        table.add_row("tokens", f"mean {tokens['mean']:.1f}, median {tokens['median']:g}, "
                                f"p99 {tokens['p99']:.1f}, max {tokens['max']}")
        table.add_row("truncated", f"{tokens['truncated']} ({tokens['truncated_fraction']:.1%}) "
                                   f"longer than {summary.max_tokens} tokens")
    else:
        table.add_row("tokens", "unknown (precomputed vectors)")
    table.add_row("vectors", f"{ORIGIN_WORDS[summary.origin]}, {summary.seconds:.2f} s")
    for note in summary.notes:
        table.add_row("note", shown(note))
    if summary.output is not None:
        aligned = ("rows in caption order (no ids)" if summary.output["aligned_by"] == "row"
                   else "with caption ids")
        table.add_row("wrote", f"{shown(summary.output['path'])} ({aligned})")
    terminal.console().print(table)
