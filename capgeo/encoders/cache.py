"""On-disk embedding cache.

One folder per key under ``<cache dir>/embeddings/``. The key covers everything
that decides the vectors: the caption texts in order, the encoder (kind, name,
weight fingerprint, width, context length), the token limit, normalisation and
this file's format version. A folder holds:

- ``token_counts.<checksum>.npy``: each caption's untruncated token count
  (written first, so a cache hit or a resumed run needs no tokenizer);
- ``chunk-<start>-<stop>.<checksum>.npy``: vectors of rows ``start:stop`` of the
  captions sorted by token count (longest first), written as encoding proceeds;
- ``manifest.json``: written last, once every chunk is there.

The checksum in each name is a sha256 of the entry's key and the file's bytes, so a
file copied from another entry (another dataset's, with the same caption count and
token counts) never matches here; a chunk's also covers the token-count checksum,
because the row order is rebuilt from those counts: chunks written under other
counts never match. The checksums catch accidents (a flipped bit, a cut file, a
file or folder copied to the wrong place), not a forger who can write the cache:
anyone who can replace a file can also write its checksum (docs/encoders.md). A
file whose bytes do not match its name is deleted and recomputed, with a warning
on stderr. Every file is written to a temporary name and renamed, so a killed
process leaves at worst a ``*.part`` file, which is never read; the name and the
bytes arrive together.
Chunks are also validated (shape, dtype, finite, unit norm) on every read.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from capgeo import _json
from capgeo._atomic import atomic_open, atomic_path
from capgeo.encoders.base import EncoderInfo
from capgeo.errors import CapgeoError

FORMAT_VERSION = 3   # 2: checksums in the file names; 3: bound to the entry's key
DEFAULT_CHUNK_ROWS = 256
TOKEN_COUNTS_STEM = "token_counts"
#: hex characters of sha256 kept in a file name (128 bits)
CHECKSUM_CHARS = 32
MANIFEST_FILE = "manifest.json"
STALE_PART_SECONDS = 3600


def default_cache_dir() -> Path:
    configured = os.environ.get("CAPGEO_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "capgeo"


def texts_digest(texts: Sequence[str]) -> str:
    """sha256 over the texts in order (CaptionSet.texts_digest's)."""
    from capgeo.captions.model import texts_sha256

    return texts_sha256(texts)


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


#: a temporary ``.<name>.part`` this much older than now belongs to no running writer (one writes a
#: chunk in seconds): a process killed outright (SIGKILL, power loss) left it, and it is removed
STALE_PART_SECONDS = 3600


def _sweep_stale_parts(entries) -> None:
    import time

    now = time.time()
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith(".part"):
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < now - STALE_PART_SECONDS:
                    os.unlink(entry.path)


class CacheEntry:
    """The cached embeddings of one key: ``n`` captions, vectors of ``width``."""

    def __init__(self, cache_dir: str | Path | None, key: str, n: int, width: int):
        # resolved: a link to a folder not made yet is followed (mkdir on the link itself meets "File exists")
        self.folder = Path(os.path.realpath(os.path.expanduser(cache_dir or default_cache_dir()))) / "embeddings" / key
        self.key = key
        self.n = n
        self.width = width
        self._counts_checksum: str | None = None
        self._chunk_names: dict[tuple[int, int], str] = {}
        # the folder's files by stem ("chunk-000000000-000000256" -> its "<stem>.<checksum>.npy"
        # names), listed once: a glob per chunk read the whole folder for every chunk, quadratic
        # in the chunks (12 s of directory listing for the 3,906 chunks of a million captions)
        self._names_by_stem: dict[str, list[str]] | None = None
        # set when a damaged file could not be deleted (an entry this user cannot change: a shared
        # cache): what is recomputed is then used without being written back, which would fail too
        self.read_only = False

    # token counts -------------------------------------------------------
    def load_token_counts(self) -> np.ndarray | None:
        for path, checksum, data in self._verified(TOKEN_COUNTS_STEM, "token counts", salt=self.key):
            counts = _parse_array(data)
            if counts is None or counts.shape != (self.n,) or not np.issubdtype(counts.dtype, np.integer):
                self._remove(path)
                continue
            self._counts_checksum = checksum
            return counts.astype(np.int64)
        return None

    def save_token_counts(self, counts: np.ndarray) -> None:
        data = _npy_bytes(np.asarray(counts, dtype=np.int64))
        self._counts_checksum = checksum = _checksum(data, self.key)
        self._write(TOKEN_COUNTS_STEM, f"{TOKEN_COUNTS_STEM}.{checksum}.npy", data)

    # vector chunks --------------------------------------------------------
    def _chunk_salt(self) -> str:
        # the key (which captions, which encoder) and the counts that fix the row order
        return f"{self.key}:{self._counts_checksum}"

    def _chunk_stem(self, start: int, stop: int) -> str:
        return f"chunk-{start:09d}-{stop:09d}"

    def load_chunk(self, start: int, stop: int) -> np.ndarray | None:
        """The chunk's vectors, or None when absent or not trustworthy (then it is deleted).

        Chunks are only trusted under the token counts they were ordered by, so the
        counts must have been loaded or saved first."""
        if self._counts_checksum is None:
            return None
        for path, _, data in self._verified(self._chunk_stem(start, stop), "vectors", salt=self._chunk_salt()):
            vectors = _parse_array(data)
            if vectors is None or not _valid_vectors(vectors, stop - start, self.width):
                self._remove(path)
                continue
            self._chunk_names[(start, stop)] = path.name
            return vectors
        return None

    def save_chunk(self, start: int, stop: int, vectors: np.ndarray) -> None:
        if self._counts_checksum is None:
            raise RuntimeError("save the token counts before the chunks they order")
        data = _npy_bytes(np.ascontiguousarray(vectors, dtype=np.float32))
        name = f"{self._chunk_stem(start, stop)}.{_checksum(data, self._chunk_salt())}.npy"
        self._write(self._chunk_stem(start, stop), name, data)
        self._chunk_names[(start, stop)] = name

    # manifest -------------------------------------------------------------
    def write_manifest(self, info: EncoderInfo, max_tokens: int, ranges: list[tuple[int, int]]) -> None:
        if self.read_only:
            return
        from capgeo import __version__

        manifest = {
            "format": FORMAT_VERSION, "key": self.key, "n": self.n, "width": self.width,
            "max_tokens": max_tokens, "encoder": info.to_dict(),
            "token_counts": f"{TOKEN_COUNTS_STEM}.{self._counts_checksum}.npy",
            "chunks": [self._chunk_names[(start, stop)] for start, stop in ranges],
            "capgeo": __version__, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        with atomic_open(self.folder / MANIFEST_FILE, remedy=CACHE_REMEDY) as handle:
            json.dump(manifest, handle, indent=2)
        self._remove_leftovers(set(manifest["chunks"]))

    def has_manifest(self) -> bool:
        try:
            manifest = _json.loads((self.folder / MANIFEST_FILE).read_text())
        except (OSError, ValueError):
            return False
        return manifest.get("key") == self.key and manifest.get("format") == FORMAT_VERSION

    # helpers --------------------------------------------------------------
    def _names(self, stem: str) -> list[str]:
        """Names ``<stem>.<checksum>.npy`` in the folder, as listed once per entry."""
        if self._names_by_stem is None:
            self._names_by_stem = {}
            try:
                scanned = list(os.scandir(self.folder))
            except OSError:   # no folder yet (or unreadable: then nothing is cached)
                scanned = []
            entries = [entry.name for entry in scanned]
            _sweep_stale_parts(scanned)
            for name in entries:
                parts = name.split(".")
                if len(parts) == 3 and parts[2] == "npy" and parts[0]:
                    self._names_by_stem.setdefault(parts[0], []).append(name)
        return sorted(self._names_by_stem.get(stem, ()))

    def _remove(self, path: Path) -> bool:
        """Delete a file of the entry; False when this user cannot (a shared cache, a read-only
        mount): the file is left where it is, and no longer listed."""
        removed = True
        try:
            path.unlink(missing_ok=True)
        except OSError:
            removed = False
        stem = path.name.split(".")[0]
        if self._names_by_stem is not None and path.name in self._names_by_stem.get(stem, ()):
            self._names_by_stem[stem].remove(path.name)
        return removed

    def check_writable(self) -> None:
        """Before encoding what is missing: an existing entry this user cannot write to (a shared
        cache) is read-only for this run, with a warning, instead of the first chunk's write failing
        after the encoding. (A missing entry is made by the first write; the cache folder itself is
        checked before any work.)"""
        if self.read_only or not self.folder.is_dir():
            return
        probe = self.folder / f".probe-{os.getpid()}.part"
        try:
            probe.touch()
            probe.unlink()
        except OSError as error:
            self.read_only = True
            _warn(f"cannot write to the embedding cache entry {self.folder} ({error.strerror or error}): "
                  "what is encoded is used without being cached")

    def _verified(self, stem: str, what: str, salt: str = ""):
        """(path, checksum, bytes) of each ``<stem>.<checksum>.npy`` whose bytes match the
        checksum in its name; the others are deleted, with a warning."""
        for path in (self.folder / name for name in self._names(stem)):
            named = path.name.split(".")[-2]
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if _checksum(data, salt) != named:
                _warn(f"the embedding cache file {path} fails its checksum (damaged, copied from another "
                      f"entry, or written for other token counts); recomputing its {what}")
                if not self._remove(path) and not self.read_only:
                    self.read_only = True
                    _warn(f"cannot delete it from {self.folder}: what is recomputed is used without being cached")
                continue
            yield path, named, data

    def _write(self, stem: str, name: str, data: bytes) -> None:
        """Write ``data`` as ``name`` and remove the other ``<stem>.<checksum>.npy`` files
        (earlier versions of the same file)."""
        if self.read_only:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CapgeoError(f"cannot write the embedding cache {self.folder}: {error.strerror or error}; "
                              "pass --cache-dir FOLDER or --no-cache") from None
        with atomic_path(self.folder / name, remedy=CACHE_REMEDY) as tmp:
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        for old in self._names(stem):
            if old != name:
                self._remove(self.folder / old)
        self._names_by_stem.setdefault(stem, [])
        if name not in self._names_by_stem[stem]:
            self._names_by_stem[stem].append(name)

    def _remove_leftovers(self, chunk_names: set[str]) -> None:
        # chunks cut at other boundaries (another chunk size) are never read again
        for chunk in self.folder.glob("chunk-*.npy"):
            if chunk.name not in chunk_names:
                self._remove(chunk)
        # temporaries of killed runs; recent ones may belong to a concurrent run
        now = time.time()
        for part in self.folder.glob(".*.part"):
            try:
                if now - part.stat().st_mtime > STALE_PART_SECONDS:
                    part.unlink()
            except OSError:
                pass


CACHE_REMEDY = "pass --cache-dir FOLDER on another disk, or --no-cache"


def _checksum(data: bytes, salt: str = "") -> str:
    digest = hashlib.sha256(salt.encode())
    digest.update(data)
    return digest.hexdigest()[:CHECKSUM_CHARS]


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _parse_array(data: bytes) -> np.ndarray | None:
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None


def _warn(message: str) -> None:
    print(f"Warning: {message}", file=sys.stderr)


def _valid_vectors(vectors: np.ndarray, rows: int, width: int) -> bool:
    if vectors.dtype != np.float32 or vectors.shape != (rows, width):
        return False
    if not np.isfinite(vectors).all():
        return False
    norms = np.linalg.norm(vectors, axis=1)
    return bool(np.all(np.abs(norms - 1.0) < 1e-3))
