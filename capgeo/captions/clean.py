"""From what a reader found to a checked CaptionSet.

Readers hand over ``RawCaptions``: parallel columns as they appear in the file.
``to_caption_set`` then applies the same rules to every format:

- caption ids: taken from the file when it has them; otherwise ``<group>#<k>``
  (k = 0, 1, ... counting that group's captions in file order, as Flickr30k does)
  or, without a group either, the record's number (readers pass line numbers); an id
  made for a record that lacks one never equals an id the file gives (" (line N)" is
  added where it would);
- duplicate caption ids stop the load with an error naming both occurrences,
  since every later result is keyed by caption id;
- a missing group means one caption per image: group = caption id (" (no group)"
  added where that id is also another record's group);
- text is stripped of surrounding whitespace, inner text kept as is; empty,
  whitespace-only, invisible-only (control, zero-width) and null captions are
  skipped and counted in ``skipped``; a caption that is not text (a number, a
  list) is an error, since it means the wrong column was read;
- ``split`` keeps only matching rows (error if the file has no split field or
  nothing matches); ``limit`` keeps the first N captions that remain;
- nothing left is an error.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import filterfalse
from pathlib import Path
from typing import TYPE_CHECKING

from capgeo.captions.model import COLUMNS, CaptionColumns, CaptionSet, Skipped
from capgeo.captions.sources import json_kind
from capgeo.errors import DataError

if TYPE_CHECKING:
    import polars as pl

#: Unicode categories that show nothing: control, format (zero-width), surrogate,
#: unassigned, and separators
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Cn", "Zs", "Zl", "Zp"})
#: the formats whose columns the column options name (a benchmark layout has its own fields)
GENERIC_FORMATS = ("jsonl", "json", "csv", "tsv", "parquet", "arrow", "text")
#: how many places to quote per kind of skipped row
MAX_EXAMPLES = 5


@dataclass
class RawCaptions:
    """Columns of one dataset as read, before any checking.

    ``ids``/``groups``/``splits`` are None when the file has no such field;
    single entries may also be None (missing in that record). ``where(i)`` says
    where caption i came from (e.g. 'line 12', 'record 3, caption 2').
    ``fields`` lists what the file does have, for error messages.
    """

    source: Path
    format: str
    texts: list
    where: Callable[[int], str]
    ids: list | None = None
    groups: list | None = None
    splits: list | None = None
    fields: Sequence[str] = field(default_factory=list)
    #: each record's line (or record) number as text, for ids made for records without one
    numbers: Sequence[str] | None = None
    #: what the reader itself left out: reason -> places (files of a folder that hold no caption)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    #: how the source was read, when it is more than one file of its format (CaptionSet.layout)
    layout: str | None = None
    #: the files read, when the source is not one file or folder (a glob, a brace range)
    files: tuple[Path, ...] = ()
    #: ``row_checks(texts)["edges"]`` and ``row_checks(ids)["cut"]`` when the reader computed them as it
    #: read the columns (polars scans do: the columns are still in cache), else None
    edges: "pl.Series | None" = None
    cut: "pl.Series | None" = None
    #: where the images are (capgeo.images.sources), when the reader knows; CaptionSet.image_source
    images: object = None
    #: (group column, image column) of a table whose column names the images, for the loader to record
    image_columns: tuple[str, str] | None = None


class RowNumbers(Sequence):
    """"1", "2", ... "n", made only for the rows asked for (a million strings took memory and time
    for files whose rows have ids)."""

    def __init__(self, height: int, start: int = 1):
        self._height = height
        self.start = start

    def __len__(self) -> int:
        return self._height

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [str(number + self.start) for number in range(self._height)[row]]
        if not -self._height <= row < self._height:
            raise IndexError(row)
        return str(range(self._height)[row] + self.start)

    def __iter__(self):
        return map(str, range(self.start, self.start + self._height))


def _is_series(values) -> bool:
    """Is ``values`` a polars Series? Without importing polars: a reader that made one has."""
    polars = sys.modules.get("polars")
    return polars is not None and isinstance(values, polars.Series)


def to_caption_set(raw: RawCaptions, *, split: str | None = None, limit: int | None = None) -> CaptionSet:
    made = _to_caption_set(raw, split=split, limit=limit)
    if raw.images is not None:
        made.image_source = raw.images
    return made


def _to_caption_set(raw: RawCaptions, *, split: str | None = None, limit: int | None = None) -> CaptionSet:
    if _is_series(raw.texts):
        # columns read by polars (Parquet, Arrow, DataFrames): the common case without a Python object
        # per caption; anything it does not take (a missing id, a duplicate, ...) goes the row-by-row way,
        # which applies the same rules and says what is wrong
        made = _columnar_caption_set(raw, split=split, limit=limit)
        if made is not None:
            return made
        raw = _as_lists(raw)
    try:
        return _checked_caption_set(raw, split=split, limit=limit)
    except UnicodeEncodeError:
        # a JSON escape of half a surrogate pair ("\ud800") reads as a str that is not Unicode text,
        # which polars (UTF-8) refuses: name where it is instead of a traceback
        raise _not_unicode_text(raw) from None


#: what str.strip() strips: every character for which str.isspace() is true
PYTHON_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                     "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def _as_lists(raw: RawCaptions) -> RawCaptions:
    """``raw`` with its polars columns as Python lists, for the row-by-row rules."""
    def listed(values):
        return values.to_list() if _is_series(values) else values

    return dataclasses.replace(raw, texts=listed(raw.texts), ids=listed(raw.ids), groups=listed(raw.groups),
                               splits=listed(raw.splits))


def _named_keys(values) -> pl.Series | None:
    """Ids or groups as text when none is null, else None. Integers are written as _key writes them
    (str); other types are left to the row-by-row rules. Empty text, also a missing key, is tested
    with the captions (_columnar_caption_set)."""
    import polars as pl

    if values.null_count():
        return None
    if values.dtype == pl.String:
        return values
    if values.dtype.is_integer():
        return values.cast(pl.String)
    return None


def _columnar_caption_set(raw: RawCaptions, *, split: str | None, limit: int | None) -> CaptionSet | None:
    """The CaptionSet of polars columns by the rules of _checked_caption_set, computed column-wise;
    None where those rules need a look at single rows (missing or duplicate ids, missing groups,
    unknown splits, nothing left), which the caller then applies."""
    import polars as pl

    texts = raw.texts
    n_rows = len(texts)
    if texts.dtype != pl.String:
        return None
    if isinstance(raw.ids, pl.Series):
        ids = _named_keys(raw.ids)
    elif raw.ids is None and isinstance(raw.groups, pl.Series):
        groups = _named_keys(raw.groups)
        ids = None if groups is None else pl.DataFrame({"group": groups}).select(
            pl.col("group") + "#" + pl.int_range(pl.len()).over("group").cast(pl.String)).to_series()
    elif isinstance(raw.ids, RowNumbers):
        ids = pl.int_range(raw.ids.start, raw.ids.start + n_rows, eager=True).cast(pl.String)
    else:
        return None
    if ids is None or len(ids) != n_rows:
        return None
    if raw.groups is not None and not isinstance(raw.groups, pl.Series):
        return None
    groups = ids if raw.groups is None else _named_keys(raw.groups)
    if groups is None:
        return None
    splits = None
    if raw.splits is not None:
        splits = raw.splits if isinstance(raw.splits, pl.Series) else pl.Series(raw.splits, dtype=pl.String)
        if splits.dtype != pl.String or splits.null_count() or splits.str.contains(r"^[\s\x1c-\x1f]*$").any():
            return None  # blank splits are no split (_split_name): decided row by row
    if not n_rows or (split is not None and splits is None):
        return None
    # a caption that starts and ends with printable ASCII has nothing to strip and is visible: kept as
    # it is. The others (null, empty, other first or last characters) are decided by the row rules.
    # Ids made here ("<group>#<k>", row numbers) are distinct by construction; given ones are checked,
    # and a duplicate goes to the row rules, which name it; so does an empty id or group. The tests run
    # in one select, in polars' threads, on the columns as read (a frame of columns chunked unlike one
    # another, such as the shards' texts beside ids made in one piece, would be copied into one chunk)
    given_ids = isinstance(raw.ids, pl.Series)
    keys = ({"id": ids} if given_ids else {}) | ({"group": groups} if isinstance(raw.groups, pl.Series) else {})
    # the reader's own row tests are used where it made them on these very columns (same length, and
    # the id cut of text ids: _named_keys returns those as they are)
    edges = raw.edges if raw.edges is not None and len(raw.edges) == n_rows else None
    cut = raw.cut if given_ids and ids is raw.ids and raw.cut is not None and len(raw.cut) == n_rows else None
    columns, wanted = dict(keys), [(pl.col(name) == "").any().alias(f"empty {name}") for name in keys]
    if edges is None:
        columns["text"] = texts
        wanted.append(row_checks(pl.col("text"))["edges"])
    if given_ids and cut is None:
        wanted.append(row_checks(pl.col("id"))["cut"])
    tests = pl.DataFrame(columns).select(wanted) if wanted else None
    if edges is None:
        edges = tests["edges"]
    if given_ids and cut is None:
        cut = tests["cut"]
    if any(tests[f"empty {name}"][0] for name in keys) or (given_ids and not _all_distinct(ids, cut)):
        return None
    in_split = None if split is None else splits == split
    checked_rows = (edges if in_split is None else edges & in_split).arg_true()
    reasons: list[tuple[int, str]] = []  # (row, why it is skipped), in row order
    cleaned_rows: list[int] = []
    cleaned: list[str] = []
    for row, value in zip(checked_rows.to_list(), texts.gather(checked_rows).to_list()):
        cleaned_text, reason = _clean_text(value, raw, row)
        if reason is None:
            cleaned_rows.append(row)
            cleaned.append(cleaned_text)
        else:
            reasons.append((row, reason))
    if cleaned_rows:
        texts = texts.clone().scatter(cleaned_rows, pl.Series(cleaned, dtype=pl.String))
    keep = in_split
    if reasons:
        left_out = pl.int_range(n_rows, eager=True).is_in([row for row, _ in reasons])
        keep = ~left_out if keep is None else keep & ~left_out
    frame = pl.DataFrame({"caption_id": ids, "group_id": groups, "text": texts} |
                         ({"split": splits} if splits is not None else {}))
    kept = frame if keep is None else frame.filter(keep)
    if limit is not None and kept.height >= limit:
        kept = kept.head(limit)
        last = limit - 1 if keep is None else int(keep.arg_true()[limit - 1])
        reasons = [(row, reason) for row, reason in reasons if row < last]  # the row loop stops at the limit
    if not kept.height:
        return None
    skipped = {reason: list(places) for reason, places in raw.skipped.items()}
    for row, reason in reasons:
        skipped.setdefault(reason, []).append(raw.where(row))
    table = kept.select(pl.col(name).cast(pl.String) if name in kept.columns else pl.lit(None, pl.String).alias(name)
                        for name in COLUMNS)
    skipped_list = [Skipped(reason, len(places), tuple(places[:MAX_EXAMPLES])) for reason, places in skipped.items()]
    return CaptionSet(table, raw.source, raw.format, skipped_list, layout=raw.layout, files=raw.files)


def row_checks(column: pl.Expr) -> dict[str, pl.Expr]:
    """The column-wise tests of _columnar_caption_set, as expressions on ``column``: "edges", True
    where a caption needs the row rules (see _printable_edges), and "cut", an id's cut hash (see
    _all_distinct). Readers that scan files evaluate them in the scan, on columns still in cache."""
    return {"edges": _printable_edges(column).not_().alias("edges"), "cut": _cut_hash(column).alias("cut")}


def _printable_edges(text: pl.Expr) -> pl.Expr:
    """True where the text's first and last characters are printable ASCII (U+0021..U+007E), False
    where not or where the text is empty or null. A UTF-8 byte below 0x80 is a whole character, so
    the first and last bytes tell: the first by comparing the text with "!" and "\x7f" (polars
    compares the leading bytes it keeps beside each string), the last read as a byte. Both took
    about a fifth of the time of slicing out the first and last characters."""
    import polars as pl

    first = (text >= "!") & (text < "\x7f")
    if not hasattr(text.bin, "get"):  # polars before bin.get: the last character itself
        return (first & text.str.tail(1).is_in([chr(code) for code in range(0x21, 0x7F)])).fill_null(False)
    return (first & text.cast(pl.Binary).bin.get(-1, null_on_oob=True).is_between(0x21, 0x7E)).fill_null(False)


def _cut_hash(values: pl.Expr) -> pl.Expr:
    """Each value's 64-bit hash cut to its low 32 bits (for :func:`_all_distinct`)."""
    import polars as pl

    return values.hash(seed=0).cast(pl.UInt32, wrap_numerical=True)


