"""On-disk embedding cache.

One folder per key under ``<cache dir>/embeddings/``. The key covers everything
that decides the vectors: the caption texts in order, the encoder (kind, name,
weight fingerprint, width, context length), the token limit, normalisation and
this file's format version. A folder holds:

- ``token_counts.npy``: each caption's untruncated token count (written first, so
  a cache hit or a resumed run needs no tokenizer);
- ``chunk-<start>-<stop>.npy``: vectors of rows ``start:stop`` of the captions
  sorted by token count (longest first), written as encoding proceeds;
- ``manifest.json``: written last, once every chunk is there.

Every file is written to a temporary name and renamed, so a killed process
leaves at worst a ``*.part`` file, which is never read. Chunks are validated
(shape, dtype, finite, unit norm) on every read and deleted when bad, so an
interrupted encode resumes from the chunks that are really there.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from capgeo._atomic import atomic_open, atomic_path
from capgeo.encoders.base import EncoderInfo
from capgeo.errors import CapgeoError

FORMAT_VERSION = 1
DEFAULT_CHUNK_ROWS = 256
TOKEN_COUNTS_FILE = "token_counts.npy"
MANIFEST_FILE = "manifest.json"
STALE_PART_SECONDS = 3600


def default_cache_dir() -> Path:
    configured = os.environ.get("CAPGEO_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "capgeo"


def texts_digest(texts: Sequence[str]) -> str:
    """sha256 over the texts in order (same as CaptionSet.texts_digest)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def cache_key(texts: Sequence[str], info: EncoderInfo, max_tokens: int, normalised: bool = True) -> str:
    identity = {
        "format": FORMAT_VERSION,
        "texts": texts_digest(texts),
        "n": len(texts),
        "encoder": {"kind": info.kind, "name": info.name, "fingerprint": info.fingerprint,
                    "width": info.width, "context_length": info.context_length},
        "max_tokens": int(max_tokens),
        "normalised": bool(normalised),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def chunk_ranges(n: int, chunk_rows: int) -> list[tuple[int, int]]:
    return [(start, min(start + chunk_rows, n)) for start in range(0, n, chunk_rows)]


class CacheEntry:
    """The cached embeddings of one key: ``n`` captions, vectors of ``width``."""

    def __init__(self, cache_dir: str | Path | None, key: str, n: int, width: int):
        self.folder = Path(cache_dir or default_cache_dir()) / "embeddings" / key
        self.key = key
        self.n = n
        self.width = width

    # token counts -------------------------------------------------------
    def load_token_counts(self) -> np.ndarray | None:
        counts = self._load_array(self.folder / TOKEN_COUNTS_FILE)
        if counts is None or counts.shape != (self.n,) or not np.issubdtype(counts.dtype, np.integer):
            return None
        return counts.astype(np.int64)

    def save_token_counts(self, counts: np.ndarray) -> None:
        self._save_array(self.folder / TOKEN_COUNTS_FILE, np.asarray(counts, dtype=np.int64))

    # vector chunks --------------------------------------------------------
    def chunk_path(self, start: int, stop: int) -> Path:
        return self.folder / f"chunk-{start:09d}-{stop:09d}.npy"

    def load_chunk(self, start: int, stop: int) -> np.ndarray | None:
        """The chunk's vectors, or None when absent or not trustworthy (then it is deleted)."""
        path = self.chunk_path(start, stop)
        if not path.exists():
            return None
        vectors = self._load_array(path)
        if vectors is None or not _valid_vectors(vectors, stop - start, self.width):
            path.unlink(missing_ok=True)
            return None
        return vectors

    def save_chunk(self, start: int, stop: int, vectors: np.ndarray) -> None:
        self._save_array(self.chunk_path(start, stop), np.ascontiguousarray(vectors, dtype=np.float32))

    # manifest -------------------------------------------------------------
    def write_manifest(self, info: EncoderInfo, max_tokens: int, ranges: list[tuple[int, int]]) -> None:
        from capgeo import __version__

        manifest = {
            "format": FORMAT_VERSION, "key": self.key, "n": self.n, "width": self.width,
            "max_tokens": max_tokens, "encoder": info.to_dict(),
            "chunks": [self.chunk_path(start, stop).name for start, stop in ranges],
            "capgeo": __version__, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        with atomic_open(self.folder / MANIFEST_FILE) as handle:
            json.dump(manifest, handle, indent=2)
        self._remove_leftovers(set(manifest["chunks"]))

    def has_manifest(self) -> bool:
        try:
            manifest = json.loads((self.folder / MANIFEST_FILE).read_text())
        except (OSError, ValueError):
            return False
        return manifest.get("key") == self.key and manifest.get("format") == FORMAT_VERSION

    # helpers --------------------------------------------------------------
    @staticmethod
    def _load_array(path: Path) -> np.ndarray | None:
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None

    def _save_array(self, path: Path, array: np.ndarray) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CapgeoError(f"cannot write the embedding cache {self.folder}: {error.strerror or error}; "
                              "pass --cache-dir FOLDER or --no-cache") from None
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, array)
                handle.flush()
                os.fsync(handle.fileno())

    def _remove_leftovers(self, chunk_names: set[str]) -> None:
        # chunks cut at other boundaries (another chunk size) are never read again
        for chunk in self.folder.glob("chunk-*.npy"):
            if chunk.name not in chunk_names:
                chunk.unlink(missing_ok=True)
        # temporaries of killed runs; recent ones may belong to a concurrent run
        now = time.time()
        for part in self.folder.glob(".*.part"):
            try:
                if now - part.stat().st_mtime > STALE_PART_SECONDS:
                    part.unlink()
            except OSError:
                pass


def _valid_vectors(vectors: np.ndarray, rows: int, width: int) -> bool:
    if vectors.dtype != np.float32 or vectors.shape != (rows, width):
        return False
    if not np.isfinite(vectors).all():
        return False
    norms = np.linalg.norm(vectors, axis=1)
    return bool(np.all(np.abs(norms - 1.0) < 1e-3))
