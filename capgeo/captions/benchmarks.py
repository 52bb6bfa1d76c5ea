"""Readers for the published layouts of caption benchmarks.

Each reader takes a DatasetContent and returns RawCaptions; checking and
cleaning happen afterwards, the same for every format (see clean.py).
What each reader takes from its files is documented in docs/formats.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from capgeo.captions.clean import RawCaptions, key_text, row_groups
from capgeo.captions.compressed import inner_name, inner_stem, inner_suffix
from capgeo.captions.content import DatasetContent
from capgeo.captions.sources import iter_json_lines, json_kind, parse_json, read_text
from capgeo.errors import DataError

#: DOCCI example ids carry their split: train_00001, test_00042, qual_dev_00003, qual_test_00099
DOCCI_ID = re.compile(r"^(train|test|qual_dev|qual_test)_\d+$")


def read_docci(content: DatasetContent) -> RawCaptions:
    """Official ``docci_descriptions.jsonlines``: example_id, split, image_file, description."""
    path = content.path
    ids, splits, texts, lines = [], [], [], []
    first_keys: list[str] = []
    for line_number, record in iter_json_lines(content.text, path):
        if "example_id" not in record or "description" not in record:
            raise DataError(
                f"{path}:{line_number}: DOCCI record needs 'example_id' and 'description'; "
                f"found keys: {', '.join(record) or 'none'}"
            )
        first_keys = first_keys or list(record)
        ids.append(record["example_id"])
        splits.append(record.get("split"))
        texts.append(record["description"])
        lines.append(line_number)
    return RawCaptions(
        source=path, format="docci", texts=texts, where=lambda row: f"line {lines[row]}",
        ids=ids, groups=ids, splits=splits if any(value is not None for value in splits) else None,
        fields=first_keys,
    )


def read_filename_caption(content: DatasetContent, format: str = "filename-caption") -> RawCaptions:
    """A JSON list of ``{"filename", "caption"}``: the image's basename without extension is the id and group.

    Used for DOCCI (GOAL / HN-CLIP evaluation copies) and DCI. With format
    'docci-json' the split is read off the DOCCI id (``test_00042`` -> test).
    """
    path = content.path
    records = _list_of_objects(content, "a JSON list of {\"filename\", \"caption\"} objects")
    ids, texts = [], []
    for index, record in enumerate(records):
        if "filename" not in record:
            raise DataError(
                f"{path}: record {index + 1}: expected a 'filename' key; found keys: {', '.join(record) or 'none'}"
            )
        filename = _image_id(record["filename"], path, f"record {index + 1}: 'filename'")  # str() would take a list whole
        ids.append(PurePosixPath(str(filename).replace("\\", "/")).stem if filename not in (None, "") else None)
        texts.append(record.get("caption"))
    splits = None
    if format == "docci-json":
        matches = [DOCCI_ID.match(caption_id or "") for caption_id in ids]
        if any(matches):
            splits = [match.group(1) if match else None for match in matches]
    return RawCaptions(
        source=path, format=format, texts=texts, where=lambda row: f"record {row + 1}",
        ids=ids, groups=ids, splits=splits, fields=list(records[0]) if records else [],
    )


def read_docci_json(content: DatasetContent) -> RawCaptions:
    return read_filename_caption(content, "docci-json")


def read_dci_json(content: DatasetContent) -> RawCaptions:
    return read_filename_caption(content, "dci-json")


def read_urban1k(content: DatasetContent) -> RawCaptions:
    """Urban-1K: a folder of ``N.txt``, one caption per file (or the dataset root holding ``caption/``)."""
    folder = content.path
    if (folder / "caption").is_dir():
        folder = folder / "caption"
    # N.txt, or N.txt.gz (.zst, .bz2, .xz): read_text decompresses by the name, and the id is N
    text_files = [path for path in visible_files(folder) if inner_suffix(path) == ".txt"]
    # captions are N.txt; another text file (a README, notes) is not one, and is said to be left out
    files = [path for path in text_files if inner_stem(path).isdecimal()]
    others = sorted(path.name for path in text_files if not inner_stem(path).isdecimal())
    if not files:
        found = ", ".join(sorted(path.name for path in folder.iterdir())[:10]) or "nothing"
        raise DataError(f"{folder}: expected Urban-1K caption files N.txt; found: {found}")
    # numeric order (1, 2, ..., 10), not string order (1, 10, 100, 2)
    files.sort(key=lambda path: (int(inner_stem(path)), path.name))
    ids = [inner_stem(path) for path in files]
    texts = [read_text(path) for path in files]
    return RawCaptions(
        source=folder, format="urban1k", texts=texts, where=lambda row: f"file {files[row].name}",
        ids=ids, groups=ids, fields=["N.txt"],
        skipped={"a text file not named N.txt": [f"file {name}" for name in others]} if others else {},
    )


#: files a folder dataset could be read from
CAPTION_FILE_SUFFIXES = frozenset({".txt", ".text", ".json", ".jsonl", ".jsonlines", ".ndjson", ".csv", ".tsv", ".parquet"})


def visible_files(folder: Path) -> list[Path]:
    """The folder's files, without hidden ones (.DS_Store, macOS's ._N.txt resource forks).

    A link to a missing file named like a caption file is an error: left out, its caption would
    vanish without a word."""
    files = []
    for path in folder.iterdir():
        if path.name.startswith("."):
            continue
        if path.is_file():
            files.append(path)
        elif path.is_symlink() and not path.exists() and inner_suffix(path) in CAPTION_FILE_SUFFIXES:
            raise DataError(f"{path}: a symbolic link to a missing file ({os.readlink(path)}); "
                            "restore its target or remove the link")
    return files


def read_coco(content: DatasetContent) -> RawCaptions:
    """Official COCO captions: ``images`` (id, file_name) + ``annotations`` (image_id, id, caption)."""
    path = content.path
    data = content.json
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise DataError(
            f"{path}: COCO captions need an object with an 'annotations' list (and 'images'); found {json_kind(data)}"
        )
    images = data.get("images")
    if images is not None and not isinstance(images, list):
        raise DataError(f"{path}: 'images' is {json_kind(images)}; expected a list of {{\"id\", \"file_name\"}} objects")
    # keyed by the id's text, as groups are: an annotation's image_id "2" is image 2 (as an int and a
    # string, one image's captions would be two groups, negatives of each other)
    file_names = {}
    for index, image in enumerate(images or []):
        if isinstance(image, dict) and "id" in image:
            file_names[key_text(_image_id(image["id"], path, f"images[{index}].id"))] = image.get("file_name")
    annotations = data["annotations"]
    ids, groups, texts = [], [], []
    for index, annotation in enumerate(annotations):
        if not isinstance(annotation, dict):
            raise DataError(f"{path}: annotations[{index}]: expected an object, found {json_kind(annotation)}")
        image_id = _image_id(annotation.get("image_id"), path, f"annotations[{index}].image_id")
        ids.append(annotation.get("id"))
        groups.append(file_names.get(key_text(image_id)) or image_id)
        texts.append(annotation.get("caption"))
    return RawCaptions(
        source=path, format="coco", texts=texts, where=lambda row: f"annotations[{row}]",
        ids=ids, groups=groups, fields=list(annotations[0]) if annotations else [],
    )


def _image_id(value, path: Path, place: str):
    if isinstance(value, (dict, list)):
        raise DataError(f"{path}: {place} is {json_kind(value)}; expected a number or text")
    return value


def read_karpathy(content: DatasetContent) -> RawCaptions:
    """Karpathy split files (dataset_coco.json, dataset_flickr30k.json): images[].sentences[].raw."""
    path = content.path
    data = content.json
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise DataError(f"{path}: Karpathy layout needs an object with an 'images' list; found {json_kind(data)}")
    image_groups = row_groups([_karpathy_group(image) for image in images],
                              [f"images[{index}]" for index in range(len(images))])
    ids, groups, splits, texts, image_index, sentence_index = [], [], [], [], [], []
    for index, image in enumerate(images):
        if not isinstance(image, dict) or not isinstance(image.get("sentences"), list):
            raise DataError(f"{path}: images[{index}]: expected an object with a 'sentences' list")
        sentids = image.get("sentids") or []
        if not isinstance(sentids, list):
            raise DataError(f"{path}: images[{index}].sentids is {json_kind(sentids)}; expected a list of sentence ids")
        # an image without sentences stays visible as one missing caption, skipped and counted
        for k, sentence in enumerate(image["sentences"] or [{}]):
            if not isinstance(sentence, dict):
                raise DataError(f"{path}: images[{index}].sentences[{k}]: expected an object, found {json_kind(sentence)}")
            sentid = sentence["sentid"] if "sentid" in sentence else (sentids[k] if k < len(sentids) else None)
            ids.append(sentid)
            groups.append(image_groups[index])
            splits.append(image.get("split"))
            texts.append(sentence.get("raw"))
            image_index.append(index)
            sentence_index.append(k)
    return RawCaptions(
        source=path, format="karpathy", texts=texts,
        where=lambda row: f"images[{image_index[row]}].sentences[{sentence_index[row]}]",
        ids=ids, groups=groups, splits=splits if any(value is not None for value in splits) else None,
        fields=list(images[0]) if images else [],
    )


def _karpathy_group(image):
    if not isinstance(image, dict):
        return None
    for key in ("filename", "cocoid", "imgid"):
        if image.get(key) not in (None, ""):
            return image[key]
    return None


def read_coco_list(content: DatasetContent) -> RawCaptions:
    """A JSON list of ``{"image_name", "captions": [...], "split"}``: one image, several captions."""
    path = content.path
    records = _list_of_objects(content, "a JSON list of {\"image_name\", \"captions\": [...]} objects")
    # a record without an image name is still one image (named by its record number)
    record_groups = row_groups([record.get("image_name") for record in records],
                               [str(index + 1) for index in range(len(records))])
    groups, splits, texts, record_index, caption_index = [], [], [], [], []
    for index, record in enumerate(records):
        captions = record.get("captions")
        if captions is not None and not isinstance(captions, list):
            raise DataError(
                f"{path}: record {index + 1}: expected 'captions' to be a list of strings; "
                f"found {json_kind(captions)} (keys: {', '.join(record)})"
            )
        # a null or empty list stays visible as one missing caption, skipped and counted, as the
        # generic reader does, instead of the image vanishing without a word
        for k, caption in enumerate(captions or [None]):
            groups.append(record_groups[index])
            splits.append(record.get("split"))
            texts.append(caption)
            record_index.append(index)
            caption_index.append(k)
    return RawCaptions(
        source=path, format="coco-list", texts=texts,
        where=lambda row: f"record {record_index[row] + 1}, caption {caption_index[row] + 1}",
        groups=groups, splits=splits if any(value is not None for value in splits) else None,
        fields=list(records[0]) if records else [],
    )


def read_sharegpt4v(content: DatasetContent) -> RawCaptions:
    """ShareGPT4V: ``{"id", "image", "conversations": [{"from": "human"|"gpt", "value"}]}``.

    The caption is the first model turn (``from`` gpt or assistant). JSON-lines
    files of the same records are read too.
    """
    path = content.path
    if not content.text.lstrip().startswith("["):  # JSON lines rather than one JSON list
        numbered = list(iter_json_lines(content.text, path))
        records = [record for _, record in numbered]
        lines = [number for number, _ in numbered]
        where = lambda row: f"line {lines[row]}"  # noqa: E731
    else:
        records = _list_of_objects(content, "a JSON list of {\"id\", \"image\", \"conversations\"} objects")
        where = lambda row: f"record {row + 1}"  # noqa: E731
    ids, groups, texts = [], [], []
    for row, record in enumerate(records):
        turns = record.get("conversations")
        if not isinstance(turns, list):
            raise DataError(f"{path}: {where(row)}: expected a 'conversations' list; found keys: {', '.join(record)}")
        answer = next(
            (turn.get("value") for turn in turns if isinstance(turn, dict) and turn.get("from") in ("gpt", "assistant")),
            None,
        )
        ids.append(record.get("id"))
        groups.append(record.get("image"))
        texts.append(answer)
    return RawCaptions(
        source=path, format="sharegpt4v", texts=texts, where=where, ids=ids, groups=groups,
        fields=list(records[0]) if records else [],
    )


def read_dci(content: DatasetContent) -> RawCaptions:
    """DCI per-image annotation folder (``complete/`` of densely_captioned_images).

    Per file ``<stem>.json``: the long caption is ``extra_caption`` (id and group
    ``<stem>``). When the file has LLM ``summaries`` (sDCI), the summaries of the
    whole image (``summaries["base"]``, a string or list; or the list itself when
    ``summaries`` is a list) become more captions of the same group, ids
    ``<stem>#summary-<k>``. Summaries of mask regions (``m-<idx>-sc`` keys) and
    mask captions describe parts of the image, so they are not taken.
    A ``splits.json`` beside ``complete/`` (``{"train": [file, ...], ...}``) sets the split.
    """
    folder = content.path
    root = folder
    if (folder / "complete").is_dir():
        folder = folder / "complete"
    # <image>.json, or <image>.json.gz (.zst, .bz2, .xz): read_text decompresses by the name
    files = sorted(path for path in visible_files(folder) if inner_suffix(path) == ".json")
    if not files:
        found = ", ".join(sorted(path.name for path in folder.iterdir())[:10]) or "nothing"
        raise DataError(f"{folder}: expected DCI annotation files <image>.json; found: {found}")
    split_of = _dci_splits(root if root != folder else folder.parent)
    ids, groups, splits, texts, places = [], [], [], [], []
    fields: list[str] = []
    for file in files:
        data = parse_json(read_text(file), file)
        if not isinstance(data, dict) or "extra_caption" not in data:
            raise DataError(
                f"{file}: DCI annotation needs an 'extra_caption' key; found {json_kind(data)}"
            )
        fields = fields or list(data)
        name, stem = inner_name(file), inner_stem(file)
        split = split_of.get(name, split_of.get(stem))
        ids.append(stem)
        texts.append(_dci_description(data, file))
        places.append(f"file {file.name}")
        for k, summary in enumerate(_image_summaries(data.get("summaries"), file)):
            ids.append(f"{stem}#summary-{k}")
            texts.append(summary)
            places.append(f"file {file.name}, summary {k + 1}")
        groups.extend([stem] * (len(ids) - len(groups)))
        splits.extend([split] * (len(ids) - len(splits)))
    return RawCaptions(
        source=folder, format="dci", texts=texts, where=lambda row: places[row],
        ids=ids, groups=groups, splits=splits if split_of else None, fields=fields,
    )


def _dci_description(data: dict, file: Path):
    """The whole image's human description as DCI's own loader builds it (``get_extended_caption``):
    ``short_caption``, a newline, then ``extra_caption``, which continues it ("additional description
    not captured elsewhere"); leaving the short caption out lost each description's first sentence.
    A short caption that is not text is an error, as any caption that is not text is."""
    short, extra = data.get("short_caption"), data["extra_caption"]
    if short is not None and not isinstance(short, str):
        raise DataError(f"{file}: 'short_caption' is {json_kind(short)}; expected text (a caption that is not text "
                        "means the wrong field was read)")
    if not (isinstance(short, str) and short.strip()):
        return extra
    if extra is None or (isinstance(extra, str) and not extra.strip()):
        return short
    return f"{short}\n{extra}" if isinstance(extra, str) else extra  # (not text: an error, naming the file)


def _image_summaries(summaries, file: Path) -> list:
    if summaries is None:
        return []
    if isinstance(summaries, dict):
        summaries = summaries.get("base", [])
    if isinstance(summaries, str):
        return [summaries]
    if isinstance(summaries, list):
        return summaries
    raise DataError(f"{file}: 'summaries' should be an object or a list; found {json_kind(summaries)}")


def _dci_splits(root: Path) -> dict[str, str]:
    splits_file = root / "splits.json"
    if not splits_file.is_file():
        return {}
    data = parse_json(read_text(splits_file), splits_file)
    if not isinstance(data, dict):
        raise DataError(f"{splits_file}: expected an object {{split: [file, ...]}}; found {json_kind(data)}")
    return {str(name): split for split, names in data.items() if isinstance(names, list) for name in names}


def _list_of_objects(content: DatasetContent, expected: str) -> list[dict]:
    data = content.json
    if not isinstance(data, list):
        raise DataError(f"{content.path}: expected {expected}; found {json_kind(data)}")
    for index, record in enumerate(data):
        if not isinstance(record, dict):
            raise DataError(f"{content.path}: record {index + 1}: expected an object, found {json_kind(record)}")
    return data
