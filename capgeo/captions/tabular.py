"""Generic files: JSON lines, JSON, CSV, TSV, Parquet and plain text.

A generic file is read as a table (records x columns); the caption, id, group
and split columns are then found by name (the user's choice first, then common
names), and a column holding a list of captions becomes one row per caption.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from capgeo import _json
from capgeo.captions.clean import RawCaptions, RowNumbers, row_groups
from capgeo.captions.content import DatasetContent
from capgeo.captions.sources import iter_json_lines, json_kind, split_lines
from capgeo.errors import DataError

# recognised column names, in order of preference
TEXT_NAMES = ("caption", "text", "description", "sentence", "raw", "long_caption", "prompt")
CAPTIONS_NAMES = ("captions", "sentences", "texts", "descriptions")
ID_NAMES = ("id", "caption_id", "example_id", "sentid", "key")
GROUP_NAMES = ("image", "image_id", "image_file", "filename", "image_name", "img", "file_name", "image_path", "img_path")
SPLIT_NAMES = ("split",)


class ColumnCaseWarning(UserWarning):
    """A column option matched a column only when case was ignored; says which column was used."""


@dataclass(frozen=True)
class ColumnChoice:
    """Column names the user gave (None = find it by its usual names)."""

    text: str | None = None
    captions: str | None = None
    id: str | None = None
    group: str | None = None
    #: the column naming each caption's image (a path, or an Image feature); --image-column
    image: str | None = None

    def __post_init__(self):
        # an empty name is refused alike for all five options (not "not given" for some, "no key ''" for others)
        for option, value in self._named().items():
            if value is not None and not value.strip():
                raise DataError(f"{option}: an empty column name; give the column's name, or leave the option out")

    def _named(self) -> dict:
        return {"--text-column": self.text, "--captions-column": self.captions,
                "--id-column": self.id, "--group-column": self.group, "--image-column": self.image}

    def given(self) -> list[str]:
        return [option for option, value in self._named().items() if value is not None]


@dataclass
class Table:
    """Rows of a generic file, column by column."""

    columns: list[str]
    get: Callable[[str], list]
    height: int
    where: Callable[[int], str]
    #: ids to use when the file has neither an id nor a group column (line/record numbers)
    numbers: Sequence[str]
    kind: str  # 'columns' or 'keys', for messages
    #: each row's split where the files say it rather than a column (Hugging Face shard names)
    splits: Sequence | None = None
    #: how the rows were read, for `capgeo info` ("Hugging Face parquet, 4 shards, split train")
    layout: str | None = None
    #: reads the named columns at once, ahead of ``get`` (for files read column by column); given the
    #: caption and id columns too, it may fill ``checks`` with their row tests, computed as they are read
    prefetch: Callable[..., None] | None = None
    #: (test, column) -> its polars Series: ("edges", caption) and ("cut", id), as clean.row_checks makes them
    checks: dict = field(default_factory=dict)


def read_generic(content: DatasetContent, format: str, columns: ColumnChoice) -> RawCaptions:
    """A generic file but Parquet and Arrow, which capgeo.captions.multi reads (one file is one shard)."""
    if format == "text":
        if columns.given():
            raise DataError(f"{content.path}: {', '.join(columns.given())} do not apply to plain text (one caption per line)")
        return _read_text_lines(content)
    table = {
        "jsonl": jsonl_table, "json": _json_table, "csv": csv_table, "tsv": csv_table,
    }[format](content, columns, format)
    return captions_from_table(table, content.path, format, columns)


def _read_text_lines(content: DatasetContent) -> RawCaptions:
    from capgeo.paths import result_schema

    if content.text.lstrip("\ufeff \t\r\n").startswith("{"):
        # a saved profile named .txt: read as text, its JSON lines would be thousands of captions
        _refuse_capgeo_result(result_schema(content.path), content.path)
    lines = split_lines(content.text)
    numbers = [str(number) for number in range(1, len(lines) + 1)]
    return RawCaptions(source=content.path, format="text", texts=lines, where=lambda row: f"line {row + 1}",
                       ids=numbers, fields=["(one caption per line)"])


def records_table(records: list[dict], where: Callable[[int], str], numbers: list[str]) -> Table:
    # every record's keys in the order they first appear, in one C-level pass (a call per record
    # costs three times as much)
    keys = dict.fromkeys(itertools.chain.from_iterable(records))
    return Table(list(map(str, keys)), lambda name: [record.get(name) for record in records], len(records), where,
                 numbers, "keys")


def jsonl_table(content: DatasetContent, columns: ColumnChoice, format: str) -> Table:
    numbered = list(iter_json_lines(content.text, content.path))
    if numbered:
        _refuse_capgeo_result(numbered[0][1].get("schema"), content.path)  # a saved profile on one line
    lines = [number for number, _ in numbered]
    return records_table([record for _, record in numbered], lambda row: f"line {lines[row]}", list(map(str, lines)))


def _json_table(content: DatasetContent, columns: ColumnChoice, format: str) -> Table:
    path = content.path
    data = content.json
    record_where = lambda row: f"record {row + 1}"  # noqa: E731
    if isinstance(data, list):
        if all(isinstance(item, str) or item is None for item in data):
            # a plain list of captions
            data = [{"caption": item} for item in data]
        # a list that is mostly captions (text) with a stray item: name that item, not the first caption
        if sum(isinstance(item, str) for item in data) > len(data) / 2:
            index = next(i for i, item in enumerate(data) if not (isinstance(item, str) or item is None))
            raise DataError(f"{path}: record {index + 1}: expected a caption (text) or null in this list of "
                            f"captions, found {json_kind(data[index])}")
        for index, record in enumerate(data):
            if not isinstance(record, dict):
                raise DataError(f"{path}: record {index + 1}: expected an object, found {json_kind(record)}")
        return records_table(data, record_where, [str(row + 1) for row in range(len(data))])
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON list of objects or an object of columns; found {json_kind(data)}")
    _refuse_capgeo_result(data.get("schema"), path)
    wanted = {name.casefold() for name in (columns.text, columns.captions) if name} or set(TEXT_NAMES + CAPTIONS_NAMES)
    lists = {key: value for key, value in data.items() if isinstance(value, list)}
    column_keys = wanted & {str(key).casefold() for key in lists}
    # a null caption is still one record's caption ({"image": "dog.jpg", "caption": null}), not a
    # mapping whose image "dog.jpg" would become a caption
    text_keys = [key for key, value in data.items()
                 if (value is None or isinstance(value, str)) and str(key).casefold() in wanted]
    if text_keys and not column_keys:
        # one record ({"caption": "...", "image": "..."}), not an {image: caption} mapping of images
        # that happen to be called "caption" and "image"
        return records_table([data], record_where, ["1"])
    if column_keys:
        # {column: [values]}: columns of equal length
        lengths = {key: len(value) for key, value in lists.items()}
        if len(set(lengths.values())) > 1:
            found = ", ".join(f"{key} ({length})" for key, length in lengths.items())
            raise DataError(f"{path}: the columns of this JSON object differ in length: {found}")
        height = next(iter(lengths.values()))
        return Table(list(lists), lambda name: lists[name] if name in lists else [None] * height, height,
                     record_where, [str(row + 1) for row in range(height)], "keys")
    record_lists = [key for key, value in lists.items() if value and all(isinstance(item, dict) for item in value)]
    if len(record_lists) > 1:
        # several lists of records (COCO's "images" and "annotations"): the one whose records hold a
        # caption column
        record_lists = [key for key in record_lists
                        if wanted & {str(name).casefold() for name in data[key][0]}] or record_lists
    if len(record_lists) == 1:
        # {"annotations": [{...}, ...]} and the like
        key = record_lists[0]
        return records_table(data[key], lambda row: f"{key}[{row}]", [str(row + 1) for row in range(len(data[key]))])
    if any(value is not None for value in data.values()) and \
            all(value is None or isinstance(value, str) or _is_list_of_text(value) for value in data.values()):
        # {image: caption} or {image: [captions]}; a null caption is skipped and counted, as anywhere
        # (one null made the whole mapping "not caption records")
        if all(value is None or isinstance(value, str) for value in data.values()):
            records = [{"image": key, "caption": value} for key, value in data.items()]
        else:
            records = [{"image": key, "captions": [value] if isinstance(value, str) else value}
                       for key, value in data.items()]
        keys = list(data)
        return records_table(records, lambda row: f"key {keys[row]!r}", keys)
    raise DataError(
        f"{path}: cannot find caption records in this JSON object (keys: {', '.join(list(map(str, data))[:20])}); "
        "expected a list of objects, an object of equal-length columns, or {image: caption}"
    )


def _refuse_capgeo_result(schema, path) -> None:
    """``schema``: what the file's "schema" key holds. Read as a dataset, a saved profile's "batches"
    list would be reported as a missing caption column."""
    if isinstance(schema, str) and schema.startswith("capgeo."):
        raise DataError(f"{path}: a {schema} result capgeo wrote, not a dataset; this command reads captions "
                        "(`capgeo report` and `capgeo compare` draw saved profiles)")


def _is_list_of_text(value) -> bool:
    """A list of captions; a null among them is skipped and counted later, as in records."""
    return isinstance(value, list) and all(isinstance(item, str) or item is None for item in value)


#: the largest CSV/TSV field read (the csv module's default is 128 KiB)
CSV_FIELD_LIMIT = 2**31 - 1


def csv_table(content: DatasetContent, columns: ColumnChoice, format: str) -> Table:
    """CSV (RFC 4180 quoting) or TSV (no quoting) with a header row; every cell read as text.

    Python's csv module rather than polars: it reports the line of a broken row,
    and cells stay text (ids like 000123 keep their zeros). The rows are read in one
    C-level sweep; their line numbers (which differ from row numbers where a quoted
    caption spans lines or a line is blank) are found by a second read only when
    something needs them: a message about a row, or ids for a file without id or group.
    """
    path = content.path
    text = content.text
    if not text.strip():
        raise DataError(f"{path}: the file is empty; expected a header row and one row per caption")

    def reader():
        if format == "tsv":
            return csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE, strict=True)
        return csv.reader(io.StringIO(text, newline=""), strict=True)

    name = format.upper()
    # long-caption datasets hold captions of hundreds of kilobytes; the csv module refuses fields
    # over 128 KiB unless told otherwise (JSON lines never had such a limit)
    csv.field_size_limit(CSV_FIELD_LIMIT)
    rows_reader = reader()
    rows: list[list[str]] = []
    broken = None
    try:
        header = next(rows_reader)
        while not header:  # blank lines before the header, as between rows, are skipped
            header = next(rows_reader)
    except csv.Error as error:
        raise DataError(f"{path}:{rows_reader.line_num}: cannot read as {name}: {error}") from None
    duplicated = sorted({column for column in header if header.count(column) > 1})
    if duplicated:
        raise DataError(f"{path}: line 1: the header names {', '.join(map(repr, duplicated))} twice")
    try:
        rows.extend(filter(None, rows_reader))   # blank lines give empty rows: skipped
    except csv.Error as error:
        broken = error
    lines = _LineNumbers(reader)
    # the first problem in file order: a row of the wrong width before the line that broke the reader
    widths = list(map(len, rows))
    if widths.count(len(header)) != len(widths):
        row = next(index for index, width in enumerate(widths) if width != len(header))
        raise DataError(
            f"{path}:{lines[row]}: {widths[row]} fields where the header has {len(header)} "
            f"({', '.join(header)}); is the {name} quoted correctly?"
        )
    if broken is not None:
        # the rows before it were kept: one of them may be a problem that comes first (above). The
        # reader stops where it gave up (for an unclosed quote, the end of the file): name the line
        # the broken row starts on
        raise DataError(f"{path}:{lines.broken_row_line()}: cannot read as {name}: {broken}"
                        + ("; a quoted field opened on this line is never closed"
                           if "unexpected end of data" in str(broken) else ""))
    positions = {column: index for index, column in enumerate(header)}
    return Table(list(header), lambda column: [row[positions[column]] for row in rows], len(rows),
                 lambda row: f"line {lines[row]}", lines.as_text(), "columns")


class _LineNumbers:
    """Line on which each non-blank data row of a CSV/TSV starts, read again on first use.

    The reader's ``line_num`` is the line it has read up to, which for a quoted caption spanning
    lines is the row's last line: a row starts on the line after where the previous one ended."""

    def __init__(self, make_reader: Callable):
        self._make_reader = make_reader
        self._lines: list[int] | None = None
        self._broken_at: int | None = None

    def __getitem__(self, row: int) -> int:
        return self._numbers()[row]

    def broken_row_line(self) -> int:
        """The line on which the row that stopped the reader starts."""
        self._numbers()
        return self._broken_at

    def _numbers(self) -> list[int]:
        if self._lines is None:
            reader = self._make_reader()
            while not next(reader):  # up to and including the header (blank lines before it skipped)
                pass
            self._lines = []
            ended = reader.line_num
            try:
                for row in reader:
                    if row:
                        self._lines.append(ended + 1)
                    ended = reader.line_num
            except csv.Error:
                pass  # past the rows that were read (the first read stopped there with its own error)
            self._broken_at = ended + 1
        return self._lines

    def as_text(self) -> "_LineNumbersAsText":
        return _LineNumbersAsText(self)


