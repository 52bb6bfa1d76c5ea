"""Reading bytes off disk into text and JSON, turning every failure into a DataError.

Each helper names the file and, where it can, the line, column or byte offset,
so a bad file is reported in one line instead of a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from capgeo import _json
from capgeo.captions import compressed
from capgeo.errors import DataError


def read_text(path: Path) -> str:
    """The file decoded as UTF-8 (a leading byte-order mark is dropped); a compressed file
    (by its suffix or its magic number: capgeo.captions.compressed) is decompressed first."""
    kind = compressed.compression_of(path)
    try:
        data = path.read_bytes() if kind is None else None
    except OSError as error:
        raise DataError(f"{path}: cannot read: {error.strerror or error}") from None
    kind = kind or compressed.sniff(data[:6])
    if kind is not None:
        data = compressed.decompressed(path, kind)
    return decode_utf8(data, path)


#: the longest line read while reading a file's first lines (--limit): a stream of zeros or of one
#: endless line stops here instead of filling memory
MAX_LINE_BYTES = 256 << 20


def read_text_head(path: Path, lines: int, *, quoted: bool = False) -> tuple[str, bool]:
    """The file's first ``lines`` lines (each with its line end), decoded as :func:`read_text` decodes
    the whole file, and whether that is the whole file. The file (decompressed as a stream when
    compressed) is read only as far as those lines: ``--limit 5`` on a gzip that expands to gigabytes
    reads a few kilobytes. ``quoted``: CSV, whose quoted cells may hold line ends; the head then ends
    where no quote is left open."""
    data = bytearray()
    seen = 0  # line ends in data
    last_end = 0  # where the last line that ended ends
    stream = compressed.chunks(path)
    try:
        for chunk in stream:
            data += chunk
            found = chunk.count(b"\n")
            if found:
                seen += found
                last_end = data.rfind(b"\n") + 1
            elif len(data) - last_end > MAX_LINE_BYTES:
                raise DataError(f"{path}: line {seen + 1} runs on past {MAX_LINE_BYTES >> 20} MiB without a line end; "
                                "expected one record per line")
            if seen >= lines:
                end = _head_end(data, lines, quoted)
                if end is not None:
                    return decode_utf8(bytes(data[:end]), path), False
    finally:
        stream.close()
    return decode_utf8(bytes(data), path), True


def _head_end(data: bytearray, lines: int, quoted: bool) -> int | None:
    """Where the first ``lines`` lines of ``data`` end (further on while a CSV quote is open), or None
    when ``data`` does not reach that far yet."""
    end = 0
    for _ in range(lines):
        end = data.find(b"\n", end) + 1
    while quoted and data.count(b'"', 0, end) % 2:
        end = data.find(b"\n", end) + 1
        if end == 0:
            return None
    return end


#: leading bytes of compressed content that remains after decompressing (a file compressed twice, a zip
#: archive), which fails as "not UTF-8" with advice that does not help
COMPRESSED_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd",
                    b"PK\x03\x04": "zip"}


def decode_utf8(data: bytes, path: Path) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        for magic, kind in COMPRESSED_MAGIC.items():
            if data.startswith(magic):
                raise DataError(f"{path}: the file is {kind}-compressed; decompress it first "
                                f"(capgeo reads uncompressed files)") from None
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(
            f"{path}: not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start} (line {line}); "
            "re-encode the file as UTF-8"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def parse_json(text: str, path: Path):
    """The whole file as one JSON value."""
    if not text.strip():
        raise DataError(f"{path}: the file is empty; expected a JSON document")
    try:
        return _json.loads(text)
    except json.JSONDecodeError as error:
        hint = ""
        lines = split_lines(text.lstrip())
        if error.msg == "Extra data" and len(lines) > 1 and _is_json_object(lines[0]):
            hint = "; the file looks like JSON lines (one object per line): name it .jsonl or pass --format jsonl"
        raise DataError(f"{path}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}{hint}") from None


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(_json.loads(line), dict)
    except json.JSONDecodeError:
        return False


#: one line's JSON value and where it ends: json.loads without its two Python layers, which cost
#: more than the parse of a short caption line itself
_decode_line = json.JSONDecoder().raw_decode


def iter_json_lines(text: str, path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file."""
    for line_number, line in enumerate(split_lines(text), start=1):
        try:
            record, end = _decode_line(line)
        except (ValueError, RecursionError):  # reported below, by json.loads's own rules
            end = -1
        if end == len(line) and type(record) is dict:
            yield line_number, record
            continue
        # anything else, whitespace around the object included, takes json.loads's path
        if not line.strip():
            continue
        try:
            record = _json.loads(line)
        except json.JSONDecodeError as error:
            hint = ""
            if line.strip() in ("[", "{") or line.lstrip().startswith("[{"):
                hint = "; this looks like one JSON document, not one object per line"
            raise DataError(
                f"{path}:{line_number}: invalid JSON line: {error.msg} (column {error.colno}){hint}"
            ) from None
        if not isinstance(record, dict):
            raise DataError(
                f"{path}:{line_number}: expected a JSON object on each line, found {json_kind(record)}"
            )
        yield line_number, record


def split_lines(text: str) -> list[str]:
    """Lines split at \\n and \\r\\n (at \\r in a file that has no \\n) only: str.splitlines would also split at U+2028 and
    other separators that may sit inside a caption or a JSON string."""
    # a file without any \n ends its lines with a lone \r (classic Mac files; CSV/TSV reading takes
    # them too). Elsewhere a stray \r stays in its line, stripped later: "\r\r\n", a twice-converted
    # line end, split there, would give every caption a blank line after it and every id a new number
    if "\n" not in text:
        lines = text.split("\r")
    else:
        lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def first_json_line(text: str, path: Path) -> dict | None:
    """The first object of a JSON-lines file, or None if it has no non-blank line."""
    # the generator parses lazily, so only the first non-blank line is read
    for _, record in iter_json_lines(text, path):
        return record
    return None


def json_kind(value) -> str:
    """A short name of a JSON value's type, for messages."""
    if isinstance(value, dict):
        keys = ", ".join(list(map(str, value))[:12])
        return f"an object with keys [{keys}]"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"
