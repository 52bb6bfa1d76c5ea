"""One vector per image of a CaptionSet: from the encoder's vision tower, or from a file.

:func:`image_vectors` is the one way the pair analyses get their :class:`ImageVectors`.
With ``image_embeddings`` the vectors are read from that file (``--image-embeddings``);
otherwise the images the dataset names are located (:mod:`capgeo.images.sources`),
hashed, decoded to RGB (:mod:`capgeo.images.decode`) and encoded by the spec's own
vision tower with its own preprocessing (:mod:`capgeo.encoders.vision`), in chunks
cached by the images' content (:mod:`capgeo.images.cache`). Images missing, unreadable
or undecodable are skipped: their rows are zeros, ``present`` is False, and one warning
on stderr counts them and names the first few.
"""

from __future__ import annotations

import hashlib
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from capgeo.defaults import IMAGE_BATCH as CHUNK_IMAGES
from capgeo.images import ImageVectors

#: image bytes kept between hashing and encoding; past this they are read again
HELD_BYTES = 512 * 2**20
#: skipped images named in the warning
NAMED_SKIPPED = 3
#: what is said where no image vectors can be had, and the caption analyses run alone
NEEDS_IMAGES = ("the pair analyses need a CLIP-style encoder with an image tower (--encoder, e.g. ViT-B-32/openai "
                "or longclip-L) or image vectors (--image-embeddings FILE); the caption analyses run without them")


def image_vectors(captions, encode_options=None, *, images_root=None, image_embeddings=None,
                  progress=None, notes: list | None = None) -> ImageVectors | None:
    """The images of ``captions`` as one unit vector per group (row g for group code g), or None
    where there are none to be had: a text-only encoder and no ``image_embeddings``, or a dataset
    that names no images (``notes``, when given, receives the line that says why).

    ``encode_options``: a capgeo.pipeline.EncodeOptions (its encoder, device and cache);
    ``images_root``: the folder the images are in (``--images DIR``), where not beside the
    captions; ``image_embeddings``: a .npy/.npz/.parquet of vectors keyed by image id, used
    instead of any encoder; ``progress``: as elsewhere (None: a bar on a terminal)."""
    notes = notes if notes is not None else []
    if image_embeddings is not None:
        return _from_file(captions, image_embeddings, images_root, progress)
    from capgeo.encoders.vision import load_vision_encoder
    from capgeo.images.sources import locate

    spec = _spec(encode_options)
    if not has_image_tower(encode_options):  # a text-only encoder: no tower to look for
        notes.append(NEEDS_IMAGES)
        return None
    # the images are located before any weight is read: a dataset that names none costs no tower
    located = locate(captions, images_root)
    if located is None:
        notes.append("the dataset names no images (an Image column, image members, an image path column or a "
                      "benchmark layout's files); pass --image-column COLUMN or --images DIR, or --image-embeddings "
                      "FILE, for the pair analyses")
        return None
    cache_dir = getattr(encode_options, "cache_dir", None)
    vision = load_vision_encoder(spec, getattr(encode_options, "device", None), cache_dir=cache_dir)
    if vision is None:
        notes.append(NEEDS_IMAGES)
        return None
    return encode_located(captions, located, vision, cache_dir=cache_dir,
                          use_cache=getattr(encode_options, "use_cache", True), progress=progress, notes=notes)


def has_image_tower(encode_options) -> bool:
    """Whether the encoder of ``encode_options`` (an EncodeOptions, or None) is CLIP-style: its spec
    names weights that may hold an image tower (open_clip models, Long-CLIP checkpoints)."""
    from capgeo.encoders.registry import spec_kind

    return spec_kind(_spec(encode_options))[0] in ("open_clip", "longclip")


def _spec(encode_options) -> str | None:
    encoder = getattr(encode_options, "encoder", None)
    if encoder is None or isinstance(encoder, str):
        return encoder
    return encoder.info.spec  # an encoder already loaded: its spec names its weights