class _LineNumbersAsText(Sequence):
    """The line numbers as ids ("2", "3", ...), computed only if a file without id or group column needs them."""

    def __init__(self, lines: _LineNumbers):
        self._lines = lines

    def __len__(self) -> int:
        return len(self._lines._numbers())

    def __iter__(self):
        return map(str, self._lines._numbers())

    def __getitem__(self, row):
        numbers = self._lines._numbers()
        if isinstance(row, slice):
            return [str(number) for number in numbers[row]]
        return str(numbers[row])


def frame_table(frame, unit: str, source) -> Table:
    """A polars DataFrame's rows (``unit`` names them in messages: 'row 3')."""
    from capgeo.captions.images import image_keys_of_frame, is_image_dtype

    height = frame.height
    where = lambda row: f"{unit} {row + 1}"  # noqa: E731

    def get(name):
        if is_image_dtype(frame.schema[name]):
            return image_keys_of_frame(frame, name, source, where)
        return frame[name]

    return Table(list(frame.columns), get, height, where, RowNumbers(height), "columns")


def _pick(table: Table, given: str | None, option: str, names: tuple[str, ...], path) -> str | None:
    if given is not None:
        if given in table.columns:
            return given
        # a user typing `--text-column iiw` for a key "IIW" means it, unless the case is what tells columns apart
        folded = [column for column in table.columns if column.casefold() == given.casefold()]
        if len(folded) != 1:
            raise DataError(
                f"{path}: no {_noun(table)} {given!r} ({option}); {table.kind} found: {_listing(table)}"
            )
        warnings.warn(ColumnCaseWarning(f"{option} {given!r}: using {_noun(table)} {folded[0]!r} of {path} "
                                        f"(no exact match; matched ignoring case)"), stacklevel=2)
        return folded[0]
    for name in names:  # the first recognised name present wins: exactly, else the one column equal ignoring case
        if name in table.columns:
            return name
        folded = [column for column in table.columns if column.casefold() == name]
        if len(folded) == 1:
            return folded[0]
        if folded:
            raise DataError(f"{path}: {_noun(table)}s {' and '.join(map(repr, folded))} both match {name!r} ignoring "
                            f"case, and none matches exactly; {_advice_for(name)}")
    return None


