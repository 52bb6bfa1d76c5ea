"""A dataset path whose text and JSON are read at most once (detection and readers share them)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from capgeo.captions.compressed import inner_suffix
from capgeo.captions.sources import parse_json, read_text, read_text_head


class DatasetContent:
    """``lines``: read only the file's first that many lines (``--limit`` on a line-based file);
    ``complete`` then says whether they are the whole file. ``quoted``: the file is CSV, whose
    quoted cells may hold line ends."""

    def __init__(self, path: Path, lines: int | None = None, quoted: bool = False):
        self.path = path
        self.lines = lines
        self.quoted = quoted
        self.complete = True

    @cached_property
    def text(self) -> str:
        if self.lines is None:
            return read_text(self.path)
        text, self.complete = read_text_head(self.path, self.lines, quoted=self.quoted)
        return text

    @cached_property
    def json(self):
        return parse_json(self.text, self.path)

    @property
    def suffix(self) -> str:
        """The suffix that says the format: a compressed file's inner one (``.jsonl`` of ``x.jsonl.gz``)."""
        return inner_suffix(self.path)
