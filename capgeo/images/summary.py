"""Where a dataset's images are, as `capgeo info` says it: how many groups name an image, of which
kind, and whether the first few are there, without decoding one (capgeo.images.sources records
where they are; nothing else is read but an image column, read again, and a few file names)."""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath

#: images looked for, at most, to say whether the named ones are there
CHECKED_IMAGES = 5


def image_summary(captions, checked: int = CHECKED_IMAGES) -> dict | None:
    """Where the images of ``captions`` are (the ``images`` field of `capgeo info --json`), None for a
    dataset that names none:

    - ``source``: ``"Image column"`` (a Hugging Face ``Image`` feature: bytes or a path), ``"path
      column"``, ``"webdataset members"`` or ``"layout files"`` (a benchmark layout, or --images DIR,
      naming each image by its group id);
    - ``column`` (column sources): the column; ``n_groups``; ``n_named``: groups with an image named;
    - ``kinds``: those groups by kind (``bytes``/``path``; a member's extension; ``file name``);
    - ``checked``: the first ``checked`` of them, each ``{"group", "image", "exists"}`` (the file or the
      shard member looked for; an image's bytes held in the dataset exist);
    - ``searched``: the folders files are looked for in (file references only)."""
    from capgeo.images.sources import ColumnImages, NamedFiles, ShardImages

    source = getattr(captions, "image_source", None)
    groups = captions.group_names
    if isinstance(source, ShardImages):
        return _members(source, groups, checked)
    if isinstance(source, ColumnImages):
        return _column(source, groups, checked)
    if isinstance(source, NamedFiles):
        finder = _finder(source.roots())
        looked = [_looked(group, finder.find(group)) for group in groups[:checked]]
        return {"source": "layout files", "n_groups": len(groups), "n_named": len(groups),
                "kinds": {"file name": len(groups)}, "checked": looked, "searched": list(map(str, finder.roots))}
    return None


def _members(source, groups: list[str], checked: int) -> dict:
    refs = [(group, source.members.get(group)) for group in groups]
    named = [(group, ref) for group, ref in refs if ref is not None]
    kinds = Counter(PurePosixPath(ref.name).suffix.lstrip(".").lower() or "?" for _, ref in named)
    looked = [{"group": group, "image": f"{ref.shard}:{ref.name}", "exists": ref.shard.is_file()}
              for group, ref in named[:checked]]   # a member is recorded as the shard was read
    return {"source": "webdataset members", "n_groups": len(groups), "n_named": len(named),
            "kinds": dict(kinds.most_common()), "checked": looked}


def _column(source, groups: list[str], checked: int) -> dict:
    kinds: dict[int, str] = {}
    first: dict[int, tuple] = {}
    image_feature = False
    for code, file, row, image in source.rows_of(groups):
        if code in kinds:
            continue
        if isinstance(image, dict):
            image_feature = True
            kind = "bytes" if image.get("bytes") else "path" if _text(image.get("path")) else None
            name = image.get("path")
        else:
            kind = "bytes" if isinstance(image, (bytes, bytearray)) and image else "path" if _text(image) else None
            name = image
        if kind is not None:
            kinds[code], first[code] = kind, (file, row, name)
    finder = _finder(source.finder().roots)
    looked = []
    for code in sorted(first)[:checked]:
        file, row, name = first[code]
        if kinds[code] == "bytes":
            where = f"bytes in {file}, row {row + 1}" if file is not None else "bytes in memory"
            looked.append({"group": groups[code], "image": where, "exists": True})
        else:
            looked.append(_looked(groups[code], finder.find(name), name))
    summary = {"source": "Image column" if image_feature else "path column", "column": source.image_column,
               "n_groups": len(groups), "n_named": len(kinds),
               "kinds": dict(Counter(kinds.values()).most_common()), "checked": looked}
    if "path" in summary["kinds"]:
        summary["searched"] = list(map(str, finder.roots))
    return summary


def _finder(roots):
    from capgeo.images.sources import FileFinder

    return FileFinder(list(roots))


def _looked(group: str, found, name=None) -> dict:
    return {"group": group, "image": str(found if found is not None else (name if name is not None else group)),
            "exists": found is not None}


def _text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


#: how `capgeo info` says each kind of reference (a webdataset member's extension: ".jpg")
_KIND_WORDS = {"bytes": "as bytes", "path": "as paths", "file name": "by file name"}


def describe_images(images: dict | None) -> str:
    """`capgeo info`'s line for the ``images`` field."""
    if images is None:
        return ("none named (an Image column, webdataset image members, --image-column COLUMN, a benchmark "
                "layout's files or --images DIR name them)")
    kinds = ", ".join(f"{count:,} {_KIND_WORDS.get(kind, '.' + kind)}" for kind, count in images["kinds"].items())
    where = images["source"] + (f" '{images['column']}'" if images.get("column") else "")
    looked = images["checked"]
    found = sum(entry["exists"] for entry in looked)
    line = f"{images['n_named']:,} of {images['n_groups']:,} groups name one: {where} ({kinds})"
    if looked:
        line += f"; {found} of the first {len(looked)} there"
        example = next((entry for entry in looked if entry["exists"]), None)
        if example is not None:
            line += f", e.g. {example['image']}"
        elif images.get("searched"):
            line += f" (looked in {', '.join(images['searched'])}; --images DIR says where they are)"
    return line