def _all_distinct(values: pl.Series, cut: pl.Series) -> bool:
    """Are the (non-null) strings ``values`` all different? ``cut`` holds their hashes cut to 32 bits
    (:func:`_cut_hash`), which are sorted (numpy sorts them with SIMD, several times faster than a
    hash set of the strings or of their 64-bit hashes, and than sorting those); only the values
    whose cut hashes meet (about n**2 / 2**33 pairs) are then compared as strings."""
    import polars as pl

    ordered = cut.to_numpy()  # a copy of the shards' chunks, sorted in place (np.sort copies again)
    if not ordered.flags.writeable:
        ordered = ordered.copy()
    ordered.sort()
    meet = ordered[1:] == ordered[:-1]
    if not meet.any():
        return True
    # as a list: np.unique and a Series made from an array import numpy.ma (9 ms); repeats do no harm
    shared = pl.Series(ordered[1:][meet].tolist(), dtype=pl.UInt32)
    candidates = values.filter(cut.to_frame("cut").select(pl.col("cut").is_in(shared.implode())).to_series())
    return candidates.n_unique() == candidates.len()


def _not_unicode_text(raw: RawCaptions) -> DataError:
    for name, values in (("caption", raw.texts), ("id", raw.ids), ("group", raw.groups), ("split", raw.splits)):
        for row, value in enumerate(values or ()):
            if isinstance(value, str):
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as error:
                    return DataError(f"{raw.source}: {raw.where(row)}: the {name} holds {value[error.start]!r}, half "
                                     f"of a UTF-16 surrogate pair (an escape such as \\ud800 without its partner), "
                                     f"which is not Unicode text; fix or drop that record")
    return DataError(f"{raw.source}: holds text that is not valid Unicode (an unpaired surrogate escape)")