def encode_located(captions, located, vision, *, cache_dir=None, use_cache: bool = True, progress=None,
                   notes: list | None = None) -> ImageVectors | None:
    """Hash, decode and encode the located images with ``vision`` (a VisionEncoder)."""
    group_ids = captions.group_names
    n_groups = len(group_ids)
    hashes, held, skipped = _hashed(located, n_groups, progress, HELD_BYTES)
    readable = [code for code in range(n_groups) if hashes[code] is not None]
    if not readable:
        _warn_skipped(skipped, group_ids, n_groups)
        (notes if notes is not None else []).append(
            f"no image of the dataset could be read (looked in {', '.join(located.searched) or 'the dataset'}); "
            "pass --images DIR where they are")
        return None
    entry = _cache_entry(cache_dir, [hashes[code] for code in readable], vision) if use_cache else None
    vectors, present = _encoded(readable, held, located.refs, vision, skipped, entry=entry, progress=progress)
    full = np.zeros((n_groups, vision.info.width), dtype=np.float32)
    mask = np.zeros(n_groups, dtype=bool)
    full[readable] = vectors
    mask[readable] = present
    full[~mask] = 0.0
    _warn_skipped(skipped, group_ids, n_groups)
    examples = tuple(_shown(group_ids[code], why) for code, why in sorted(skipped.items())[:NAMED_SKIPPED])
    return ImageVectors(vectors=full, present=mask, source=f"{vision.info.spec} (image tower)",
                        content_hashes=tuple(hashes), n_skipped=len(skipped), skipped_examples=examples,
                        thumbnail=Thumbnails(located.refs))


def _hashed(located, n_groups: int, progress, budget: int):
    """(sha256 of each group's image bytes, None where unreadable; the bytes kept, up to ``budget``
    in all; why each unreadable or missing image is)."""
    from capgeo.images.read import image_bytes
    from capgeo.progress import progress_bar

    skipped: dict[int, str] = {code: "not found" for code in located.missing}
    hashes: list[str | None] = [None] * n_groups
    held: dict[int, bytes] = {}
    held_size = 0
    wanted = [(code, ref) for code, ref in enumerate(located.refs) if ref is not None]
    with progress_bar("Reading images", total=len(wanted), enabled=progress) as bar:
        for code, data, why in image_bytes(wanted):
            bar.advance(1)
            if data is None:
                skipped[code] = why or "cannot read"
                continue
            hashes[code] = hashlib.sha256(data).hexdigest()
            if held_size + len(data) <= budget:
                held[code] = data
                held_size += len(data)
    return hashes, held, skipped


def _cache_entry(cache_dir, hashes, vision):
    """The cache entry of the images of content ``hashes`` (in order) encoded by ``vision``."""
    from capgeo.images.cache import ImageCacheEntry, image_cache_key

    return ImageCacheEntry(cache_dir, image_cache_key(hashes, vision.info), len(hashes), vision.info.width)


def _encoded(readable, held, refs, vision, skipped, *, entry, progress):
    """(vectors, present) of the readable images in order: chunks cached in ``entry`` (None: no
    cache) as stored, the others decoded and encoded (the next chunk's decoding overlapping the
    current chunk's encoding)."""
    from capgeo.encoders.cache import chunk_ranges
    from capgeo.progress import progress_bar

    n, width = len(readable), vision.info.width
    vectors = np.zeros((n, width), dtype=np.float32)
    present = np.zeros(n, dtype=bool)
    pending = []
    for start, stop in chunk_ranges(n, CHUNK_IMAGES):
        cached = _load_chunk(entry, start, stop) if entry is not None else None
        if cached is None:
            pending.append((start, stop))
            continue
        vectors[start:stop], present[start:stop] = cached
        for offset in np.flatnonzero(~cached[1]):
            skipped[readable[start + offset]] = "cannot decode"
    if not pending:
        return vectors, present
    if entry is not None:
        entry.check_writable()

    def prepared(span):
        """(pixels of the decodable images of the chunk, their mask): runs beside the encoding."""
        return _prepare([readable[row] for row in range(*span)], held, refs, vision, skipped)

    with progress_bar(f"Encoding images ({vision.info.name})", total=sum(b - a for a, b in pending),
                      enabled=progress) as bar, ThreadPoolExecutor(max_workers=1) as pool:
        vision.preprocess  # noqa: B018 - built here, before the worker asks for it
        future = pool.submit(prepared, pending[0])
        for index, (start, stop) in enumerate(pending):
            pixels, mask = future.result()
            if index + 1 < len(pending):
                future = pool.submit(prepared, pending[index + 1])
            rows = np.zeros((stop - start, width), dtype=np.float32)
            rows[:, 0] = 1.0  # a unit placeholder for undecodable images; the mask says which
            if pixels is not None:
                rows[mask] = vision.encode_pixels(pixels)
            vectors[start:stop], present[start:stop] = rows, mask
            if entry is not None:
                _save_chunk(entry, start, stop, rows, mask)
            bar.advance(stop - start)
    return vectors, present


