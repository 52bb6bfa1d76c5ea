"""load_captions: the one entry point every command uses to read a dataset."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TypedDict, Unpack

from capgeo.captions import benchmarks, webdataset
from capgeo.captions.clean import GENERIC_FORMATS, RawCaptions, to_caption_set
from capgeo.captions.content import DatasetContent
from capgeo.captions.compressed import inner_suffix
from capgeo.captions.detect import JSON_LINES_SUFFIXES, detect_format
from capgeo.captions.model import CaptionSet
from capgeo.captions.multi import arrow_kind, frames_table, text_shards_table
from capgeo.captions.shards import (
    SHARD_FORMATS,
    Shard,
    configs_of,
    expand_source,
    hub_shards,
    is_pattern,
    is_saved_dataset,
    saved_dataset_shards,
    shard_files,
    shard_format,
    shards_format,
)
from capgeo.captions.tabular import ColumnChoice, captions_from_table, read_generic
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
#: files read line by line, of which --limit reads only the first lines; and the formats read so
LINE_SUFFIXES = (".txt", ".text", ".csv", ".tsv", ".tab", *JSON_LINES_SUFFIXES)
LINE_FORMATS = ("text", "jsonl", "csv", "tsv")


class LoadOptions(TypedDict, total=False):
    """How :func:`load_captions` reads a dataset: its keyword arguments (defaults: LOAD_DEFAULTS)."""

    format: str
    text_column: str | None
    captions_column: str | None
    id_column: str | None
    group_column: str | None
    split: str | None
    limit: int | None
    image_column: str | None
    images: str | os.PathLike | None


#: each reading option's default: the format detected, every column found by its usual names, no limit
LOAD_DEFAULTS: LoadOptions = {"format": "auto", **{name: None for name in LoadOptions.__annotations__
                                                   if name != "format"}}


def with_load_defaults(options: dict) -> LoadOptions:
    """``options`` with each reading option not given at its default; an unknown one is the TypeError
    Python gives for an unknown keyword argument of :func:`load_captions`."""
    unknown = [name for name in options if name not in LOAD_DEFAULTS]
    if unknown:
        raise TypeError(f"load_captions() got an unexpected keyword argument {unknown[0]!r}")
    return {**LOAD_DEFAULTS, **options}


def load_captions(path, **options: Unpack[LoadOptions]) -> CaptionSet:
    """Read the captions of a dataset file, folder, glob or brace pattern, or of data in memory.

    ``path`` is a file or folder; a pattern naming several files (``'shards/*.parquet'``,
    ``'shards/{00000..00099}.parquet'``); or, from Python, a polars or pandas DataFrame, a pyarrow
    Table, a ``datasets.Dataset``, a list of captions or a list of dicts. ``options``: the
    :class:`LoadOptions` keywords.
    ``format`` is one of capgeo.cli.options.FORMATS ('auto' detects it). The
    column options apply to generic files (with 'auto', naming a column reads a
    benchmark file as its generic container, e.g. DOCCI jsonlines as jsonl).
    ``image_column`` names the column that locates each caption's image (a path or an ``Image``
    feature), ``images`` the folder the images are in where not beside the captions; what is
    recorded is only where the images are (CaptionSet.image_source): none is read here.
    Raises DataError, naming the file and what was expected, on anything unreadable.
    See docs/formats.md for what is taken from each format.
    """
    read = with_load_defaults(options)
    images = read["images"]
    columns = ColumnChoice(read["text_column"], read["captions_column"], read["id_column"], read["group_column"],
                           read["image_column"])
    captions = _load(path, read["format"], columns, read["split"], read["limit"])
    if images is not None:
        from capgeo.images.sources import NamedFiles

        root = Path(images).expanduser()
        if not root.is_dir():
            raise DataError(f"--images {images}: {'not a folder' if root.exists() else 'no such folder'}; "
                            "expected the folder holding the dataset's images")
        source = captions.image_source
        captions.image_source = source.with_root(root) if source is not None else NamedFiles(root, root)
    return captions


def _load(path, format: str, columns: ColumnChoice, split, limit) -> CaptionSet:
    if limit is not None and limit < 1:
        raise DataError(f"--limit must be at least 1, got {limit}")
    if not isinstance(path, (str, os.PathLike)):
        from capgeo.captions.memory import read_memory

        raw = read_memory(path, columns)
        if raw.image_columns is not None:  # an image column of data in memory: read from it when asked for
            from capgeo.images.sources import ColumnImages

            raw.images = ColumnImages(*raw.image_columns, memory=path)
        return to_caption_set(raw, split=split, limit=limit)
    spec = path
    path = Path(path)
    shards = webdataset.find_shards(spec, format)
    if shards is not None:
        def read_tars(rows: int | None) -> tuple[RawCaptions, bool]:
            raw = webdataset.read_webdataset(shards, columns, path, rows=rows)  # (its image members recorded)
            return raw, rows is None or len(raw.texts) < rows

        return _limited(read_tars, split=split, limit=limit)
    if not path.exists():
        if not is_pattern(spec):
            raise DataError(f"{path}: no such file or folder")
        files = expand_source(spec)
        found = shards_format(files, spec)
        if format not in ("auto", found):
            raise DataError(f"{spec}: --format {format} given, but the pattern names {found} files")
        shards, hub = hub_shards(files, None)
        layout = f"Hugging Face {found}, {{n}} shard{{s}}" if hub else f"{{n}} {found} file{{s}} matching a pattern"
        return _load_shards(shards if hub else [Shard(file, None) for file in files], found, columns, source=path,
                            split=split, limit=limit, layout=layout, files=tuple(files))
    path = _unwrap_single_folder(path)
    # --limit on a line-based file reads only its first lines (a compressed one as a stream)
    suffix = inner_suffix(path)
    streamed = limit is not None and suffix in LINE_SUFFIXES and path.is_file()
    csv = format == "csv" or (format == "auto" and suffix == ".csv")  # as detection will find it
    content = DatasetContent(path, lines=limit + 1 if streamed else None, quoted=csv)
    if format == "auto":
        format = detect_format(content, generic=bool(columns.given()))
    elif format in BENCHMARK_READERS and columns.given():
        raise DataError(
            f"{', '.join(columns.given())} apply to generic formats ({', '.join(GENERIC_FORMATS)}); "
            f"the {format} layout has fixed fields"
        )
    if path.is_dir() and format in set(SHARD_FORMATS.values()):
        return _load_folder(path, format, columns, split=split, limit=limit)
    if path.is_dir() != (format in FOLDER_FORMATS):
        expected = "a folder" if format in FOLDER_FORMATS else "a file"
        raise DataError(f"{path}: --format {format} reads {expected}, but this is {'a folder' if path.is_dir() else 'a file'}")
    if format in ("parquet", "arrow"):  # read lazily, only the columns needed
        return _load_shards([Shard(path, None)], format, columns, source=path, split=split, limit=limit,
                            layout=f"Arrow IPC {arrow_kind(path)}" if format == "arrow" else None)
    if format not in BENCHMARK_READERS and format not in GENERIC_FORMATS:
        raise DataError(f"unknown format {format!r}; expected one of {', '.join(list(BENCHMARK_READERS) + list(GENERIC_FORMATS))}")
    if streamed and format in LINE_FORMATS:
        def read_head(rows: int) -> tuple[RawCaptions, bool]:
            head = content if rows == limit else DatasetContent(path, lines=rows + 1, quoted=format == "csv")
            raw = read_generic(head, format, columns)
            _add_image_files(raw, [path], format, path)
            return raw, head.complete

        return _limited(read_head, split=split, limit=limit)
    if streamed:  # detected from the first lines as a format read whole (DOCCI, ShareGPT4V)
        content = DatasetContent(path)
    if format in BENCHMARK_READERS:
        raw = BENCHMARK_READERS[format](content)
        raw.images = _named_files(raw.source)
    else:
        raw = read_generic(content, format, columns)
        _add_image_files(raw, [path], format, path)
    return to_caption_set(raw, split=split, limit=limit)


def _load_folder(folder: Path, format: str, columns: ColumnChoice, *, split, limit) -> CaptionSet:
    """A folder of shards of one format: a save_to_disk folder, the Hugging Face hub layout, or any
    folder of parquet, JSON-lines, CSV/TSV or Arrow files (searched through its subfolders)."""
    if format == "arrow" and is_saved_dataset(folder):
        shards = saved_dataset_shards(folder)
        kind = "datasets save_to_disk folder, {n} Arrow file{s}"
    else:
        files = [file for file in shard_files(folder) if shard_format(file) == format]
        if not files:
            raise DataError(f"{folder}: --format {format} given, but the folder holds no {format} files "
                            f"(looked for {', '.join(s for s, f in SHARD_FORMATS.items() if f == format)})")
        shards, hub = hub_shards(files, folder)
        if hub:
            configs = configs_of(shards, folder)
            if len(configs) > 1:
                named = ", ".join(name or "data" for name in configs)
                raise DataError(f"{folder}: a Hugging Face dataset of {len(configs)} configs ({named}); pass the "
                                f"folder of one, e.g. {folder / (next(iter(configs)) or 'data')}")
            kind = f"Hugging Face {format}, {{n}} shard{{s}}"
        else:
            shards = [Shard(shard.path, None) for shard in shards]
            kind = f"folder of {{n}} {format} shard{{s}}"
    return _load_shards(shards, format, columns, source=folder, split=split, limit=limit, layout=kind)


def _load_shards(shards: list[Shard], format: str, columns: ColumnChoice, *, source: Path, split, limit,
                 layout: str | None, files: tuple[Path, ...] = ()) -> CaptionSet:
    """Shards read as one table; a split given by the shards' names picks its shards before any is read."""
    named_splits = [shard.split for shard in shards if shard.split is not None]
    if split is not None and named_splits:
        chosen = [shard for shard in shards if shard.split == split]
        if not chosen:
            counts = Counter(named_splits)
            present = ", ".join(f"{name} ({count} shard{'s' if count > 1 else ''})" for name, count in counts.items())
            raise DataError(f"{source}: no shards of split {split!r}; splits present: {present}")
        shards = chosen
    layout = _layout(layout, shards)

    def read(rows: int | None) -> tuple[RawCaptions, bool]:
        """The first ``rows`` rows (all when None), and whether that is all there are."""
        if format in ("parquet", "arrow"):
            table = frames_table([shard.path for shard in shards], format, source,
                                 splits=[shard.split for shard in shards], rows=rows, layout=layout)
            complete = rows is None or table.height < rows
        else:
            table, complete = text_shards_table(shards, format, columns, source, rows=rows, layout=layout)
        raw = captions_from_table(table, source, format, columns)
        raw.files = files
        _add_image_files(raw, [shard.path for shard in shards], format, source)
        return raw, complete

    return _limited(read, split=split, limit=limit)