def _advice_for(name: str) -> str:
    """How to pick one of two columns that both match a recognised name ignoring case."""
    for option, names in (("--text-column", TEXT_NAMES), ("--captions-column", CAPTIONS_NAMES),
                          ("--id-column", ID_NAMES), ("--group-column", GROUP_NAMES)):
        if name in names:
            return f"name the one to use with {option}"
    return "rename one of them"


def _noun(table: Table) -> str:
    return "column" if table.kind == "columns" else "key"


def _listing(table: Table) -> str:
    # a name with surrounding spaces (" caption" after "id, caption" in a CSV header) is quoted, else
    # the listing reads as if the column asked for were there
    return ", ".join(repr(name) if name != name.strip() or not name else name for name in table.columns[:30]) or "none"


def captions_from_table(table: Table, path, format: str, columns: ColumnChoice) -> RawCaptions:
    text_column = _pick(table, columns.text, "--text-column", (), path) if columns.text else None
    captions_column = _pick(table, columns.captions, "--captions-column", (), path) if columns.captions else None
    if text_column and captions_column:
        raise DataError("give --text-column or --captions-column, not both")
    detected = not text_column and not captions_column
    if detected:
        text_column = _pick(table, None, "", TEXT_NAMES, path)
        if text_column is None:
            captions_column = _pick(table, None, "", CAPTIONS_NAMES, path)
    if not text_column and not captions_column:
        raise DataError(
            f"{path}: found no caption {_noun(table)} (looked for {', '.join(TEXT_NAMES + CAPTIONS_NAMES)}); "
            f"{table.kind} found: {_listing(table)}; name it with --text-column or --captions-column"
        )
    id_column = _pick(table, columns.id, "--id-column", ID_NAMES, path)
    image_column = _pick(table, columns.image, "--image-column", (), path) if columns.image else None
    group_column = _pick(table, columns.group, "--group-column", GROUP_NAMES, path)
    if group_column is None and image_column is not None:
        group_column = image_column  # captions of one image file are one group
    split_column = _pick(table, None, "", SPLIT_NAMES, path)
    if table.prefetch is not None:  # the columns used, read together (one pass over the shards)
        table.prefetch([name for name in (text_column, captions_column, id_column, group_column, split_column)
                        if name is not None], text=text_column, id=id_column)
    if detected and text_column is not None and _holds_lists(table.get(text_column), format):
        text_column, captions_column = None, text_column
    for chosen in (id_column, group_column, split_column):
        if chosen is not None and chosen in (text_column, captions_column):
            raise DataError(f"{path}: {_noun(table)} {chosen!r} cannot be both the caption and the id/group/split")

    ids = table.get(id_column) if id_column else None
    groups = _image_groups(table.get(group_column), path, table.where, group_column) if group_column else None
    splits = table.get(split_column) if split_column else table.splits
    if text_column:
        if ids is None and groups is None:
            ids = table.numbers
        raw = RawCaptions(source=path, format=format, texts=table.get(text_column), where=table.where,
                          ids=ids, groups=groups, splits=splits, fields=table.columns, numbers=table.numbers,
                          edges=table.checks.get(("edges", text_column)),
                          cut=table.checks.get(("cut", id_column)) if id_column else None)
    else:
        raw = _expand_caption_lists(table, captions_column, ids, groups, splits, path, format)
    raw.layout = table.layout
    if group_column is not None:
        # what names the images, read again only when they are asked for (the loader adds the files)
        raw.image_columns = (group_column, image_column or group_column)
    return raw


