"""`capgeo encoders` and `capgeo encode`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from capgeo import terminal
from capgeo.terminal import shown
from capgeo.cli.options import (
    dataset_options,
    emit,
    encode_from_options,
    encoder_options,
    forced,
    json_option,
    load_from_options,
    ray_option,
    refuse_path_clashes,
    writable_output,
)

OUTPUT_SUFFIXES = (".npy", ".npz", ".parquet")
#: what each origin of the vectors (capgeo.encoders.base.Embeddings.origin) is called in the summary
ORIGIN_WORDS = {"cache": "cache hit (nothing encoded)", "resumed": "resumed from a partial cache entry",
                "encoded": "encoded", "precomputed": "read from the vector file"}

if TYPE_CHECKING:
    from capgeo.encoders.embed import EncodeSummary


@click.command(short_help="The kinds of --encoder spec, and what the hub ones download on first use.")
@json_option
def encoders(json_out):
    """List the kinds of --encoder spec, with examples, and what the hub specs download on first use."""
    from capgeo.encoders.hub import HUB_CACHE
    from capgeo.encoders.registry import list_downloads, list_encoder_kinds

    kinds, downloads = list_encoder_kinds(), list_downloads()
    if json_out:
        from capgeo.cli.options import print_json

        refuse_path_clashes()
        print_json({"schema": "capgeo.encoders/1",
                    "encoders": [{"kind": k.kind, "examples": list(k.examples), "notes": k.notes} for k in kinds],
                    "downloads": [download.to_dict() for download in downloads]},
                   json_out)
        return
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = terminal.console()
    table = Table(title="Encoder specs (--encoder SPEC)", show_lines=True)
    table.add_column("kind", style="bold", no_wrap=True)
    # a spec is typed as one piece: never break it, let the notes wrap instead
    table.add_column("examples", no_wrap=True)
    table.add_column("notes", overflow="fold")  # a long hub id has no space to wrap at
    for kind in kinds:
        table.add_row(kind.kind, "\n".join(kind.examples), kind.notes)
    console.print(table)
    console.print()
    console.print(f"Downloaded on first use, into huggingface_hub's cache ({HUB_CACHE}):", markup=False)
    for download in downloads:
        fields = download.to_dict()
        console.print(Padding(Text(f"--encoder {download.spec}: {', '.join(download.files)} of {download.repo}, "
                                   f"{download.what}; {download.size}"), (0, 0, 0, 2)))
        console.print("    fetch it ahead of time:", markup=False)
        for line in _command_lines(fields["fetch_command"], console.width, indent=6):
            console.print(line, markup=False, soft_wrap=True)
        console.print("    offline, a copied file:", markup=False)
        console.print(f"      --encoder {download.offline_spec}", markup=False, soft_wrap=True)
    console.print(Text("A file fetched ahead of time, or that cache folder copied from a machine with a network, "
                       "is found offline. `hf` is huggingface_hub's command line (before 1.0: "
                       "`huggingface-cli download` with the same arguments). More: `capgeo docs encoders`."))


def _command_lines(command: str, width: int, indent: int) -> list[str]:
    """A shell command to copy, indented, never cut mid-word: where it is wider than the terminal it
    continues on the next line after a backslash, which the shell reads as one line."""
    lines, line = [], " " * indent
    for word in command.split(" "):
        if line.strip() and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = " " * (indent + 2)
        line += ("" if not line.strip() else " ") + word
    return [*lines, line]


@click.command(short_help="Encode DATA's captions (cached); a summary, and the vectors exported with -o.")
@dataset_options
@encoder_options
@click.option("--max-tokens", type=click.IntRange(min=2), default=None,
              help="Cut captions to this many tokens (default: the encoder's context length).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              callback=writable_output, metavar="FILE",
              help="Export the vectors: .npy (rows in caption order), .npz (vectors + ids) or "
                   ".parquet (caption_id, group_id, vector). Loads back with --encoder vectors:FILE.")
@json_option
@ray_option
def encode(output, max_tokens, json_out, **options):
    """Encode a dataset's captions (cached), print a summary and optionally export the vectors."""
    from pathlib import Path

    from capgeo.errors import CapgeoError
    from capgeo.pipeline import encode_dataset

    if output and Path(output).suffix.lower() not in OUTPUT_SUFFIXES:
        # fail before any encoding work
        raise CapgeoError(f"--output {output}: must end in .npy, .npz or .parquet")
    refuse_path_clashes()
    captions = load_from_options(options)
    summary = encode_dataset(captions, encode_from_options(options, max_tokens=max_tokens), output=output,
                             force=forced())
    emit(summary, json_out, _print_summary)


def _print_summary(summary: EncodeSummary) -> None:
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