def _checked_caption_set(raw: RawCaptions, *, split: str | None, limit: int | None) -> CaptionSet:
    n_rows = len(raw.texts)
    ids = _caption_ids(raw)
    _check_unique(ids, raw)
    groups = _group_ids(raw.groups, ids, raw)
    splits = [_split_name(value) for value in raw.splits] if raw.splits is not None else None

    rows = range(n_rows)
    if split is not None:
        rows = _rows_of_split(splits, split, raw)

    kept_rows: list[int] = []
    kept_texts: list[str] = []
    skipped: dict[str, list[str]] = {reason: list(places) for reason, places in raw.skipped.items()}
    texts = raw.texts
    for row in rows:
        value = texts[row]
        # the common case inline (a call per row would be most of loading a million captions): a
        # string whose first stripped character is visible is kept stripped; the rest are checked
        text = value.strip() if type(value) is str else ""
        if not text or unicodedata.category(text[0]) in INVISIBLE_CATEGORIES:
            text, reason = _clean_text(value, raw, row)
            if reason is not None:
                skipped.setdefault(reason, []).append(raw.where(row))
                continue
        kept_rows.append(row)
        kept_texts.append(text)
        if limit is not None and len(kept_rows) >= limit:
            break

    skipped_list = [Skipped(reason, len(places), tuple(places[:MAX_EXAMPLES])) for reason, places in skipped.items()]
    if not kept_rows:
        detail = f"{n_rows} rows read"
        if split is not None:
            detail += f", {len(rows)} in split {split!r}"
        for item in skipped_list:
            detail += f"; skipped {item.count}: {item.reason}"
        raise DataError(f"{raw.source}: no captions to use ({detail})")

    def kept(values: list) -> list:
        # kept rows ascend without repeats: as many as read means all of them, in order
        return values if len(kept_rows) == n_rows else [values[row] for row in kept_rows]

    columns = CaptionColumns(caption_id=kept(ids), group_id=kept(groups),
                             split=kept(splits) if splits is not None else None, text=kept_texts)
    for values in (columns.caption_id, columns.group_id, columns.split or (), columns.text):
        _check_unicode(values)
    return CaptionSet.of_columns(columns, raw.source, raw.format, skipped_list, layout=raw.layout, files=raw.files)