def _prepare(codes, held, refs, vision, skipped):
    from capgeo.images.decode import Undecodable, decode_rgb
    from capgeo.images.read import image_bytes

    missing = [(code, refs[code]) for code in codes if code not in held]
    data = dict(held)
    data.update({code: value for code, value, _ in image_bytes(missing) if value is not None})
    images, mask = [], np.zeros(len(codes), dtype=bool)
    for offset, code in enumerate(codes):
        if code not in data:
            skipped[code] = "cannot read"
            continue
        try:
            images.append(decode_rgb(data[code]))
            mask[offset] = True
        except Undecodable as error:
            skipped[code] = str(error)
    for code in codes:  # read once more only if needed: their bytes are no longer held
        held.pop(code, None)
    return (vision.pixels(images) if images else None), mask


def _load_chunk(entry, start: int, stop: int):
    from capgeo.encoders.cache import _parse_array

    vectors = entry.load_chunk(start, stop)
    if vectors is None:
        return None
    for _, _, data in entry._verified(_mask_stem(start, stop), "image mask"):
        mask = _parse_array(data)
        if mask is not None and mask.dtype == np.bool_ and mask.shape == (stop - start,):
            return vectors, mask
    return None


def _save_chunk(entry, start: int, stop: int, vectors: np.ndarray, mask: np.ndarray) -> None:
    from capgeo.encoders.cache import _checksum, _npy_bytes

    data = _npy_bytes(np.asarray(mask, dtype=np.bool_))
    entry._write(_mask_stem(start, stop), f"{_mask_stem(start, stop)}.{_checksum(data)}.npy", data)
    entry.save_chunk(start, stop, vectors)


def _mask_stem(start: int, stop: int) -> str:
    return f"present-{start:09d}-{stop:09d}"


class Thumbnails:
    """``thumbnail(g)``: a small JPEG of group g's image, read and made when first asked for;
    ``many(codes)`` makes several at once, reading each shard once for all of them."""

    def __init__(self, refs: list):
        self._refs = refs
        self._made: dict[int, bytes | None] = {}

    def __call__(self, code: int) -> bytes | None:
        return self.many([code])[code]

    def many(self, codes) -> dict[int, bytes | None]:
        from capgeo.images.read import image_bytes

        codes = [int(code) for code in codes]
        wanted = sorted({code for code in codes if code not in self._made
                         and 0 <= code < len(self._refs) and self._refs[code] is not None},
                        key=lambda code: _shard_order(self._refs[code]))
        for code, data, _ in image_bytes([(code, self._refs[code]) for code in wanted]):
            self._made[code] = _thumbnail(data)
        return {code: self._made.get(code) for code in codes}


def _shard_order(ref) -> tuple:
    """References of one shard side by side, so that image_bytes reads each shard once."""
    return (str(getattr(ref, "file", getattr(ref, "shard", ""))), getattr(ref, "row", 0))


def _thumbnail(data: bytes | None) -> bytes | None:
    from capgeo.images.decode import Undecodable, decode_rgb, thumbnail_jpeg

    if data is None:
        return None
    try:
        return thumbnail_jpeg(decode_rgb(data))
    except Undecodable:
        return None


def _from_file(captions, path, images_root, progress) -> ImageVectors:
    from capgeo.findings.gamma import checked_image_embeddings
    from capgeo.images.sources import locate

    # one finite, non-zero vector per image (checked), made unit in float64
    vectors = np.asarray(checked_image_embeddings(path, captions), dtype=np.float64)
    unit = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    located = locate(captions, images_root)
    # the images' content, where the dataset names them: what tells exact twins apart from near ones
    hashes = tuple(_hashed(located, len(unit), progress, 0)[0]) if located is not None else None
    return ImageVectors(vectors=unit, present=np.ones(len(unit), dtype=bool), source=str(path),
                        content_hashes=hashes, thumbnail=Thumbnails(located.refs) if located is not None else None)


def _shown(group_id: str, why: str) -> str:
    """A skipped image as the warning names it: its id (a content hash shortened) and why."""
    from capgeo.display import visible

    shown = group_id[:len("sha256:") + 12] + "…" if group_id.startswith("sha256:") else group_id
    return visible(f"{shown} ({why})")


def _warn_skipped(skipped: dict[int, str], group_ids: list[str], n_groups: int) -> None:
    if not skipped:
        return
    named = ", ".join(_shown(group_ids[code], why) for code, why in sorted(skipped.items())[:NAMED_SKIPPED])
    more = f", and {len(skipped) - NAMED_SKIPPED:,} more" if len(skipped) > NAMED_SKIPPED else ""
    print(f"Warning: skipped {len(skipped):,} of {n_groups:,} images (missing or undecodable; their pairs are left "
          f"out): {named}{more}", file=sys.stderr)
