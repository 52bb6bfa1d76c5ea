"""Captions already in memory, from Python: DataFrames, Arrow tables, `datasets` datasets, lists.

Objects are recognised by the module their type comes from (duck typing), so no
library is imported unless the caller has already made such an object. Columns are
found as in a file (capgeo.captions.tabular), with the same column options.
"""

from __future__ import annotations

from pathlib import Path

from capgeo.captions.clean import RawCaptions, RowNumbers
from capgeo.captions.tabular import ColumnChoice, Table, captions_from_table, frame_table, records_table
from capgeo.errors import DataError

#: what load_captions reads besides a path, for messages
ACCEPTED = ("a path, a polars or pandas DataFrame, a pyarrow Table, a datasets.Dataset, a list of captions "
            "or a list of dicts")


def read_memory(data, columns: ColumnChoice) -> RawCaptions:
    """The captions of an in-memory object, as a file's would be read (``format`` names its kind)."""
    module = type(data).__module__.split(".")[0]
    name = type(data).__name__
    if module == "polars" and hasattr(data, "collect_schema"):
        frame = data.collect() if hasattr(data, "explain") else data  # a LazyFrame is collected
        return _read(frame_table(frame, "row", _label(f"polars {name}")), f"polars {name}", "dataframe", columns)
    if module == "pandas" and hasattr(data, "columns") and hasattr(data, "iloc"):
        return _read(_pandas_table(data), "pandas DataFrame", "dataframe", columns)
    if module == "pyarrow" and hasattr(data, "column_names"):
        return _read(_arrow_table(data, f"pyarrow {name}"), f"pyarrow {name}", "arrow", columns)
    if module == "datasets" and hasattr(data, "column_names"):
        if isinstance(data, dict):  # a DatasetDict: one split at a time
            raise DataError(f"load_captions: a datasets DatasetDict of splits {', '.join(map(str, data))}; pass one "
                            f"of them, e.g. dataset[{next(iter(data), 'train')!r}]")
        # its Arrow table, indices applied; an Image column stays {bytes, path}, never decoded
        return _read(_arrow_table(data.with_format("arrow")[:], "datasets Dataset"), "datasets Dataset", "arrow",
                     columns)
    if isinstance(data, (list, tuple)):
        return _read_list(list(data), columns)
    raise DataError(f"load_captions: cannot read a {type(data).__module__}.{name}; expected {ACCEPTED}")


def _label(kind: str) -> Path:
    """The stand-in for a source path: what CaptionSet.source and messages show."""
    return Path(f"<{kind}>")


def _read(table: Table, kind: str, format: str, columns: ColumnChoice) -> RawCaptions:
    table.layout = f"{kind} (in memory)"
    return captions_from_table(table, _label(kind), format, columns)


def _arrow_table(table, kind: str) -> Table:
    import polars as pl

    try:
        frame = pl.from_arrow(table)
    except Exception as error:
        raise DataError(f"<{kind}>: cannot read its columns: {str(error).splitlines()[0]}") from None
    return frame_table(frame, "row", _label(kind))


def _pandas_table(frame) -> Table:
    # pandas allows column names of any type: they are matched as text
    names = {str(column): column for column in frame.columns}
    if len(names) != len(frame.columns):
        raise DataError("<pandas DataFrame>: two columns have the same name as text; rename one")
    height = len(frame)

    def get(name: str) -> list:
        # NaN is pandas' missing value (None in a column of text becomes it): missing here too, so a
        # missing caption is skipped and counted, not "a float"
        return [None if isinstance(value, float) and value != value else value for value in frame[names[name]].tolist()]

    return Table(list(names), get, height, lambda row: f"row {row + 1}", RowNumbers(height), "columns")


def _read_list(items: list, columns: ColumnChoice) -> RawCaptions:
    if not items:
        raise DataError("<list>: the list is empty; no captions to read")
    if all(isinstance(item, str) or item is None for item in items):
        if columns.given():
            raise DataError(f"<list of captions>: {', '.join(columns.given())} do not apply to a list of captions")
        return RawCaptions(source=_label("list of captions"), format="text", texts=items,
                           where=lambda row: f"item {row + 1}", ids=RowNumbers(len(items)),
                           fields=["(one caption per item)"], layout=f"list of {len(items)} captions (in memory)")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(f"<list of dicts>: item {index + 1} is a {type(item).__name__}; expected a dict per "
                            "caption (or a list of captions, all text)")
    table = records_table(items, lambda row: f"item {row + 1}", RowNumbers(len(items)))
    table.layout = f"list of {len(items)} dicts (in memory)"
    return captions_from_table(table, _label("list of dicts"), "records", columns)