def _limited(read, *, split, limit) -> CaptionSet:
    """The caption set of ``read(rows)`` -> (the first ``rows`` rows (all when None), whether that is
    all there are). ``--limit`` reads only as many rows as it needs: the first ``limit`` rows, more
    while skipped rows or a split filter leave too few."""
    if limit is None:
        return to_caption_set(read(None)[0], split=split)
    rows = limit
    while True:
        raw, complete = read(rows)
        try:
            captions = to_caption_set(raw, split=split, limit=limit)
        except DataError:
            if complete:
                raise
            captions = None
        if complete or (captions is not None and len(captions) >= limit):
            return captions
        rows *= 4


def _named_files(source: Path):
    """Benchmark layouts name each image by its file (or its file's stem): found beside the captions."""
    from capgeo.images.sources import NamedFiles

    return NamedFiles(Path(source))


def _add_image_files(raw: RawCaptions, files: list[Path], format: str, source: Path) -> None:
    """The files an image column is read from again, when the images are asked for."""
    if raw.image_columns is not None:
        from capgeo.images.sources import ColumnImages

        raw.images = ColumnImages(*raw.image_columns, files=tuple(files), format=format, base=Path(source))


def _layout(template: str | None, shards: list[Shard]) -> str | None:
    """A layout template ("Hugging Face parquet, {n} shards") with its count and the splits read;
    None (one file of its format) stays None."""
    if template is None:
        return None
    count = len(shards)
    text = template.format(n=count, s="s" if count != 1 else "")
    splits = list(dict.fromkeys(shard.split for shard in shards if shard.split is not None))
    if splits:
        text += f", split{'s' if len(splits) > 1 else ''} {', '.join(splits)}"
    return text


def _unwrap_single_folder(path: Path) -> Path:
    """A folder holding nothing but one folder (an archive unpacked into a folder of its
    own name, e.g. urban1k/Urban1k/caption) stands for that inner folder."""
    while path.is_dir():
        entries = [entry for entry in path.iterdir() if not entry.name.startswith(".")]
        if len(entries) != 1 or not entries[0].is_dir():
            break
        path = entries[0]
    return path
