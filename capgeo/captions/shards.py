"""Dataset sources that are several files: a folder of shards, a glob, a brace range.

``expand_source`` turns what the user typed into the list of files it names, in
order; every reader of several files (parquet, JSON lines, CSV/TSV and Arrow
shards here, webdataset tar shards elsewhere) takes that list. A pattern reaches
capgeo unexpanded when the user quotes it (``'shards/*.parquet'``,
``'shards/{00000..00099}.tar'``, open_clip's notation).
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from capgeo.errors import DataError

#: file suffixes read as shards of one table, and their format
SHARD_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".jsonlines": "jsonl",
                 ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv", ".arrow": "arrow"}
#: a brace group: a numeric range {000..099} or a list {a,b,c}
_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
#: a Hugging Face hub shard name: <split>-00000-of-00004.parquet
_HF_SHARD = re.compile(r"^(?P<split>[A-Za-z][\w.]*?)-(?P<index>\d{5})-of-(?P<count>\d{5})$")
#: folder names the hub takes as a split in <config>/<split>/NNNN.parquet
HF_SPLIT_NAMES = ("train", "validation", "valid", "val", "dev", "test", "eval", "evaluation")
#: how many missing shards of a brace range are named in the error
MAX_NAMED = 5
#: the most files a brace pattern may name: a million shards of 10,000 captions is ten billion captions
MAX_BRACE_NAMES = 1_000_000


def shard_format(name) -> str | None:
    """The format of a shard named ``name`` (SHARD_FORMATS), also compressed (``part-0.jsonl.gz``:
    jsonl, decompressed as it is read); None for other files."""
    from capgeo.captions.compressed import inner_suffix

    return SHARD_FORMATS.get(inner_suffix(name))


def shard_stem(name: str) -> str:
    """A shard's name without its suffix, nor its compression suffix (``train-00000-of-00002``)."""
    from capgeo.captions.compressed import compression_of

    if compression_of(name):
        name = name.rpartition(".")[0]
    return name.rpartition(".")[0] if "." in name else name


def is_pattern(spec) -> bool:
    """Does ``spec`` hold glob characters or a brace group (and so name several files)?"""
    text = str(spec)
    return bool(_BRACE.search(text)) or any(char in text for char in "*?[")


def expand_braces(pattern: str) -> list[str]:
    """Every name a brace pattern stands for, in order: ``a{00..02}.tar`` is a00.tar, a01.tar,
    a02.tar (the numbers padded to the width written), ``{train,test}.jsonl`` two names. A pattern
    naming more than MAX_BRACE_NAMES files is refused before any name is made."""
    return list(iter_braces(pattern))


def iter_braces(pattern: str) -> Iterator[str]:
    """:func:`expand_braces`, one name at a time (a range is never spelled out whole); the count is
    checked against MAX_BRACE_NAMES at once, before the first name."""
    choices = _brace_choices(pattern)
    count = math.prod(len(choice) for choice in choices)
    if count > MAX_BRACE_NAMES:
        raise DataError(f"{pattern}: the brace pattern names {count:,} files, more than the {MAX_BRACE_NAMES:,} "
                        "capgeo reads as one dataset; check the range's bounds")
    return _joined(choices, "")


def _brace_choices(pattern: str) -> list:
    parts = _BRACE.split(pattern)
    choices: list = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            choices.append([part])
            continue
        match = _RANGE.match(part.strip())
        if match:
            first, last = match.groups()
            width = len(first) if first.lstrip("-").startswith("0") or len(first) == len(last) else 0
            choices.append(_Numbers(int(first), int(last), width))
        elif "," in part:
            choices.append(part.split(","))
        else:
            raise DataError(f"{pattern}: {{{part}}} is neither a range {{00000..00099}} nor a list {{a,b}}")
    return choices


class _Numbers:
    """A brace range's names, made as they are asked for (``{00000000..99999999}`` is 10^8 names)."""

    def __init__(self, start: int, stop: int, width: int):
        step = 1 if stop >= start else -1  # a range that runs down counts down, as braceexpand does
        self.numbers = range(start, stop + step, step)
        self.width = width

    def __len__(self) -> int:
        return len(self.numbers)

    def __iter__(self) -> Iterator[str]:
        return (str(number).zfill(self.width) for number in self.numbers)


def _joined(choices: list, prefix: str) -> Iterator[str]:
    """Every concatenation of one item of each choice, in order (itertools.product would first
    hold each choice whole)."""
    if not choices:
        yield prefix
        return
    for item in choices[0]:
        yield from _joined(choices[1:], prefix + item)


def expand_source(spec) -> list[Path]:
    """The files ``spec`` names, in order: a file is itself; a folder its shard files (see
    :func:`shard_files`); a brace pattern every file it spells, all of which must exist; a glob the
    files it matches, sorted, at least one. Raises DataError naming what is missing."""
    text = str(spec)
    path = Path(text).expanduser()
    if path.exists() or not is_pattern(text):
        if not path.exists():
            raise DataError(f"{path}: no such file or folder")
        return shard_files(path) if path.is_dir() else [path]
    names = iter_braces(str(path)) if _BRACE.search(str(path)) else [str(path)]
    files: list[Path] = []
    missing: list[str] = []  # the first MAX_NAMED, for the message
    n_names = n_missing = 0
    for name in names:
        n_names += 1
        if any(char in name for char in "*?["):
            matched = sorted(Path(found) for found in glob.glob(name, recursive=True) if Path(found).is_file())
            found = bool(matched)
            files += matched
        else:
            found = Path(name).is_file()
            if found:
                files.append(Path(name))
        if not found:
            n_missing += 1
            if len(missing) < MAX_NAMED:
                missing.append(name)
    if missing and not _BRACE.search(text):
        raise DataError(f"{text}: the pattern matches no file (quoted patterns are expanded by capgeo; "
                        "check the folder and the suffix)")
    if missing:
        more = n_missing - len(missing)
        named = ", ".join(missing) + (f" and {more} more" if more else "")
        raise DataError(f"{text}: {n_missing} of the {n_names} shards it names do not exist: {named}")
    return list(dict.fromkeys(files))