def _image_groups(values: list, path, where, column: str) -> list:
    """An ``Image`` column read as Python values ({bytes, path} dicts) names each image by its
    path or the hash of its bytes (capgeo.captions.images); other group values pass unchanged."""
    from capgeo.captions.images import image_keys_of_values, is_image_value

    first = next((value for value in values if value is not None), None)
    if not is_image_value(first):
        return values
    return image_keys_of_values(values, path, where, column)


def _holds_lists(values, format: str) -> bool:
    dtype = getattr(values, "dtype", None)
    if hasattr(dtype, "base_type"):  # a polars column (Parquet, Arrow): its type says; its items are Series
        return dtype.base_type().__name__ in ("List", "Array")
    first = next((value for value in values if value is not None and not (isinstance(value, str) and not value)),
                 None)
    if format in ("csv", "tsv") and isinstance(first, str) and first.lstrip().startswith("["):
        # CSV/TSV cells hold lists as JSON text; a caption that merely starts with "[" stays a caption
        try:
            first = _json.loads(first)
        except json.JSONDecodeError:
            return False
    return isinstance(first, (list, tuple))


def _expand_caption_lists(table: Table, column: str, ids, groups, splits, path, format: str) -> RawCaptions:
    """One row per caption; the row's id (or number) names the group when there is no group column."""
    ids, groups, splits, values = (_listed(column_values) for column_values in (ids, groups, splits, table.get(column)))
    groups = row_groups(groups if groups is not None else ids, table.numbers)
    out_groups, out_splits, texts, rows, positions = [], [], [], [], []
    for row, value in enumerate(values):
        # a row without captions (null, missing, an empty list or cell) stays visible as one null
        # caption, which loading skips and counts, instead of its image vanishing without a word
        captions = _caption_list(value, path, table.where(row), column) or [None]
        for k, caption in enumerate(captions):
            out_groups.append(groups[row])
            out_splits.append(splits[row] if splits is not None else None)
            texts.append(caption)
            rows.append(row)
            positions.append(k)
    return RawCaptions(
        source=path, format=format, texts=texts,
        where=lambda index: f"{table.where(rows[index])}, caption {positions[index] + 1}",
        groups=out_groups, splits=out_splits if splits is not None else None, fields=table.columns,
    )


