"""The bytes of located images, read when asked for: file by file, shard by shard.

:func:`image_bytes` yields the images in the order asked, holding at most one shard's
column (an ``Image`` column of a Parquet or Arrow shard) in memory at a time. A
reference that cannot be read yields None with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import groupby
from pathlib import Path

from capgeo.images.sources import BytesRef, ColumnRef, FileRef, MemberRef


def read_one(ref) -> bytes:
    """The bytes of one reference (OSError or ValueError when they cannot be read)."""
    if isinstance(ref, BytesRef):
        return ref.data
    if isinstance(ref, FileRef):
        return Path(ref.path).read_bytes()
    if isinstance(ref, ColumnRef):
        return _column_rows(ref.file, ref.format, ref.column, [ref.row])[ref.row]
    if isinstance(ref, MemberRef):
        return _members(ref.shard, [ref])[ref.name]
    raise ValueError(f"not an image reference: {ref!r}")


def image_bytes(items: Iterable[tuple[int, object]]) -> Iterator[tuple[int, bytes | None, str]]:
    """(key, bytes or None, why not) for each (key, reference), in order; references into one
    shard that come together are read together."""
    def batch_of(item):
        ref = item[1]
        if isinstance(ref, ColumnRef):
            return ("column", ref.file, ref.column)
        if isinstance(ref, MemberRef) and ref.offset < 0:
            return ("members", ref.shard)
        return ("one", id(item))

    for kind, run in groupby(items, key=batch_of):
        run = list(run)
        if kind[0] == "one":
            key, ref = run[0]
            yield _one(key, ref)
            continue
        try:
            if kind[0] == "column":
                first = run[0][1]
                found = _column_rows(first.file, first.format, first.column, [ref.row for _, ref in run])
                values = [found.get(ref.row) for _, ref in run]
            else:
                found = _members(kind[1], [ref for _, ref in run])
                values = [found.get(ref.name) for _, ref in run]
        except (OSError, ValueError) as error:
            for key, _ in run:
                yield key, None, _reason(error)
            continue
        for (key, _), value in zip(run, values):
            yield (key, value, "") if value else (key, None, "no bytes")


def _one(key, ref) -> tuple:
    try:
        return key, read_one(ref), ""
    except (OSError, ValueError, KeyError) as error:
        return key, None, _reason(error)


def _reason(error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return "not found"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return (str(error).splitlines() or [type(error).__name__])[0]


def _column_rows(file: Path, format: str, column: str, rows: list[int]) -> dict[int, bytes | None]:
    """The bytes of ``rows`` of an Image column, read with pyarrow batch by batch (a Parquet
    file's row groups, an Arrow file memory-mapped), so only what is asked is kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = set(rows)
    found: dict[int, bytes | None] = {}
    try:
        if format == "parquet":
            parquet = pq.ParquetFile(file)
            start = 0
            for group in range(parquet.num_row_groups):
                count = parquet.metadata.row_group(group).num_rows
                if any(start <= row < start + count for row in wanted):
                    table = parquet.read_row_group(group, columns=[column])
                    _take(table.column(column), start, wanted, found)
                start += count
        else:
            source = pa.memory_map(str(file))
            with open(file, "rb") as handle:
                is_file = handle.read(6) == b"ARROW1"
            reader = pa.ipc.open_file(source) if is_file else pa.ipc.open_stream(source)
            batches = ((reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader)
            start = 0
            for batch in batches:
                if any(start <= row < start + batch.num_rows for row in wanted):
                    _take(batch.column(batch.schema.get_field_index(column)), start, wanted, found)
                start += batch.num_rows
    except (pa.ArrowException, KeyError) as error:
        raise ValueError(f"{file}: cannot read the image column {column!r}: {error}") from None
    return found


def _take(values, start: int, wanted: set[int], found: dict) -> None:
    for row in [row for row in wanted if start <= row < start + len(values)]:
        value = values[row - start].as_py()
        found[row] = value.get("bytes") if isinstance(value, dict) else value


def _members(shard: Path, refs: list[MemberRef]) -> dict[str, bytes]:
    """Members of a webdataset shard by name: seeked to in a plain tar, streamed in a compressed one."""
    from capgeo.captions.webdataset import _open

    names = {ref.name for ref in refs}
    plain = [ref for ref in refs if ref.offset >= 0]
    found: dict[str, bytes] = {}
    if plain and len(plain) == len(refs):
        with open(shard, "rb") as handle:
            for ref in plain:
                handle.seek(ref.offset)
                found[ref.name] = handle.read(ref.size)
        return found
    import tarfile

    try:
        with _open(shard) as (archive, _):
            for member in archive:
                if member.name in names and member.isreg():
                    found[member.name] = archive.extractfile(member).read()
                    if len(found) == len(names):
                        break
    except (tarfile.TarError, EOFError) as error:
        raise ValueError(f"{shard}: {error}") from None
    return found
