"""load_captions: the one entry point every command uses to read a dataset."""

from __future__ import annotations

from pathlib import Path

from capgeo.captions import benchmarks, webdataset
from capgeo.captions.clean import GENERIC_FORMATS, to_caption_set
from capgeo.captions.content import DatasetContent
from capgeo.captions.detect import detect_format
from capgeo.captions.model import CaptionSet
from capgeo.captions.tabular import ColumnChoice, read_generic
from capgeo.errors import DataError

BENCHMARK_READERS = {
    "docci": benchmarks.read_docci,
    "docci-json": benchmarks.read_docci_json,
    "urban1k": benchmarks.read_urban1k,
    "coco": benchmarks.read_coco,
    "karpathy": benchmarks.read_karpathy,
    "coco-list": benchmarks.read_coco_list,
    "dci": benchmarks.read_dci,
    "dci-json": benchmarks.read_dci_json,
    "filename-caption": benchmarks.read_filename_caption,
    "sharegpt4v": benchmarks.read_sharegpt4v,
}
FOLDER_FORMATS = ("urban1k", "dci")


def load_captions(
    path,
    *,
    format: str = "auto",
    text_column: str | None = None,
    captions_column: str | None = None,
    id_column: str | None = None,
    group_column: str | None = None,
    split: str | None = None,
    limit: int | None = None,
) -> CaptionSet:
    """Read the captions of a dataset file or folder.

    ``format`` is one of capgeo.cli.options.FORMATS ('auto' detects it). The
    column options apply to generic files (with 'auto', naming a column reads a
    benchmark file as its generic container, e.g. DOCCI jsonlines as jsonl).
    Raises DataError, naming the file and what was expected, on anything unreadable.
    See docs/formats.md for what is taken from each format.
    """
    path = Path(path)
    if not path.exists() and not webdataset.is_pattern(path):
        raise DataError(f"{path}: no such file or folder")
    if limit is not None and limit < 1:
        raise DataError(f"--limit must be at least 1, got {limit}")
    columns = ColumnChoice(text_column, captions_column, id_column, group_column)
    shards = webdataset.find_shards(path, format)
    if shards is not None:
        return to_caption_set(webdataset.read_webdataset(shards, columns, path), split=split, limit=limit)
    path = _unwrap_single_folder(path)
    content = DatasetContent(path)
    if format == "auto":
        format = detect_format(content, generic=bool(columns.given()))
    elif format in BENCHMARK_READERS and columns.given():
        raise DataError(
            f"{', '.join(columns.given())} apply to generic formats ({', '.join(GENERIC_FORMATS)}); "
            f"the {format} layout has fixed fields"
        )
    if path.is_dir() != (format in FOLDER_FORMATS):
        expected = "a folder" if format in FOLDER_FORMATS else "a file"
        raise DataError(f"{path}: --format {format} reads {expected}, but this is {'a folder' if path.is_dir() else 'a file'}")
    if format in BENCHMARK_READERS:
        raw = BENCHMARK_READERS[format](content)
    elif format in GENERIC_FORMATS:
        raw = read_generic(content, format, columns)
    else:
        raise DataError(f"unknown format {format!r}; expected one of {', '.join(list(BENCHMARK_READERS) + list(GENERIC_FORMATS))}")
    return to_caption_set(raw, split=split, limit=limit)


def _unwrap_single_folder(path: Path) -> Path:
    """A folder holding nothing but one folder (an archive unpacked into a folder of its
    own name, e.g. urban1k/Urban1k/caption) stands for that inner folder."""
    while path.is_dir():
        entries = [entry for entry in path.iterdir() if not entry.name.startswith(".")]
        if len(entries) != 1 or not entries[0].is_dir():
            break
        path = entries[0]
    return path
