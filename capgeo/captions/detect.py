"""Which format a dataset path is in: from its extension, then from its first record's keys."""

from __future__ import annotations

from pathlib import PurePosixPath

from capgeo.captions.benchmarks import CAPTION_FILE_SUFFIXES, DOCCI_ID, visible_files
from capgeo.captions.content import DatasetContent
from capgeo.captions.compressed import inner_suffix
from capgeo.captions.shards import SHARD_FORMATS, is_saved_dataset, shard_files, shards_format
from capgeo.captions.sources import first_json_line, json_kind
from capgeo.errors import DataError

JSON_LINES_SUFFIXES = (".jsonl", ".jsonlines", ".ndjson")
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet",
                  ".txt": "text", ".text": "text", ".arrow": "arrow"}

#: benchmark formats -> the generic format of the same file, used when the user names columns
GENERIC_OF = {"docci": "jsonl", "sharegpt4v": "json", "coco": "json", "karpathy": "json", "coco-list": "json",
              "docci-json": "json", "dci-json": "json", "filename-caption": "json"}


def detect_format(content: DatasetContent, *, generic: bool = False) -> str:
    """The format name of ``content``; with ``generic`` the container format (jsonl, json, ...) of a benchmark file."""
    path = content.path
    if path.is_dir():
        found = _detect_folder(content)
        if generic and found not in SHARD_FORMATS.values():
            raise DataError(f"{path}: column options apply to a file or a folder of shards, not a {found} folder")
        return found
    suffix = content.suffix
    if suffix in SUFFIX_FORMATS:
        return SUFFIX_FORMATS[suffix]
    if suffix in JSON_LINES_SUFFIXES:
        found = _detect_json_lines(content)
    elif suffix == ".json":
        found = _detect_json(content)
    else:
        found = _detect_unknown(content)
    if generic and found in GENERIC_OF:
        return "jsonl" if suffix in JSON_LINES_SUFFIXES else GENERIC_OF[found]
    return found




def _detect_folder(content: DatasetContent) -> str:
    folder = content.path
    if (folder / "caption").is_dir():
        return "urban1k"
    if (folder / "complete").is_dir():
        return "dci"
    if is_saved_dataset(folder):  # its state.json made a folder of .json files, read as DCI
        return "arrow"
    # caption files only (hidden files and others, such as a README or images, do not decide); a
    # folder of .txt files beside, say, a .jsonl is not an Urban-1K folder (its .jsonl would be
    # silently ignored), so it must be told with --format
    files = visible_files(folder)
    # a compressed file counts as its inner format (a .jsonl.gz beside a README.txt is not Urban-1K; a
    # folder of N.txt.gz is)
    suffixes = {inner_suffix(path) for path in files} & CAPTION_FILE_SUFFIXES
    if suffixes == {".txt"}:
        return "urban1k"
    if suffixes == {".json"}:
        _check_dci_like(folder, sorted(path for path in files if inner_suffix(path) == ".json"))
        return "dci"
    # shards of one table (also in subfolders: the hub's data/train-00000-of-00004.parquet), unless
    # caption files of another kind sit beside them
    shards = shard_files(folder)
    if shards and not suffixes - set(SHARD_FORMATS):
        return shards_format(shards, folder)
    found = ", ".join(sorted(path.name for path in folder.iterdir())[:10]) or "nothing"
    raise DataError(
        f"{folder}: cannot tell the folder's format (found: {found}); expected an Urban-1K folder of N.txt, "
        "a DCI folder of <image>.json, a folder of parquet, JSON-lines, CSV/TSV or Arrow shards, or a datasets "
        "save_to_disk folder; pass --format"
    )


def _check_dci_like(folder, json_files) -> None:
    """A folder of .json files is read as DCI annotations; one that holds another JSON dataset (a
    COCO or Karpathy file saved alone in a folder) is told apart here, where its error said that its
    first file lacked DCI's 'extra_caption'."""
    from capgeo.captions.sources import parse_json, read_text

    first = json_files[0]
    if first.stat().st_size > 64 << 20:  # DCI annotations are well under a megabyte each: not one
        data = None
    else:
        try:
            data = parse_json(read_text(first), first)
        except DataError:
            return  # the DCI reader names the broken file
    # a list (COCO list, ShareGPT4V, ...) or a whole-dataset object (COCO, Karpathy) is a dataset file; an
    # object without 'extra_caption' is left to the DCI reader, which names what the annotation lacks
    if data is None or not isinstance(data, dict) or {"images", "annotations"} & set(data):
        raise DataError(
            f"{folder}: a folder of .json files is read as DCI annotations, but {first.name} is a JSON dataset "
            f"of its own; to read it, pass the file itself ({first}), or pass --format dci")


def _detect_json_lines(content: DatasetContent) -> str:
    first = first_json_line(content.text, content.path)
    if first is None:
        raise DataError(f"{content.path}: the file is empty; expected one JSON object per line")
    if {"example_id", "description"} <= first.keys():
        return "docci"
    if "conversations" in first:
        return "sharegpt4v"
    return "jsonl"


def _detect_json(content: DatasetContent) -> str:
    data = content.json
    if isinstance(data, dict):
        images = data.get("images")
        if isinstance(data.get("annotations"), list) and "images" in data:
            return "coco"  # an 'images' that is not a list is read_coco's error, not a reason to ignore it
        if isinstance(images, list) and images and isinstance(images[0], dict) and "sentences" in images[0]:
            return "karpathy"
        return "json"
    if isinstance(data, list):
        if not data:
            raise DataError(f"{content.path}: the JSON list is empty; no captions to read")
        first = data[0]
        if not isinstance(first, dict):
            return "json"
        if {"image_name", "captions"} <= first.keys():
            return "coco-list"
        if "conversations" in first:
            return "sharegpt4v"
        if {"filename", "caption"} <= first.keys():
            return _filename_caption_kind(data)
        return "json"
    raise DataError(f"{content.path}: expected a JSON list or object of captions; found {json_kind(data)}")


def _filename_caption_kind(records: list) -> str:
    """DOCCI and DCI share the {"filename","caption"} layout; their image names tell them apart."""
    stems = [PurePosixPath(str(record.get("filename", "")).replace("\\", "/")).stem
             for record in records if isinstance(record, dict)]
    if stems and all(DOCCI_ID.match(stem) for stem in stems):
        return "docci-json"
    if stems and all(stem.startswith("sa_") for stem in stems):  # DCI images come from SA-1B: sa_<n>.jpg
        return "dci-json"
    return "filename-caption"


def _detect_unknown(content: DatasetContent) -> str:
    head = content.text.lstrip()[:1]
    if head == "{":
        # one object per line (a one-line file is valid JSON too, so try lines first), unless that one
        # line is a benchmark's JSON document (official COCO files are one line)
        try:
            found = _detect_json_lines(content)
        except DataError:
            found = None
        if found is not None:
            if found == "jsonl" and content.text.strip().count("\n") == 0:
                try:
                    document = _detect_json(content)
                except DataError:
                    document = "json"
                if document in ("coco", "karpathy"):
                    return document
            return found
    if head in ("[", "{"):
        try:
            return _detect_json(content)
        except DataError:
            pass
    raise DataError(
        f"{content.path}: cannot tell the format from the extension {content.suffix or '(none)'!r} or the content; "
        "expected .jsonl, .jsonlines, .json, .csv, .tsv, .parquet, .arrow, .txt or a folder; pass --format"
    )
