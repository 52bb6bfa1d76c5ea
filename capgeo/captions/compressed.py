"""Compressed dataset files (.gz, .zst, .bz2, .xz): decompressed as a stream, read by their inner name.

``captions.jsonl.gz`` is read as ``captions.jsonl`` would be: the format is detected from the name
without its compression suffix (and from the decompressed text), so every text format and benchmark
layout reads compressed. A file whose name has no compression suffix but whose bytes begin with a
compressor's magic number (``captions.jsonl`` that is really gzip) is decompressed too. A stream that
ends early (a download or copy cut short) or is damaged stops with one line naming the file;
nothing is read from it. ``.zst`` needs the ``zstandard`` package (``pip install 'capgeo[zstd]'``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from capgeo.errors import DataError

#: compression suffix -> the compressor's name in messages
SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bzip2", ".xz": "xz"}
#: leading bytes of each compressor's stream
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_FIRST_BYTES = frozenset(magic[:1] for magic in MAGIC)
CHUNK = 1 << 20


def compression_of(path: Path) -> str | None:
    """The compressor a file name says (``.gz`` -> gzip), or None."""
    # string operations, not Path(path).suffix: this runs once per file of a folder of thousands
    name = os.fspath(path)
    dot = name.rfind(".")
    return SUFFIXES.get(name[dot:].lower()) if dot > name.rfind(os.sep) else None


def inner_name(path: Path) -> str:
    """The file's name once decompressed: ``12.txt`` for ``caption/12.txt.gz``."""
    name = os.path.basename(os.fspath(path))
    return name.rpartition(".")[0] if compression_of(name) else name


def _suffix_start(name: str) -> int | None:
    """Where Path(name).suffix starts in ``name`` (None: no suffix), without making a Path."""
    dot = name.rfind(".")
    return dot if 0 < dot < len(name) - 1 else None


def inner_suffix(path: Path) -> str:
    """The suffix the file has once decompressed: ``.jsonl`` for ``captions.jsonl.gz``."""
    name = inner_name(path)
    dot = _suffix_start(name)
    return "" if dot is None else name[dot:].lower()


def inner_stem(path: Path) -> str:
    """The file's stem once decompressed: ``12`` for ``12.txt.gz`` (the id a benchmark folder gives it)."""
    name = inner_name(path)
    dot = _suffix_start(name)
    return name if dot is None else name[:dot]


def sniff(head: bytes) -> str | None:
    """The compressor whose magic number ``head`` starts with, or None."""
    if head[:1] not in _FIRST_BYTES:  # text: the common case, answered by one lookup
        return None
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


def chunks(path: Path) -> Iterator[bytes]:
    """The file's bytes chunk by chunk, decompressed as a stream when its name or its magic number
    says it is compressed: what reading the head of a file (``--limit``) needs, never the whole."""
    kind = compression_of(path)
    if kind is None:
        try:
            with open(path, "rb") as handle:
                first = handle.read(CHUNK)
                kind = sniff(first[:6])
                if kind is None:
                    while first:
                        yield first
                        first = handle.read(CHUNK)
                    return
        except OSError as error:
            raise DataError(f"{path}: cannot read: {error.strerror or error}") from None
    yield from _chunks(path, kind)


def decompressed(path: Path, kind: str) -> bytes:
    """The whole decompressed content of ``path`` (compressed with ``kind``), read chunk by chunk."""
    parts = bytearray()
    for chunk in _chunks(path, kind):
        parts += chunk
    return bytes(parts)


def _chunks(path: Path, kind: str) -> Iterator[bytes]:
    import bz2
    import gzip
    import lzma
    import zlib

    suffix = {"gzip": ".gz", "zstd": ".zst", "bzip2": ".bz2", "xz": ".xz"}[kind]
    try:
        if kind == "zstd":
            yield from _zstd_chunks(path)
            return
        opener = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}[kind]
        with opener(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                yield chunk
    except EOFError:
        raise DataError(f"{path}: the {kind} stream ends early (the file is truncated, e.g. a download or copy "
                        f"cut short); expected a complete {suffix} file") from None
    except (OSError, zlib.error, lzma.LZMAError, ValueError) as error:
        if isinstance(error, OSError) and error.errno is not None:  # the disk, not the data
            raise DataError(f"{path}: cannot read: {error.strerror or error}") from None
        raise DataError(f"{path}: not a valid {kind} stream ({error}); expected a {suffix} file") from None


def _zstd_chunks(path: Path) -> Iterator[bytes]:
    try:
        import zstandard
    except ImportError:
        raise DataError(f"{path}: reading .zst files needs the zstandard package: "
                        "pip install zstandard (or capgeo[zstd])") from None
    context = zstandard.ZstdDecompressor()
    stream = context.decompressobj()
    fed = False  # whether the current frame has had input: one without its end is a truncated file
    with open(path, "rb") as handle:
        try:
            while chunk := handle.read(CHUNK):
                while chunk:
                    fed = True
                    yield stream.decompress(chunk)
                    chunk = b""
                    if stream.eof:  # frames one after another (zstd's concatenation): each decoded in turn
                        chunk, stream, fed = stream.unused_data, context.decompressobj(), False
        except zstandard.ZstdError as error:
            raise DataError(f"{path}: not a valid zstd stream ({error}); expected a .zst file") from None
    if fed and not stream.eof:
        raise EOFError
