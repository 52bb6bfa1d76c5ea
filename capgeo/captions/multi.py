"""Several files read as one table: Parquet and Arrow shards through polars, column by column;
JSON-lines, CSV and TSV shards file by file.

Parquet is scanned lazily: only the columns a caption set needs are read, so memory
follows the caption text, not the file. Shards must agree on their columns; the first
that does not is named. ``rows`` reads only the first rows (``--limit``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path

from capgeo.captions.shards import Shard
from capgeo.captions.clean import RowNumbers, row_checks
from capgeo.captions.tabular import ColumnChoice, Table
from capgeo.errors import DataError


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def arrow_kind(path: Path) -> str:
    """'file' for the Arrow IPC file format (magic ARROW1), 'stream' for an IPC stream (what
    `datasets` writes)."""
    with open(path, "rb") as handle:
        return "file" if handle.read(6) == b"ARROW1" else "stream"


def _schema(path: Path, format: str) -> dict:
    import polars as pl

    from capgeo.captions.compressed import compression_of

    if compression_of(path):
        name = "Parquet" if format == "parquet" else "Arrow"
        raise DataError(f"{path}: a {compression_of(path)}-compressed {name} file; {name} compresses its own "
                        "columns, so capgeo reads it uncompressed: decompress it first")
    try:
        if format == "parquet":
            return dict(pl.read_parquet_schema(path))
        if arrow_kind(path) == "file":
            return dict(pl.read_ipc_schema(path))
        return dict(pl.read_ipc_stream(path, n_rows=0).schema)
    except Exception as error:
        name = "Parquet" if format == "parquet" else "Arrow IPC"
        raise DataError(f"{path}: cannot read as {name}: {_first_line(error)}") from None


def _read(path: Path, format: str, names: list[str], rows: int | None):
    """The columns ``names`` of one file, its first ``rows`` rows only when given."""
    import polars as pl

    try:
        if format == "parquet":
            scan = pl.scan_parquet(path).select(names)
            return (scan.head(rows) if rows is not None else scan).collect()
        if arrow_kind(path) == "file":
            return pl.read_ipc(path, columns=names, n_rows=rows)
        return pl.read_ipc_stream(path, columns=names, n_rows=rows)
    except Exception as error:
        name = "Parquet" if format == "parquet" else "Arrow IPC"
        raise DataError(f"{path}: cannot read as {name}: {_first_line(error)}") from None


def check_same_columns(named: list[tuple[Path, list[str]]]) -> list[str]:
    """The columns all shards share; the first shard whose columns differ from the first's is an error."""
    first, columns = named[0]
    for path, found in named[1:]:
        if set(found) != set(columns):
            extra = [name for name in found if name not in columns]
            lacking = [name for name in columns if name not in found]
            detail = "; ".join(part for part in (
                f"it has {', '.join(extra)} which {first.name} lacks" if extra else "",
                f"it lacks {', '.join(lacking)}" if lacking else "") if part)
            raise DataError(f"{path}: this shard's columns differ from those of the first shard {first} ({detail}); "
                            f"the shards of one dataset share their columns")
    return columns


def _row_counts(files: list[Path], format: str) -> list[int]:
    import polars as pl

    counts = []
    for path in files:
        try:
            if format == "parquet":
                counts.append(int(pl.scan_parquet(path).select(pl.len()).collect().item()))
            elif arrow_kind(path) == "file":
                counts.append(int(pl.scan_ipc(path).select(pl.len()).collect().item()))
            else:
                counts.append(_stream_rows(path))
        except DataError:
            raise
        except Exception as error:
            raise DataError(f"{path}: cannot read: {_first_line(error)}") from None
    return counts


def _stream_rows(path: Path) -> int:
    """Rows of an Arrow IPC stream: its record batches are read, one column at most."""
    import polars as pl

    schema = _schema(path, "arrow")
    if not schema:
        return 0
    return pl.read_ipc_stream(path, columns=[next(iter(schema))]).height


def shown_name(path: Path, source) -> str:
    """A shard as messages name it: its path inside the source folder, else its file name."""
    try:
        return str(path.relative_to(source)) if Path(source).is_dir() else path.name
    except ValueError:
        return path.name


class _Where:
    """'train-00001-of-00004.parquet, row 17': a row's shard and its row within it. The shards' names
    and row counts (read from their metadata) are made only when a message needs them."""

    def __init__(self, files: list[Path], source, counts, single: bool):
        self._files = files
        self._source = source
        self._counts = counts
        self._starts: list[int] | None = None
        self._single = single

    def __call__(self, row: int) -> str:
        if self._single:
            return f"row {row + 1}"
        if self._starts is None:
            counts = self._counts()
            self._starts = [sum(counts[:index]) for index in range(len(counts))]
        shard = bisect.bisect_right(self._starts, row) - 1
        return f"{shown_name(self._files[shard], self._source)}, row {row - self._starts[shard] + 1}"


