"""Where each image of a CaptionSet is: the references the loaders record, found per group.

A loader records, at no cost to the caption-only paths, *how* its images can be found
(an :class:`ImageSource` on ``CaptionSet.image_source``); nothing about the images is read
until something asks for them. :func:`locate` then turns the dataset's groups into one
reference per group:

- :class:`FileRef`: an image file (benchmark layouts, path columns, ``Image`` paths);
- :class:`ColumnRef`: row ``row`` of a Parquet or Arrow shard's ``Image`` column (its bytes
  stay in the file until read, shard by shard);
- :class:`MemberRef`: a member of a webdataset tar shard (offset and size for plain tars);
- :class:`BytesRef`: bytes already in memory (an ``Image`` column of a DataFrame or Dataset);
- None: the image is named nowhere, or named but not found (``missing`` says which).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

#: image file suffixes looked for beside the captions
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
#: webdataset member extensions that hold the sample's image, in order of preference
IMAGE_MEMBERS = ("jpg", "jpeg", "png", "webp")
#: folders tried under a root before the root is searched whole (COCO's val2017 is found by the search)
IMAGE_FOLDERS = ("", "images", "image", "photos", "imgs", "img")
#: caption folders whose images sit beside them (Urban-1K's caption/, DCI's complete/, COCO's annotations/)
CAPTION_FOLDERS = frozenset({"caption", "captions", "complete", "annotations", "annotation"})
#: how deep, and over how many files, a root is searched for images named by file name
SEARCH_DEPTH = 4
SEARCH_FILES = 2_000_000


@dataclass(frozen=True)
class FileRef:
    path: Path


@dataclass(frozen=True)
class ColumnRef:
    file: Path
    format: str  # "parquet" or "arrow"
    column: str
    row: int


@dataclass(frozen=True)
class MemberRef:
    shard: Path
    name: str
    offset: int = -1  # of the member's data in an uncompressed tar; -1: read by name
    size: int = -1


@dataclass(frozen=True)
class BytesRef:
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Located:
    """One reference per group (row g for group code g), and the groups whose image is named
    but was not found, with what named it."""

    refs: list
    missing: dict[int, str]
    #: what was searched: the root folders (for the warning that names missing images)
    searched: tuple[str, ...] = ()


@dataclass(frozen=True)
class NamedFiles:
    """Groups named by an image file: its path, name or stem under ``base`` (the dataset's folder)."""

    base: Path
    root: Path | None = None

    def with_root(self, root) -> "NamedFiles":
        return replace(self, root=Path(root))

    def locate(self, group_ids: list[str]) -> Located:
        finder = FileFinder(self.roots())
        refs, missing = [], {}
        for code, group in enumerate(group_ids):
            found = finder.find(group)
            refs.append(FileRef(found) if found is not None else None)
            if found is None:
                missing[code] = group
        return Located(refs, missing, tuple(map(str, finder.roots)))

    def roots(self) -> list[Path]:
        if self.root is not None:
            return [self.root]
        base = self.base if self.base.is_dir() else self.base.parent
        roots = [base]
        if base.name.lower() in CAPTION_FOLDERS or not _has_images(base):
            roots.append(base.parent)
        return roots


@dataclass(frozen=True)
class ColumnImages:
    """Groups whose image a column names: an ``Image`` feature ({bytes, path}) or a path.

    ``files``: the Parquet, Arrow, JSON-lines or CSV files the column is read from again (one at
    a time) when the images are asked for; ``memory``: the in-memory table instead."""

    group_column: str
    image_column: str
    files: tuple[Path, ...] = ()
    format: str = ""
    base: Path | None = None
    root: Path | None = None
    memory: object = field(default=None, repr=False, compare=False)

    def with_root(self, root) -> "ColumnImages":
        return replace(self, root=Path(root))

    def locate(self, group_ids: list[str]) -> Located:
        refs: list = [None] * len(group_ids)
        missing: dict[int, str] = {}
        finder = self.finder()
        for code, file, row, image in self.rows_of(group_ids):
            if refs[code] is not None:
                continue
            ref, name = self._reference(image, file, row, finder)
            if ref is None:
                if name is not None:
                    missing.setdefault(code, name)
                continue
            refs[code] = ref
            missing.pop(code, None)
        for code, ref in enumerate(refs):
            if ref is None and code not in missing:
                missing[code] = group_ids[code]
        return Located(refs, missing, tuple(map(str, finder.roots)))

    def rows_of(self, group_ids: list[str]):
        """(group code, file, row, image value) of every row of a group in ``group_ids``, in reading
        order; an Image value as {"path", "bytes"}, its bytes only marked (``b"\x01"``) where in a file."""
        from capgeo.captions.clean import key_text
        from capgeo.captions.images import image_key

        code_of = {group: code for code, group in enumerate(group_ids)}
        for file, groups, images in self._rows():
            for row, (group, image) in enumerate(zip(groups, images)):
                group = (image_key(group.get("path"), group.get("bytes"), file, f"row {row + 1}", self.group_column)
                         if isinstance(group, dict) else key_text(group))
                code = code_of.get(group)
                if code is not None:
                    yield code, file, row, image

    def finder(self) -> "FileFinder":
        """What finds the files the column names by path (under --images DIR, else beside the dataset)."""
        return FileFinder(self._roots())

    def _roots(self) -> list[Path]:
        if self.root is not None:
            return [self.root]
        return [] if self.base is None else NamedFiles(self.base).roots()

    def _reference(self, image, file, row: int, finder: "FileFinder"):
        """(reference, name of the image where it is named but not found)."""
        if isinstance(image, dict):
            path, data = image.get("path"), image.get("bytes")
            if data:
                if self.memory is not None or file is None:
                    return BytesRef(bytes(data)), None
                return ColumnRef(file, self.format, self.image_column, row), None
            image = path
        if isinstance(image, (bytes, bytearray)) and image:
            return BytesRef(bytes(image)), None
        if not isinstance(image, str) or not image.strip():
            return None, None
        found = finder.find(image)
        return (FileRef(found), None) if found is not None else (None, image)

    def _rows(self):
        """(file, group values, image values) per file; image values as Python objects, one file's
        column at a time (an Image column's bytes are read here only to be dropped again)."""
        names = list(dict.fromkeys([self.group_column, self.image_column]))
        if self.memory is not None:
            yield None, *_memory_columns(self.memory, names, self.group_column, self.image_column)
            return
        for file in self.files:
            if self.format in ("parquet", "arrow"):
                yield file, *_frame_columns(file, self.format, names, self.group_column, self.image_column)
            else:
                yield file, *_text_columns(file, self.format, self.group_column, self.image_column)


def _frame_columns(file: Path, format: str, names: list[str], group_column: str, image_column: str):
    from capgeo.captions.images import image_keys_of_frame, is_image_dtype
    from capgeo.captions.multi import _read

    frame = _read(file, format, names, None)
    if is_image_dtype(frame.schema[group_column]):  # the groups as the loader named them
        groups = image_keys_of_frame(frame, group_column, file, lambda row: f"row {row + 1}").to_list()
    else:
        groups = frame[group_column].to_list()
    return groups, _column_values(frame[image_column])


def _column_values(series) -> list:
    import polars as pl

    if isinstance(series.dtype, pl.Struct) and {f.name for f in series.dtype.fields} == {"bytes", "path"}:
        # bytes are kept only as whether the row has them: ColumnRef reads them again, shard by shard
        paths = series.struct.field("path").to_list()
        has = series.struct.field("bytes").is_not_null().to_list()
        return [{"path": path, "bytes": b"\x01" if held else None} for path, held in zip(paths, has)]
    return series.to_list()


def _memory_columns(data, names, group_column, image_column):
    """The two columns of data in memory (what capgeo.captions.memory reads) as Python lists."""
    module = type(data).__module__.split(".")[0]
    if module == "datasets":
        data = data.with_format("arrow")[:]  # an Image column stays {bytes, path}, never decoded
        module = "pyarrow"
    if module == "polars" and hasattr(data, "explain"):
        data = data.collect()
    if module == "pyarrow":
        return data.column(group_column).to_pylist(), data.column(image_column).to_pylist()
    if module in ("polars", "pandas"):
        return list(data[group_column]), list(data[image_column])
    if isinstance(data, (list, tuple)):
        records = [record if isinstance(record, dict) else {} for record in data]
        return [record.get(group_column) for record in records], [record.get(image_column) for record in records]
    return [], []


def _text_columns(file: Path, format: str, group_column: str, image_column: str):
    from capgeo.captions.content import DatasetContent
    from capgeo.captions.tabular import ColumnChoice, _json_table, csv_table, jsonl_table

    reader = {"jsonl": jsonl_table, "json": _json_table, "csv": csv_table, "tsv": csv_table}[format]
    table = reader(DatasetContent(file), ColumnChoice(), format)
    if group_column not in table.columns or image_column not in table.columns:
        return [], []
    return list(table.get(group_column)), list(table.get(image_column))


@dataclass(frozen=True)
class ShardImages:
    """webdataset samples' image members, by group (and by caption id, for samples without one)."""

    members: dict = field(repr=False)
    root: Path | None = None

    def with_root(self, root) -> "ShardImages":
        return replace(self, root=Path(root))

    def locate(self, group_ids: list[str]) -> Located:
        refs = [self.members.get(group) for group in group_ids]
        missing = {code: group for code, ref in enumerate(refs) if ref is None}
        return Located(refs, missing)


class FileFinder:
    """Image files by what names them: a path under a root, else a file name, else a stem
    (``test_00001`` for ``test_00001.jpg``), else a number (``397133`` for ``000000397133.jpg``).
    The roots are searched whole (a few levels deep) only when a direct look fails."""

    def __init__(self, roots: list[Path]):
        self.roots = [Path(root).expanduser() for root in roots]
        self._index: dict[str, Path | None] | None = None

    def find(self, name) -> Path | None:
        text = str(name).strip().replace("\\", "/")
        if not text:
            return None
        given = Path(text).expanduser()
        if given.is_absolute():
            return given if given.is_file() else self._search(PurePosixPath(text))
        relative = PurePosixPath(text)
        for root in self.roots:
            for folder in IMAGE_FOLDERS:
                base = root / folder / relative
                if base.is_file():
                    return base
                if relative.suffix.lower() not in IMAGE_SUFFIXES:
                    for suffix in IMAGE_SUFFIXES:
                        candidate = base.with_name(base.name + suffix)
                        if candidate.is_file():
                            return candidate
        return self._search(relative)

    def _search(self, relative: PurePosixPath) -> Path | None:
        index = self._built()
        keys = [relative.name.lower(), "stem:" + relative.stem.lower() if relative.suffix.lower() in IMAGE_SUFFIXES
                else "stem:" + relative.name.lower()]
        stem = relative.stem if relative.suffix.lower() in IMAGE_SUFFIXES else relative.name
        if stem.isdecimal():
            keys.append(f"number:{int(stem)}")
        for key in keys:
            found = index.get(key)
            if found is not None:
                return found
        return None

    def _built(self) -> dict:
        """name, stem: and number: keys of every image file under the roots; a key that two files
        share names neither (None)."""
        if self._index is not None:
            return self._index
        index: dict[str, Path | None] = {}
        seen = 0
        for root in self.roots:
            for folder, _, files in _walk(root, SEARCH_DEPTH):
                for name in files:
                    path = PurePosixPath(name)
                    if path.suffix.lower() not in IMAGE_SUFFIXES or name.startswith("."):
                        continue
                    seen += 1
                    full = Path(folder) / name
                    keys = [name.lower(), "stem:" + path.stem.lower()]
                    if path.stem.isdecimal():
                        keys.append(f"number:{int(path.stem)}")
                    for key in keys:
                        index[key] = full if key not in index else (index[key] if index[key] == full else None)
                if seen > SEARCH_FILES:
                    break
        self._index = index
        return index


def _walk(root: Path, depth: int):
    root_depth = str(root).rstrip(os.sep).count(os.sep)
    for folder, folders, files in os.walk(root):
        if folder.count(os.sep) - root_depth >= depth:
            folders[:] = []
        folders[:] = [name for name in folders if not name.startswith(".")]
        yield folder, folders, files


def _has_images(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(PurePosixPath(entry.name).suffix.lower() in IMAGE_SUFFIXES or
                       (entry.is_dir() and entry.name.lower() in IMAGE_FOLDERS) for entry in entries)
    except OSError:
        return False


def locate(captions, images_root=None) -> Located | None:
    """Each group's image reference (row g for group code g); None when the dataset names no images.
    ``images_root`` (``--images DIR``) replaces the folder the loader would search."""
    source = getattr(captions, "image_source", None)
    if source is None:
        if images_root is None:
            return None
        # captions that name their images by file, with the images elsewhere
        source = NamedFiles(Path(images_root))
    if images_root is not None:
        source = source.with_root(images_root)
    return source.locate(captions.group_names)


