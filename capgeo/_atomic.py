"""Atomic file writes: a reader never sees a half-written output file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from capgeo.errors import CapgeoError


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(target: str | os.PathLike) -> None:
    """Fail before the work, not after it, when ``target`` cannot be written (creates nothing)."""
    target = Path(target)
    if target.is_dir():
        raise CapgeoError(f"cannot write {target}: it is a folder")
    folder = target.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise CapgeoError(f"cannot write {target}: {folder} is not a writable folder")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it over ``target`` on success.

    On any exception the temporary file is removed and ``target`` is untouched.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as error:  # a file where a folder should be, no permission, read-only disk
        raise CapgeoError(f"cannot write {target}: {error.strerror or error}") from None
    os.close(fd)
    # mkstemp creates 0600; give the output the permissions a plain open() would
    os.chmod(tmp, 0o666 & ~_current_umask())
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file for writing; it replaces ``target`` only if the block succeeds."""
    if "b" in mode:
        encoding = None
    with atomic_path(target) as tmp:
        with open(tmp, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