def _check_unicode(values) -> None:
    """UnicodeEncodeError where one of ``values`` (texts; None for a missing split) holds half a
    surrogate pair (a JSON escape such as "\\ud800" reads as one): not Unicode text, which polars
    (UTF-8) and every file written later refuse. ASCII texts, nearly all, are passed over unencoded."""
    for value in filterfalse(str.isascii, filter(None, values)):
        value.encode("utf-8")


def _all_named(values: list | None) -> bool:
    return values is not None and all(type(value) is str and value for value in values)


def _caption_ids(raw: RawCaptions) -> list[str]:
    # the common cases without the row loop below, which takes a second at a million captions (a
    # _key call and a clash check per row)
    if _all_named(raw.ids):
        return list(raw.ids)
    if raw.ids is None and _all_named(raw.groups):
        # "<group>#<index of the caption within its group>"
        seen: dict[str, int] = {}
        made = []
        for group in raw.groups:
            index = seen.get(group, 0)
            seen[group] = index + 1
            made.append(f"{group}#{index}")
        return made
    n_rows = len(raw.texts)
    counters: Counter = Counter()
    given_ids = [_key(value, raw, row, "id") for row, value in enumerate(raw.ids)] if raw.ids is not None else None
    # a record without an id in a file whose other records have ids: the id made for it must not
    # be one of theirs (record 2's number "2" beside a given id "2" read as a duplicate id)
    taken = {value for value in given_ids or () if value is not None}
    ids: list[str] = []
    for row in range(n_rows):
        given = given_ids[row] if given_ids is not None else None
        if given is not None:
            ids.append(given)
            continue
        group = _key(raw.groups[row], raw, row, "group") if raw.groups is not None else None
        if group is not None:
            made = f"{group}#{counters[group]}"
            counters[group] += 1
        else:
            # the record's line (or record) number, as readers of line-based files give it; the last resort
            made = raw.numbers[row] if raw.numbers is not None else str(row + 1)
        ids.append(_distinct(made, taken, f" ({raw.where(row)})"))
    return ids