def _listed(values):
    """A polars column (Parquet, Arrow, DataFrames) as a Python list; lists stay as they are."""
    return values.to_list() if hasattr(values, "to_list") and not isinstance(values, (list, tuple)) else values


def _caption_list(value, path, place: str, column: str) -> list:
    if value is None or (isinstance(value, float) and value != value) or value == "":
        return []
    if isinstance(value, str):
        # CSV cells hold lists as JSON text: ["a cat", "a dog"]
        why = ""
        try:
            value = _json.loads(value)
        except json.JSONDecodeError as error:
            value = None
            # a cell that opens a list says what is wrong with it (nested too deeply, a huge number)
            why = f"; this one does not parse: {error.msg}" if str(error.doc).lstrip().startswith("[") else ""
        if not isinstance(value, list):
            raise DataError(f"{path}: {place}: {column!r} should hold a list of captions (a JSON list in CSV/TSV)"
                            + why)
    if hasattr(value, "to_list"):
        value = value.to_list()
    if not isinstance(value, (list, tuple)):
        raise DataError(f"{path}: {place}: {column!r} should hold a list of captions; found {json_kind(value)}")
    # Karpathy-like sentence objects: take their text
    captions = [_sentence_text(item) for item in value]
    nested = next((k for k, caption in enumerate(captions) if isinstance(caption, (list, tuple))
                   or hasattr(caption, "to_list")), None)
    if nested is not None:
        raise DataError(f"{path}: {place}, caption {nested + 1}: {column!r} holds a list inside its list of captions; "
                        "expected one list of captions (text) per row: flatten the column")
    return captions


def _sentence_text(item):
    if isinstance(item, dict):
        for name in ("raw", "caption", "text", "sentence"):
            if name in item:
                return item[name]
    return item
