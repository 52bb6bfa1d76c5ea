"""Image leaks between a training set and an evaluation set: one image under each set's id.

Three ways to tell (docs/pairs.md, "Image leaks"), each used where both sets allow it:

- **by file name**: both sets name their images by file (group ids ending in an image suffix). COCO
  files carry the image's number: ``COCO_val2014_000000391895.jpg`` (Karpathy splits) and
  ``000000391895.jpg`` (val2017) are one image, 391895. A name made of digits alone, or COCO's
  ``COCO_<split><year>_<digits>``, is keyed by that number; any other name by its file name, lower
  case, without its folder. Two datasets that number their images independently (Flickr30k's
  ``1000092795.jpg`` beside COCO's numbers) can meet by accident: a name match is a lead to check.
- **by content hash**: the sha256 of the image bytes (ImageVectors.content_hashes, where known).
- **by image vectors**: image-image cosine >= the threshold (exact, float64, blockwise).
"""

from __future__ import annotations

import re

import numpy as np

from capgeo.defaults import IMAGE_TWIN_THRESHOLD, PAIRS_LISTED
from capgeo.geometry.typed_profile import ImageLeak, ImageMatch, ImageVectorSources

#: file suffixes that make a group id an image file name
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
#: names keyed by their number: digits alone, or COCO's COCO_<split><year>_<digits>
_NUMBERED = re.compile(r"^(?:COCO_[a-z]+\d{4}_)?(\d+)$", re.IGNORECASE)


def image_name_key(group_id) -> str | None:
    """The key under which two sets' image file names are one image, None for an id that is not an
    image file name: ``COCO_val2014_000000391895.jpg`` and ``000000391895.jpg`` -> ``"391895"``."""
    name = str(group_id).replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem or f".{suffix.lower()}" not in IMAGE_SUFFIXES:
        return None
    numbered = _NUMBERED.match(stem)
    return str(int(numbered.group(1))) if numbered else name.lower()


def name_matches(train_names, eval_names) -> list[tuple[int, int]]:
    """(eval row, train row) of every two images whose file names share a key (:func:`image_name_key`)."""
    by_key: dict[str, list[int]] = {}
    for row, name in enumerate(train_names):
        key = image_name_key(name)
        if key is not None:
            by_key.setdefault(key, []).append(row)
    return [(row, train_row) for row, name in enumerate(eval_names)
            for train_row in by_key.get(image_name_key(name) or "\0", ())]


def image_leak(train_names, eval_names, *, train_images=None, eval_images=None,
               threshold: float = IMAGE_TWIN_THRESHOLD, listed: int = PAIRS_LISTED) -> ImageLeak | None:
    """The images of one evaluation set that are also training images, by file name, content hash and
    image vectors (each where both sets allow it). ``*_names``: each set's group ids in group-code
    order; ``*_images``: their ImageVectors, or None. None when no way applies."""
    from capgeo.findings.pairs import near_pairs

    named = (any(image_name_key(name) is not None for name in train_names)
             and any(image_name_key(name) is not None for name in eval_names))
    if not named and (train_images is None or eval_images is None):
        return None
    ways: list[str] = []
    found: dict = {}
    shared: set[int] = set()
    if named:
        matches = name_matches(train_names, eval_names)
        ways.append("file name")
        found.update(n_name_matches=len({row for row, _ in matches}),
                     name_matches=tuple(ImageMatch(eval=eval_names[row], train=train_names[t])
                                        for row, t in matches[:listed]))
        shared.update(row for row, _ in matches)
    if train_images is not None and eval_images is not None:
        widths = (np.shape(train_images.vectors)[1], np.shape(eval_images.vectors)[1])
        if widths[0] != widths[1]:
            from capgeo.errors import CapgeoError

            raise CapgeoError(f"image vectors of {widths[1]} dimensions ({eval_images.source}) against the training "
                              f"set's of {widths[0]} ({train_images.source}); one image encoder must make both")
        found["vectors"] = ImageVectorSources(train=train_images.source, eval=eval_images.source)
        train_present = np.flatnonzero(train_images.present)
        eval_present = np.flatnonzero(eval_images.present)
        if train_images.content_hashes is not None and eval_images.content_hashes is not None:
            by_hash = {train_images.content_hashes[g]: g for g in train_present
                       if train_images.content_hashes[g] is not None}
            hashed = [(g, by_hash[eval_images.content_hashes[g]]) for g in eval_present
                      if eval_images.content_hashes[g] in by_hash]
            ways.append("content hash")
            found.update(n_hash_matches=len(hashed),
                         hash_matches=tuple(ImageMatch(eval=eval_names[g], train=train_names[t])
                                            for g, t in hashed[:listed]))
            shared.update(g for g, _ in hashed)
        rows, cols, cosine = near_pairs(np.asarray(eval_images.vectors)[eval_present],
                                        np.asarray(train_images.vectors)[train_present], threshold)
        rows, cols = eval_present[rows], train_present[cols]
        order = np.lexsort((cols, rows, -cosine))[:listed]
        ways.append("image vectors")
        found.update(threshold=float(threshold), n_near_images=int(np.unique(rows).size),
                     near_matches=tuple(ImageMatch(eval=eval_names[rows[i]], train=train_names[cols[i]],
                                                   cosine=float(cosine[i])) for i in order))
        shared.update(rows.tolist())
    return ImageLeak(ways=tuple(ways), **found, n_images=len(eval_names), n_shared=len(shared))


def describe_image_leak(images: ImageLeak) -> str:
    """One line for an evaluation set's images that are training images (:func:`image_leak`)."""
    from capgeo.display import short_id

    parts = []
    if images.n_name_matches is not None:
        parts.append(f"{images.n_name_matches:,} by file name")
    if images.n_hash_matches is not None:
        parts.append(f"{images.n_hash_matches:,} by identical bytes")
    if images.n_near_images is not None:
        parts.append(f"{images.n_near_images:,} at image cosine >= {images.threshold:g}")
    examples = images.name_matches or images.hash_matches or images.near_matches or ()
    example = f", e.g. {short_id(examples[0].eval)} = {short_id(examples[0].train)}" if examples else ""
    return (f"shared images: {images.n_shared:,} of {images.n_images:,} eval images are training images "
            f"({'; '.join(parts)}){example}")