def _key(value, raw: RawCaptions, row: int, name: str) -> str | None:
    """An id or group value as text; None where it is missing (null, empty, NaN).

    A float that is a whole number is written as one ("7", not "7.0"): an integer column with a
    missing value becomes floats once pandas has touched it. NaN is a missing value, not the
    group "nan" (which made every caption without an image positives of one another)."""
    if isinstance(value, (dict, list, tuple)):
        advice = f" (name another column with --{name}-column)" if raw.format in GENERIC_FORMATS else ""
        raise DataError(f"{raw.source}: {raw.where(row)}: the {name} is {json_kind(value)}; expected text or a "
                        f"number{advice}")
    return key_text(value)


def key_text(value) -> str | None:
    """:func:`_key`'s text for a value that is not an object or a list."""
    if value is None or value == "":
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _distinct(made: str, taken: set[str], marker: str) -> str:
    """``made``, or ``made`` with ``marker`` added (as often as needed) when a given value is already that."""
    while made in taken:
        made += marker
    return made


def _check_unique(ids: list[str], raw: RawCaptions) -> None:
    if len(set(ids)) == len(ids):
        return
    first_seen: dict[str, int] = {}
    for row, caption_id in enumerate(ids):
        earlier = first_seen.setdefault(caption_id, row)
        if earlier != row:
            raise DataError(
                f"{raw.source}: duplicate caption id {caption_id!r} at {raw.where(earlier)} and {raw.where(row)}; "
                "caption ids must be unique (fix the file"
                + (", or pass --id-column with a unique column)" if raw.format in GENERIC_FORMATS else ")")
            )


