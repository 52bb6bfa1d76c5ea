"""Facts about large weight files, computed once and remembered in the cache folder.

Hashing a 1.7 GB checkpoint takes seconds, and reading its shapes needs torch;
both are needed on every run only to name the encoder (cache key, provenance).
So they are remembered in ``<cache dir>/weight-files.json``, keyed by the file's
resolved path, size, modification and status-change times (ns): a second run hashes
nothing and imports no torch, and a file rewritten in place is seen as new, even one of
the same size whose mtime was set back (its ctime cannot be). The memo is an
optimisation only: when it cannot be read or written, facts are computed again.

The file holds ``{"checksum": ..., "files": {...}}``, the checksum a sha256 of the records as
written, as the cache's manifest is checksummed: a memo that was edited, damaged or cut short
fails it and is ignored and rebuilt, never trusted (an edited fingerprint would otherwise name
checkpoint A with checkpoint B's fingerprint, and serve B's cached vectors for A).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

from capgeo import _json
from capgeo.encoders.base import _file_sha256, file_version

MEMO_FILE = "weight-files.json"
MEMO_LIMIT = 256  # files remembered; the oldest entries are dropped beyond that


def weight_fingerprint(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None, *,
                       meanwhile: Callable[[], object] | None = None) -> str:
    """sha256 of the file, hashed once per (path, size, mtime, ctime).

    When the file must be hashed, ``meanwhile()`` (e.g. importing the model code, which a run
    that hashes will almost always need next) runs in this thread while another hashes:
    hashlib releases the GIL on large blocks, so the seconds of both overlap."""
    def hash_overlapped():
        if meanwhile is None:
            return _hash(path)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            digest = pool.submit(_hash, path)
            meanwhile()
            return digest.result()

    return weight_facts(path, "sha256", hash_overlapped, cache_dir, valid=_is_sha256)


def weight_facts(path: str | os.PathLike, name: str, compute: Callable[[], object],
                 cache_dir: str | os.PathLike | None = None, *, valid: Callable[[object], bool] | None = None):
    """``compute()`` (JSON-serialisable) for this version of the file, remembered under ``name``.

    ``valid(value)`` says whether a remembered value has the shape ``compute`` gives (see
    :func:`record_of`): one that does not (an edited memo, another capgeo version's) is
    computed again, never used."""
    resolved = str(Path(path).resolve())
    stat = os.stat(resolved)
    memo_path = _memo_path(cache_dir)
    known = _record(_read(memo_path), resolved, stat)["facts"]
    if name in known and (valid is None or valid(known[name])):
        return known[name]
    value = compute()
    memo = _read(memo_path)  # again: compute() may have remembered other facts meanwhile
    record = _record(memo, resolved, stat)
    record["facts"][name] = value
    memo.pop(resolved, None)
    memo[resolved] = record            # most recent last, so trimming drops the oldest
    while len(memo) > MEMO_LIMIT:
        memo.pop(next(iter(memo)))
    _write(memo_path, memo)
    return value


def version_of(path: str | os.PathLike) -> tuple[int, int, int]:
    """The file's (size, mtime, ctime): taken before its fingerprint, checked after its weights are read."""
    return file_version(os.stat(Path(path).resolve()))


def check_unchanged(path: str | os.PathLike, version: tuple[int, int, int]) -> None:
    """Refuse weights read from a file that changed after its fingerprint was taken (a checkpoint a
    training run overwrote meanwhile): their vectors would be cached and reported under the old
    weights' name, and every later cache hit would serve them as those."""
    from capgeo.errors import EncoderError

    try:
        now = version_of(path)
    except OSError:
        now = None
    if now != version:
        raise EncoderError(f"{path} changed while capgeo was reading it (its size or times differ from when it "
                           "was fingerprinted); run again once it is no longer being written")


def record_of(**types) -> Callable[[object], bool]:
    """A ``valid`` for :func:`weight_facts`: a dict with exactly these keys, each value of its
    type(s) (``None`` for a key that may be null)."""
    def valid(value) -> bool:
        if not isinstance(value, dict) or set(value) != set(types):
            return False
        for key, allowed in types.items():
            allowed = allowed if isinstance(allowed, tuple) else (allowed,)
            if not any(value[key] is None if kind is None else _is_of(value[key], kind) for kind in allowed):
                return False
        return True

    return valid


def _is_of(value, kind) -> bool:
    # True and False are ints to isinstance: a memo saying width true would read as "width 1"
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _is_sha256(value) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _record(memo: dict, resolved: str, stat: os.stat_result) -> dict:
    """The memo's record for this version of the file (a new empty one when size, mtime or ctime differ)."""
    record = memo.get(resolved)
    size, mtime_ns, ctime_ns = file_version(stat)
    if not isinstance(record, dict) or (record.get("size"), record.get("mtime_ns"), record.get("ctime_ns")) != (
            size, mtime_ns, ctime_ns):
        record = {"size": size, "mtime_ns": mtime_ns, "ctime_ns": ctime_ns, "facts": {}}
    if not isinstance(record.get("facts"), dict):
        record["facts"] = {}
    return record


def _hash(path) -> str:
    stat = os.stat(path)
    return _file_sha256(os.fspath(path), *file_version(stat))


def _memo_path(cache_dir) -> Path:
    from capgeo.encoders.cache import default_cache_dir

    # "~" expanded as the cache entries expand it: `--cache-dir=~/c` (no shell expansion after "=")
    # would read ./~/c/weight-files.json, miss every time, and write the real one back with one record
    return Path(os.path.expanduser(cache_dir or default_cache_dir())) / MEMO_FILE


def _read(path: Path) -> dict:
    """The memo's records; {} for a memo that is missing, unreadable or fails its checksum."""
    try:
        memo = _json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(memo, dict) or not isinstance(memo.get("files"), dict):
        return {}
    return memo["files"] if memo.get("checksum") == _checksum(memo["files"]) else {}


def _checksum(files: dict) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _write(path: Path, memo: dict) -> None:
    from capgeo._atomic import atomic_open
    from capgeo.errors import CapgeoError

    try:
        with atomic_open(path) as handle:
            json.dump({"checksum": _checksum(memo), "files": memo}, handle)
    except (OSError, CapgeoError):
        pass  # a read-only cache folder only means the next run computes again