def frames_table(files: list[Path], format: str, source, *, splits: Sequence | None = None,
                 rows: int | None = None, layout: str | None = None) -> Table:
    """Parquet or Arrow files as one Table whose columns are read when asked for, each once (Parquet
    in one scan over all the files, which polars reads in parallel), the first ``rows`` rows only
    when given."""
    import polars as pl

    from capgeo.captions.images import image_keys_of_frame, is_image_dtype

    schemas = [(path, _schema(path, format)) for path in files]
    columns = check_same_columns([(path, list(schema)) for path, schema in schemas])
    dtypes = schemas[0][1]
    for path, schema in schemas[1:]:
        differ = [name for name in columns if schema[name] != dtypes[name]]
        if differ:
            name = differ[0]
            raise DataError(f"{path}: column {name!r} is {schema[name]} in this shard but {dtypes[name]} in the first "
                            f"shard {schemas[0][0]}; the shards of one dataset share their column types")
    known: list[list[int]] = []

    def counts() -> list[int]:
        if not known:
            known.append(_row_counts(files, format))
        return known[0]

    if format == "parquet":
        scan = pl.scan_parquet(files) if len(files) > 1 else pl.scan_parquet(files[0])
        total = _collected(lambda: scan.select(pl.len()).collect().item(), source)
        height = total if rows is None else min(rows, total)

        def collect(names: list[str]):
            wanted = scan.select(names)
            return _collected(lambda: (wanted.head(rows) if rows is not None else wanted).collect(), source)
    else:
        shown = _first_rows(counts(), rows)
        height = sum(shown)

        def collect(names: list[str]):
            parts = [_read(path, format, names, count) for path, count in zip(files, shown) if count]
            if not parts:
                return pl.DataFrame({name: [] for name in names}, schema={name: dtypes[name] for name in names})
            return _collected(lambda: pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0],
                              source)

    where = _Where(files, source, counts, single=len(files) == 1)
    cache: dict = {}

    checks: dict = {}

    def prefetch(names: list[str], text: str | None = None, id: str | None = None) -> None:
        """Reads ``names`` in one pass, and with them the caption's and the id's row tests
        (clean.row_checks) where the files are Parquet: evaluated in the scan, file by file, they cost
        about a third of what they cost on the whole columns afterwards."""
        plain = [name for name in dict.fromkeys(names) if name not in cache and not is_image_dtype(dtypes[name])]
        wanted = {("edges", text): text, ("cut", id): id}
        tests = {key: row_checks(pl.col(name))[key[0]].alias(_unused_name(columns, key))
                 for key, name in wanted.items()
                 if format == "parquet" and name in plain and dtypes[name] == pl.String}
        if len(plain) > 1 or tests:
            frame = collect([*plain, *tests.values()])
            cache.update({name: frame[name] for name in plain})
            checks.update({key: frame[_unused_name(columns, key)] for key in tests})

    def get(name: str):
        """The column as a polars Series (an Image column: its groups, capgeo.captions.images)."""
        if name not in cache:
            frame = collect([name])
            cache[name] = (image_keys_of_frame(frame, name, source, where) if is_image_dtype(dtypes[name])
                           else frame.to_series())
        return cache[name]

    split_rows = _per_row(splits, _first_rows(counts(), rows)) if splits is not None and any(splits) else None
    return Table(columns, get, height, where, RowNumbers(height), "columns", splits=split_rows, layout=layout,
                 prefetch=prefetch, checks=checks)


def _unused_name(columns: list[str], key: tuple[str, str]) -> str:
    """A name for a computed column that no column of the file has."""
    name = f"\0capgeo {key[0]} {key[1]}"
    while name in columns:
        name += "\0"
    return name


def _first_rows(counts: list[int], rows: int | None) -> list[int]:
    """How many rows of each file the first ``rows`` rows take (all when None)."""
    if rows is None:
        return counts
    kept, left = [], rows
    for count in counts:
        kept.append(min(count, left))
        left -= kept[-1]
    return kept


def _collected(make, source):
    """``make()``, a polars read over several shards, with its failure (shards whose columns differ
    in type, a broken file) as one DataError."""
    try:
        return make()
    except DataError:
        raise
    except Exception as error:
        raise DataError(f"{source}: cannot read the shards as one table: {_first_line(error)}") from None


def _per_row(values: Sequence, counts: list[int]):
    """One value per row (a polars Series) from one per file; None when no file has one."""
    import polars as pl

    return pl.concat([pl.repeat(value, count, dtype=pl.String, eager=True) for value, count in zip(values, counts)])


def text_shards_table(shards: list[Shard], format: str, columns: ColumnChoice, source, *,
                      rows: int | None = None, layout: str | None = None) -> tuple[Table, bool]:
    """JSON-lines, CSV or TSV shards, read file by file (until ``rows`` rows when given), as one
    Table, and whether every shard was read."""
    from capgeo.captions.content import DatasetContent
    from capgeo.captions.tabular import csv_table, jsonl_table

    reader = jsonl_table if format == "jsonl" else csv_table
    tables: list[tuple[Path, Table]] = []
    read = 0
    for shard in shards:
        if rows is not None and read >= rows:
            break
        table = reader(DatasetContent(shard.path), columns, format)
        tables.append((shard.path, table))
        read += table.height
    names = check_same_columns([(path, table.columns) for path, table in tables])
    counts = [table.height for _, table in tables]
    starts = [sum(counts[:index]) for index in range(len(counts))]

    def locate(row: int) -> tuple[int, int]:
        shard = bisect.bisect_right(starts, row) - 1
        return shard, row - starts[shard]

    def where(row: int) -> str:
        shard, local = locate(row)
        path, table = tables[shard]
        return f"{shown_name(path, source)}, {table.where(local)}"

    def get(name: str) -> list:
        values: list = []
        for _, table in tables:
            values += table.get(name)
        return values

    # ids made for rows without one: the file and the row's own number, unique across the shards
    numbers = [f"{shown_name(path, source)}:{number}" for path, table in tables for number in table.numbers]
    splits = _per_row([shard.split for shard in shards[:len(tables)]], counts)
    table = Table(names, get, sum(counts), where, numbers, tables[0][1].kind, splits=splits, layout=layout)
    return table, len(tables) == len(shards)
