"""A dataset path whose text and JSON are read at most once (detection and readers share them)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from capgeo.captions.compressed import inner_suffix
from capgeo.captions.sources import parse_json, read_text


class DatasetContent:
    def __init__(self, path: Path):
        self.path = path

    @cached_property
    def text(self) -> str:
        return read_text(self.path)

    @cached_property
    def json(self):
        return parse_json(self.text, self.path)

    @property
    def suffix(self) -> str:
        """The suffix that says the format: a compressed file's inner one (``.jsonl`` of ``x.jsonl.gz``)."""
        return inner_suffix(self.path)