def _group_ids(groups: list | None, ids: list[str], raw: RawCaptions) -> list[str]:
    if groups is None:
        return list(ids)
    if all(type(group) is str and group for group in groups):
        return list(groups)
    keys = [_key(group, raw, row, "group") for row, group in enumerate(groups)]
    # a caption without a group is an image of its own: its group is its caption id, unless that
    # is also another image's group (ids and image ids are often both numbers), which would
    # silently make the two captions positives of one image
    given = {key for key in keys if key is not None}
    return [_distinct(caption_id, given, " (no group)") if key is None else key for key, caption_id in zip(keys, ids)]


def row_groups(groups: Sequence | None, numbers: Sequence[str]) -> list:
    """The group of each row of a list-of-captions file, whose captions all describe that row's image.

    A row without a group (null, empty, NaN) is still one image: its number names it, made
    distinct from the groups other rows give (" (no group)" added where it would clash), instead
    of each of its captions becoming an image of its own, which counted them as negatives of
    one another."""
    if groups is None:
        return list(numbers)
    # each given group as _key will write it, so that a made name never equals one
    keys = [key_text(value) for value in groups]
    if None not in keys:
        return list(groups)
    taken = {key for key in keys if key is not None}
    return [_distinct(number, taken, " (no group)") if key is None else value
            for value, key, number in zip(groups, keys, numbers)]


def _split_name(value) -> str | None:
    """A blank split cell (an empty CSV cell, "", NaN) is no split, not a split named ""."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text if text.strip() else None


def _rows_of_split(splits: list | None, split: str, raw: RawCaptions) -> list[int]:
    if splits is None:
        found = ", ".join(map(str, raw.fields)) or "none"
        raise DataError(
            f"{raw.source}: --split {split!r} given but the {raw.format} data has no split field (fields: {found})"
        )
    rows = [row for row, value in enumerate(splits) if value == split]
    if not rows:
        counts = Counter("(none)" if value is None else value for value in splits)
        present = ", ".join(f"{name} ({count})" for name, count in counts.most_common())
        raise DataError(f"{raw.source}: no rows in split {split!r}; splits present: {present}")
    return rows


def _clean_text(value, raw: RawCaptions, row: int) -> tuple[str, str | None]:
    """(stripped text, None) or ('', reason to skip)."""
    if value is None:
        return "", "missing caption (null or absent)"
    if isinstance(value, bool) or isinstance(value, (dict, list, tuple)):
        raise DataError(
            f"{raw.source}: {raw.where(row)}: caption should be text, found {type(value).__name__}: "
            f"{str(value)[:60]!r}" + ("; a list of captions is read with --captions-column"
                                      if isinstance(value, list) and raw.format in GENERIC_FORMATS else "")
        )
    if not isinstance(value, str):
        # JSON and Parquet say what type a field is: numbers in the text column mean it is the wrong column
        advice = "; is the caption column the right one (--text-column)?" if raw.format in GENERIC_FORMATS else ""
        raise DataError(f"{raw.source}: {raw.where(row)}: caption should be text, found {type(value).__name__}: "
                        f"{str(value)[:60]!r}{advice}")
    text = value.strip()
    if not text:
        return "", "empty or whitespace-only caption"
    if not any(unicodedata.category(char) not in INVISIBLE_CATEGORIES for char in text):
        # such captions all embed alike and would be reported as near-duplicates of each other
        return "", "caption with no visible character (only control, format or zero-width characters)"
    return text, None
