"""Image vectors in the embedding cache, keyed by the images' content as captions are by their text.

The key covers the sha256 of every image's bytes in group order, the image tower's
identity (weights, config, preprocessing) and this format's version; the entry holds
chunks of vectors under ``<cache dir>/images/<key>/``, written and checked by the text
cache's own machinery (:class:`capgeo.encoders.cache.CacheEntry`: checksums in the names,
atomic writes, unit rows checked on every read).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Sequence

from capgeo.encoders.base import EncoderInfo
from capgeo.encoders.cache import CacheEntry, default_cache_dir

IMAGE_FORMAT_VERSION = 1
#: stands for the token counts that salt a text chunk's checksum: image rows keep their order
IMAGE_SALT = "images"


def image_cache_key(content_hashes: Sequence[str], info: EncoderInfo) -> str:
    identity = {
        "format": IMAGE_FORMAT_VERSION,
        "images": hashlib.sha256("\n".join(content_hashes).encode()).hexdigest(),
        "n": len(content_hashes),
        "encoder": {"kind": info.kind, "name": info.name, "fingerprint": info.fingerprint, "width": info.width},
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class ImageCacheEntry(CacheEntry):
    """The cached vectors of ``n`` images (the present ones, in group order), ``width`` wide."""

    def __init__(self, cache_dir: str | Path | None, key: str, n: int, width: int):
        super().__init__(cache_dir, key, n, width)
        self.folder = Path(os.path.realpath(os.path.expanduser(cache_dir or default_cache_dir()))) / "images" / key
        self._counts_checksum = IMAGE_SALT
