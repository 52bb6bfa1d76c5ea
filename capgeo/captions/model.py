"""The table every command works on: one row per caption."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import polars as pl

#: Column names of CaptionSet.table, in order.
COLUMNS = ("caption_id", "group_id", "split", "text")


@dataclass(frozen=True)
class Skipped:
    """Rows left out while loading, with why and where (e.g. 'line 12', 'id 000123')."""

    reason: str
    count: int
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class CaptionColumns:
    """A CaptionSet's columns as Python lists, row by row: what the loaders that read records
    (JSON, CSV, benchmark files, lists) make. Kept as they are, a command that reads only the
    texts, ids and groups builds no table, and so never imports polars (a fifth of a second)."""

    caption_id: list[str]
    group_id: list[str]
    #: None when the dataset has no split field
    split: list[str | None] | None
    text: list[str]


class CaptionSet:
    """Captions of one dataset.

    ``table`` has the columns ``caption_id`` (unique str), ``group_id`` (str: the
    image a caption describes; captions of one image share it), ``split`` (str or
    null) and ``text`` (str). Captions of one group are positives of each other,
    never negatives. A CaptionSet made :meth:`of_columns` builds its table when it is
    first asked for; ``texts``, ``ids``, ``groups`` and ``splits`` never need it.
    """

    #: where each group's image is, as the loader recorded it (capgeo.images.sources), read only when
    #: the images are asked for; None: the dataset names no images (a class default: nothing per set)
    image_source = None

    def __init__(self, table: pl.DataFrame, source: Path, format: str, skipped: list[Skipped] | None = None,
                 layout: str | None = None, files: tuple[Path, ...] = ()):
        self._table = table
        self._columns: CaptionColumns | None = None
        self.source = source
        self.format = format
        self.skipped = list(skipped) if skipped is not None else []
        #: how the source was read, where its format alone does not say ("Hugging Face parquet, 4 shards,
        #: split train", "polars DataFrame"); None for one file or folder of a format
        self.layout = layout
        #: the files read, when ``source`` names several (a glob or brace pattern): what the fingerprint covers
        self.files = files

    @classmethod
    def of_columns(cls, columns: CaptionColumns, source: Path, format: str, skipped: list[Skipped] | None = None,
                   layout: str | None = None, files: tuple[Path, ...] = ()) -> CaptionSet:
        made = cls(None, source, format, skipped, layout, files)
        made._columns = columns
        return made

    def __repr__(self) -> str:
        return (f"CaptionSet({len(self):,} captions, source={self.source!r}, format={self.format!r}, "
                f"layout={self.layout!r}, skipped={self.skipped!r})")

    @property
    def table(self) -> pl.DataFrame:
        if self._table is None:
            import polars as pl

            columns = self._columns
            self._table = pl.DataFrame(
                {"caption_id": columns.caption_id, "group_id": columns.group_id,
                 "split": columns.split if columns.split is not None else [None] * len(columns.text),
                 "text": columns.text},
                schema={name: pl.String for name in COLUMNS},
            )
        return self._table

    def __len__(self) -> int:
        return len(self._columns.text) if self._columns is not None else self._table.height

    def _column(self, name: str) -> list:
        if self._columns is not None:
            return list(getattr(self._columns, name))
        return self._table[name].to_list()

    @property
    def texts(self) -> list[str]:
        return self._column("text")

    @property
    def ids(self) -> list[str]:
        return self._column("caption_id")

    @property
    def groups(self) -> list[str]:
        return self._column("group_id")

    @property
    def splits(self) -> list[str | None]:
        """Each caption's split, None where it has none (every caption, in a dataset without splits)."""
        if self._columns is not None and self._columns.split is None:
            return [None] * len(self)
        return self._column("split")

    def row(self, position: int) -> dict:
        """One caption as {caption_id, group_id, split, text}."""
        if self._columns is None:
            return self._table.row(position, named=True)
        columns = self._columns
        return {"caption_id": columns.caption_id[position], "group_id": columns.group_id[position],
                "split": columns.split[position] if columns.split is not None else None,
                "text": columns.text[position]}

    @cached_property
    def group_codes(self) -> np.ndarray:
        """Integer group label per caption (0..n_groups-1), in first-seen order: stable output."""
        codes: dict[str, int] = {}
        return np.fromiter((codes.setdefault(group, len(codes)) for group in self.groups), dtype=np.int64,
                           count=len(self))

    @cached_property
    def group_names(self) -> list[str]:
        """The group id of each group code 0..n_groups-1 (codes follow first appearance)."""
        return list(dict.fromkeys(self.groups))

    @cached_property
    def n_groups(self) -> int:
        # asked several times per profile
        return int(self.group_codes.max()) + 1 if len(self) else 0

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the source file (or of a folder's or a pattern's files, by name and content)."""
        digest = hashlib.sha256()
        if self.files:
            paths, root = list(self.files), Path(os.path.commonpath([path.parent for path in self.files]))
        elif self.source.is_dir():
            paths, root = sorted(p for p in self.source.rglob("*") if p.is_file()), self.source
        else:
            paths, root = [self.source], None
        for path in paths:
            # the name's bytes as the file system holds them (a name that is not UTF-8 too)
            digest.update(os.fsencode(str(path.relative_to(root) if root is not None else path.name)))
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        return digest.hexdigest()

    def texts_digest(self) -> str:
        """sha256 over the caption texts in order: the identity of what gets encoded."""
        return texts_sha256(self.texts)


def _not_unicode(texts: list) -> Exception:
    """Half a surrogate pair ("\\ud800", from a JSON escape or a library caller) is a str but not
    Unicode text: named in one line, as the loaders name it."""
    from capgeo.errors import DataError

    for row, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            return DataError(f"text {row}: holds {text[error.start]!r}, half of a UTF-16 surrogate pair, which "
                             "is not Unicode text; fix or drop that caption")
    return DataError("the texts hold something that is not Unicode text")


def texts_sha256(texts) -> str:
    """sha256 over texts in order: each text followed by a NUL, hashed in one update (a call per
    caption takes most of a second at a million captions).

    A NUL inside a text would let ["a\\0b", "c"] and ["a", "b\\0c"] hash alike, and so share cached
    vectors: texts that hold one are hashed with their lengths instead, under another prefix.
    Texts without one, nearly all, keep the digest they always had, and with it their cache entries.
    """
    texts = list(texts)
    joined = "\x00".join(texts) + "\x00" if texts else ""
    try:
        encoded = joined.encode("utf-8")
    except UnicodeEncodeError:
        raise _not_unicode(texts) from None
    if joined.count("\x00") == len(texts):
        return hashlib.sha256(encoded).hexdigest()
    digest = hashlib.sha256(b"capgeo texts, length-prefixed\n")
    for text in texts:
        encoded = text.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()
