"""`capgeo encoders` and `capgeo encode`."""

from __future__ import annotations

import click

from capgeo import terminal
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
    from capgeo.terminal.encode import print_encode_summary

    if output and Path(output).suffix.lower() not in OUTPUT_SUFFIXES:
        # fail before any encoding work
        raise CapgeoError(f"--output {output}: must end in .npy, .npz or .parquet")
    refuse_path_clashes()
    captions = load_from_options(options)
    summary = encode_dataset(captions, encode_from_options(options, max_tokens=max_tokens), output=output,
                             force=forced())
    emit(summary, json_out, print_encode_summary)
