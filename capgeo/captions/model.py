"""The table every command works on: one row per caption."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl

#: Column names of CaptionSet.table, in order.
COLUMNS = ("caption_id", "group_id", "split", "text")


@dataclass(frozen=True)
class Skipped:
    """Rows left out while loading, with why and where (e.g. 'line 12', 'id 000123')."""

    reason: str
    count: int
    examples: tuple[str, ...] = ()


@dataclass
class CaptionSet:
    """Captions of one dataset.

    ``table`` has the columns ``caption_id`` (unique str), ``group_id`` (str: the
    image a caption describes; captions of one image share it), ``split`` (str or
    null) and ``text`` (str). Captions of one group are positives of each other,
    never negatives.
    """

    table: pl.DataFrame
    source: Path
    format: str
    skipped: list[Skipped] = field(default_factory=list)
    #: how the source was read, where its format alone does not say ("Hugging Face parquet, 4 shards,
    #: split train", "polars DataFrame"); None for one file or folder of a format
    layout: str | None = None
    #: the files read, when ``source`` names several (a glob or brace pattern): what the fingerprint covers
    files: tuple[Path, ...] = ()

    def __len__(self) -> int:
        return self.table.height

    @property
    def texts(self) -> list[str]:
        return self.table["text"].to_list()

    @property
    def ids(self) -> list[str]:
        return self.table["caption_id"].to_list()

    @property
    def groups(self) -> list[str]:
        return self.table["group_id"].to_list()

    @cached_property
    def group_codes(self) -> np.ndarray:
        """Integer group label per caption (0..n_groups-1), in first-seen order."""
        groups = self.table["group_id"].to_numpy()
        _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
        # renumber so codes follow first appearance, which keeps output stable
        order = np.argsort(np.argsort(first))
        return order[inverse].astype(np.int64)

    @cached_property
    def n_groups(self) -> int:
        # asked several times per profile; counting a million group names takes a tenth of a second
        return int(self.table["group_id"].n_unique())

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
            digest.update(str(path.relative_to(root) if root is not None else path.name).encode())
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