def shard_files(folder: Path) -> list[Path]:
    """A folder's shard files (:func:`shard_format`), searched through its subfolders, in path order;
    hidden files and folders (.git, .cache) are left out, and so are unreadable subfolders and links
    to folders, as Path.rglob leaves them (which took a millisecond per shard, in pathlib)."""
    found: list[tuple[tuple[str, ...], str]] = []

    def search(directory: str, parts: tuple[str, ...]) -> None:
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            return
        for entry in listed:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                search(entry.path, (*parts, entry.name))
            elif shard_format(entry.name) is not None and entry.is_file():
                found.append(((*parts, entry.name), entry.path))

    search(str(folder), ())
    return [Path(path) for _, path in sorted(found)]


def shards_format(files: list[Path], source) -> str:
    """The one format all ``files`` share; files of two formats are an error naming one of each."""
    formats: dict[str, Path] = {}
    for path in files:
        found = shard_format(path)
        if found is None:
            raise DataError(f"{path}: a shard of {source} that capgeo cannot read as part of a table; expected "
                            f"{', '.join(sorted(SHARD_FORMATS))} (JSON-lines, CSV and TSV also compressed: "
                            f".gz, .zst, .bz2, .xz)")
        formats.setdefault(found, path)
    if len(formats) > 1:
        named = ", ".join(f"{path.name} ({kind})" for kind, path in formats.items())
        raise DataError(f"{source}: the files are of {len(formats)} formats ({named}); shards of one dataset share "
                        "one format: pass a glob such as 'DIR/*.parquet' to pick them")
    return next(iter(formats))


@dataclass(frozen=True)
class Shard:
    """One file of a multi-file source, with the split its name or folder gives (None if neither)."""

    path: Path
    split: str | None


def hub_shards(files: list[Path], root: Path | None) -> tuple[list[Shard], bool]:
    """Each file with its split, and whether the files follow the Hugging Face hub layout
    (``data/<split>-00000-of-00004.parquet`` or ``<config>/<split>/0000.parquet``)."""
    shards = []
    hub = bool(files)
    for path in files:
        match = _HF_SHARD.match(shard_stem(path.name))
        if match:
            shards.append(Shard(path, match["split"]))
            continue
        parent = path.parent.name
        if root is not None and path.parent != root and parent.lower() in HF_SPLIT_NAMES:
            shards.append(Shard(path, parent))
            continue
        hub = False
        shards.append(Shard(path, None))
    return shards, hub


def configs_of(shards: list[Shard], root: Path) -> dict[str, list[Shard]]:
    """Hub shards grouped by config: the top folder of ``<config>/<split>/...`` ("data" and
    files directly in the root are the default config)."""
    configs: dict[str, list[Shard]] = {}
    for shard in shards:
        parts = shard.path.relative_to(root).parts
        config = parts[0] if len(parts) > 2 or (len(parts) == 2 and parts[0].lower() not in HF_SPLIT_NAMES) else ""
        configs.setdefault("" if config == "data" else config, []).append(shard)
    return configs


def is_saved_dataset(folder: Path) -> bool:
    """Is ``folder`` what `datasets`' save_to_disk writes (a Dataset's state.json, or a
    DatasetDict's dataset_dict.json and one such folder per split)?"""
    return (folder / "dataset_dict.json").is_file() or (
        (folder / "state.json").is_file() and any(folder.glob("*.arrow")))


def saved_dataset_shards(folder: Path) -> list[Shard]:
    """The Arrow files of a save_to_disk folder in the order its state.json lists them, each with
    its split (a DatasetDict's split folder, or the split the Dataset was loaded as)."""
    from capgeo.captions.sources import parse_json, read_text

    if (folder / "dataset_dict.json").is_file():
        listing = parse_json(read_text(folder / "dataset_dict.json"), folder / "dataset_dict.json")
        splits = listing.get("splits") if isinstance(listing, dict) else None
        if not isinstance(splits, list) or not all(isinstance(name, str) for name in splits):
            raise DataError(f"{folder / 'dataset_dict.json'}: expected {{\"splits\": [names]}}, as datasets writes it")
        return [Shard(path, name) for name in splits for path, _ in _state_files_and_split(folder / name)]
    return [Shard(path, split) for path, split in _state_files_and_split(folder)]


def _state_files_and_split(folder: Path) -> list[tuple[Path, str | None]]:
    from capgeo.captions.sources import parse_json, read_text

    state_path = folder / "state.json"
    if not state_path.is_file():
        raise DataError(f"{folder}: no state.json; expected a folder written by datasets' save_to_disk")
    state = parse_json(read_text(state_path), state_path)
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(entries, list) or not entries or \
            not all(isinstance(entry, dict) and isinstance(entry.get("filename"), str) for entry in entries):
        raise DataError(f"{state_path}: expected '_data_files': [{{\"filename\": ...}}], as datasets writes it")
    split = state.get("_split") if isinstance(state.get("_split"), str) else None
    files = []
    for entry in entries:
        path = folder / entry["filename"]
        if not path.is_file():
            raise DataError(f"{state_path}: lists {entry['filename']}, which is not in {folder}")
        files.append((path, split))
    return files
