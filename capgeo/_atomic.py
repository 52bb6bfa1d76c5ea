"""Atomic file writes: a reader never sees a half-written output file.

Also the one place where an operating-system error on writing (full disk,
quota, no permission, read-only file system) becomes a one-line CapgeoError
naming the path and what to free or change: every writer (outputs, the
embedding cache, reports) goes through ``atomic_path``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterator

from capgeo.errors import CapgeoError


def write_all(stream: IO, data: bytes) -> None:
    """Write ``data`` to ``stream`` in full, or raise the OSError that stopped it.

    A buffered write of a large block that the disk cuts short (``> file`` on a disk that fills)
    returns the short count, which nothing checks: the output would end mid-row with status 0. Written
    straight to the descriptor, the short write is seen and the next write raises ENOSPC."""
    if stream is None:  # stdout closed (`>&-`): the data asked for would be lost without a word
        raise CapgeoError("cannot write the output: standard output is closed")
    stream.flush()
    try:
        # only a real file object's descriptor: a notebook's output stream has one too, a copy of
        # the kernel's own stdout, where a write would bypass the notebook
        if not isinstance(stream, (io.TextIOWrapper, io.BufferedWriter, io.FileIO)):
            raise io.UnsupportedOperation
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        # an in-memory stream (tests, notebooks): nothing to cut short
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            stream.write(data.decode("utf-8"))
        return
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


def stream_target(target: str | os.PathLike) -> str | None:
    """``target`` as given (``~`` expanded) when it is a stream rather than a file: a device
    (/dev/null), a FIFO or socket, or a standard stream's name (/dev/stdout, /dev/fd/N, which
    ``>(jq .)`` gives). Such a target is written into directly: a temporary file renamed over it
    would replace the device or FIFO with a regular file (as root, /dev/null itself), and the
    name of a process's stream resolves to nothing another process can open."""
    text = os.path.expanduser(os.fspath(target))
    if descriptor_of(text) is not None:
        return text
    try:
        mode = os.stat(text).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else text


def descriptor_of(target: str | os.PathLike) -> int | None:
    """The descriptor an output's name stands for (/dev/stdout: 1, /dev/fd/7: 7), or None."""
    text = os.path.expanduser(os.fspath(target))
    named = {"/dev/stdout": 1, "/dev/stderr": 2}
    if text in named:
        return named[text]
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if text.startswith(prefix) and text[len(prefix):].isdigit():
            return int(text[len(prefix):])
    return None


def redirected_to_a_file(target: str | os.PathLike | None) -> bool:
    """Is ``target`` a descriptor's name (/dev/stdout) whose descriptor is a regular file? A writer
    that opens such a name truncates the file and writes from its start."""
    descriptor = descriptor_of(target) if target is not None else None
    try:
        return descriptor is not None and stat.S_ISREG(os.fstat(descriptor).st_mode)
    except OSError:
        return False


def refuse_redirected_to_a_file(target: str | os.PathLike | None, shown=None) -> None:
    """A writer that opens the name of a descriptor redirected to a file (/dev/stdout > log) would
    truncate the file and write from its start: refused, in one line."""
    if redirected_to_a_file(target):
        raise CapgeoError(f"cannot write {target if shown is None else shown}: it is redirected to a file here; "
                          "give that file's name")


def is_standard_output(target: str | os.PathLike | None) -> bool:
    """``-``, or a name of this process's standard output (/dev/stdout, /dev/fd/1)."""
    return target == "-" or (target is not None and descriptor_of(target) == 1)


def _open_descriptor(descriptor: int, mode: str, encoding: str | None) -> IO:
    """A file object on a copy of ``descriptor``: it writes where the descriptor is (a file that
    stdout was redirected to, appended to by ``>>``), where reopening its name truncated the file
    and wrote from its start."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.fileno() == descriptor:
                stream.flush()
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            pass
    # (fdopen does not truncate: only opening a name does)
    return os.fdopen(os.dup(descriptor), mode, encoding=encoding)


#: the key of the mark capgeo writes into its Parquet files' key-value metadata, and the name of
#: the array that marks its .npz files; the value is ``output_mark()`` (capgeo.paths.written_by_capgeo
#: reads the marks)
MARK_KEY = "capgeo"


def output_mark() -> str:
    """The mark capgeo writes into every output format that can hold one: ``capgeo VERSION``."""
    from capgeo import __version__

    return f"capgeo {__version__}"


def generator_meta(mark: str | None = None) -> str:
    """The <meta> element that marks an HTML page as capgeo's (``mark``: ``output_mark()``)."""
    return f'<meta name="generator" content="{output_mark() if mark is None else mark}">'


def html_page_start(mark: str | None = None) -> str:
    """The first bytes of every HTML page capgeo writes, its generator mark last. The mark counts
    only here (capgeo.paths.written_by_capgeo): a user's page that quotes the element in a comment
    or a script, or moves it, is not taken for capgeo's."""
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"{generator_meta(mark)}\n")


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(target: str | os.PathLike) -> None:
    """Fail before the work, not after it, when ``target`` cannot be written (creates nothing)."""
    stream = stream_target(target)
    if stream is not None:
        descriptor = descriptor_of(stream)
        if descriptor is not None:
            try:
                os.fstat(descriptor)
            except OSError:
                raise CapgeoError(f"cannot write {target}: descriptor {descriptor} is not open") from None
        elif not os.access(stream, os.W_OK):
            raise CapgeoError(f"cannot write {target}: you have no permission to write to it")
        return
    shown, target = target, _normalised(target)
    folder = target.parent
    try:
        while not folder.exists():
            folder = folder.parent
    except OSError as error:  # a folder name longer than the file system allows
        raise write_error(shown, error) from None
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if len(os.fsencode(target.name)) > name_max:  # else refused only by the rename, after the work
        raise CapgeoError(f"cannot write {shown}: the file name is longer than this file system allows "
                          f"({name_max} bytes)")
    if target.is_dir():
        raise CapgeoError(f"cannot write {shown}: it is a folder")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise CapgeoError(f"cannot write {shown}: {folder} is not a writable folder")
    # permissions do not tell it all (root passes os.access; a read-only mount, /sys, a full
    # quota): create and remove a file there, as the atomic write will
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".capgeo-write-check-")
    except OSError as error:
        raise write_error(shown, error) from None
    os.close(handle)
    os.unlink(probe)


def _normalised(target: str | os.PathLike) -> Path:
    """The path that will be written, resolved as the file system resolves it: links first, then
    ``..``, so ``link/../x`` is beside the link's target, as the clash checks (which follow links)
    see it; resolved by name, it would be a file beside the link, a dataset they never compare. An
    output that is a link is written through to its target. Missing folders are taken by name:
    creating them on the way would make ``missing`` for ``missing/../x``. A name ending in a slash
    is a folder, not a file."""
    text = os.fspath(target)
    if text.endswith(("/", os.sep)) or os.path.basename(text) in (".", ".."):
        raise CapgeoError(f"cannot write {text}: that names a folder; give a file name")
    stream = stream_target(text)
    if stream is not None:
        return Path(stream)
    try:
        return Path(os.path.realpath(os.path.expanduser(text), strict=False))
    except OSError as error:  # links in a loop (Python 3.13+ raises here; older ones return the loop)
        raise write_error(text, error) from None


def written_path(target: str | os.PathLike) -> Path:
    """Where a write to ``target`` lands (``~`` expanded, links followed): for "Wrote ..." lines."""
    return _normalised(target)


#: bytes of the output's name kept in its temporary file's name
MAX_PART_NAME_HEAD = 200


def _write_os_error(error: BaseException, folder: Path) -> OSError | None:
    """The OSError with a known errno behind a failed write into ``folder``, if it is one: writers
    report it differently (numpy's short write is an OSError without errno; polars raises its own
    ComputeError naming "os error 28")."""
    import re
    import shutil

    if isinstance(error, OSError) and error.errno in WRITE_ERROR_ADVICE:
        return error
    message = str(error)
    short = re.search(r"(\d+) requested and (\d+) written", message)
    if isinstance(error, OSError) and error.errno is None and short:
        # numpy's tofile: a full disk, or a file-size limit (ulimit -f, FAT32's 4 GB) with room left
        missing = int(short.group(1)) - int(short.group(2))
        try:
            full = shutil.disk_usage(folder).free < missing + (1 << 20)
        except OSError:
            full = True
        code = errno.ENOSPC if full else errno.EFBIG
        return OSError(code, os.strerror(code))
    found = re.search(r"os error (\d+)\)", message)
    if found and int(found.group(1)) in WRITE_ERROR_ADVICE:
        return OSError(int(found.group(1)), os.strerror(int(found.group(1))))
    return None


#: errno -> what the user can do about it
WRITE_ERROR_ADVICE = {
    errno.ENOSPC: "free space on that disk or write somewhere else",
    errno.EDQUOT: "free space within your disk quota or write somewhere else",
    errno.EFBIG: "the file is larger than that file system allows; write somewhere else",
    errno.EACCES: "you have no permission to write there; change the folder's permissions or write somewhere else",
    errno.EPERM: "the operation is not permitted there; write somewhere else",
    errno.EROFS: "that file system is read-only; write somewhere else",
    errno.EISDIR: "a folder of that name is in the way; remove or rename it",
}


def write_error(target: str | os.PathLike, error: OSError, remedy: str | None = None) -> CapgeoError:
    """The one-line error for an OSError met while writing ``target``."""
    advice = WRITE_ERROR_ADVICE.get(error.errno, "write somewhere else")
    if remedy:
        advice = f"{advice} ({remedy})"
    return CapgeoError(f"cannot write {target}: {error.strerror or error}; {advice}")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, remedy: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it over ``target`` on success.

    On any exception the temporary file is removed and ``target`` is untouched; an
    OSError raised while writing becomes a one-line CapgeoError (``write_error``),
    with ``remedy`` added to its advice. A missing folder is created, and said so
    on stderr.
    """
    shown, target = target, _normalised(target)
    if stream_target(target) is not None:
        # nothing to rename over: written into directly (a reader of a stream sees it as it comes anyway)
        refuse_redirected_to_a_file(target, shown)
        with _write_errors_in_one_line(shown, target.parent, remedy):
            yield target
        return
    try:
        if not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            given = os.path.normpath(os.path.dirname(os.path.expanduser(os.fspath(shown))) or ".")
            # the folder the user named, or where a link led when that is elsewhere
            made = given if os.path.realpath(given) == str(target.parent) else str(target.parent)
            print(f"Note: created the folder {made}", file=sys.stderr)
        head = part_name_head(target.name)
        fd, tmp = tempfile.mkstemp(prefix=f".{head}.", suffix=".part", dir=target.parent)
    except OSError as error:  # a file where a folder should be, no permission, read-only disk
        raise write_error(shown, error, remedy) from None
    tmp_path = Path(tmp)
    # from the moment the file exists: a signal during close or chmod must not leave it behind
    with _write_errors_in_one_line(shown, target.parent, remedy, on_failure=lambda: tmp_path.unlink(missing_ok=True)):
        try:
            # held while the file is written: another run's clean-up leaves a live write's file alone
            _lock(fd)
            remove_stale_parts(target, keep=tmp_path)
            # mkstemp creates 0600; give the output the permissions a plain open() would
            os.chmod(tmp, 0o666 & ~_current_umask())
            yield tmp_path
            os.replace(tmp_path, target)
        finally:
            os.close(fd)


def part_name_head(name: str) -> str:
    """The part of an output's name its temporary files start with (after a dot): the name's head
    only, cut by bytes, since a name near the 255-byte limit plus the prefix and suffix would not fit."""
    return os.fsencode(name)[:MAX_PART_NAME_HEAD].decode("utf-8", errors="ignore")


#: seconds a temporary file must be unchanged before another run may take it for a killed write's
STALE_PART_AGE = 5.0
#: mkstemp's random part: 8 of these characters
_MKSTEMP_NAME = "[a-z0-9_]{8}"


def remove_stale_parts(target: Path, keep: Path | None = None) -> list[Path]:
    """Remove the temporary files of earlier writes of ``target`` that were killed before their
    rename (kill -9, a power cut): files named as atomic_path names them, ``.NAME.XXXXXXXX.part``
    beside ``target``, that no live write holds locked. Returns those removed."""
    import re
    import time

    pattern = re.compile(re.escape(f".{part_name_head(target.name)}.") + _MKSTEMP_NAME + re.escape(".part"))
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        if not pattern.fullmatch(entry.name) or (keep is not None and entry.path == str(keep)):
            continue
        try:
            # a file made this instant may be a live write that has not taken its lock yet
            if not entry.is_file(follow_symlinks=False) or time.time() - entry.stat().st_mtime < STALE_PART_AGE:
                continue
            descriptor = os.open(entry.path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if _lock(descriptor, wait=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass  # removed by another run meanwhile, or a folder we may read but not change
        finally:
            os.close(descriptor)
    return removed


def _lock(descriptor: int, wait: bool = True) -> bool:
    """An exclusive advisory lock on an open file (released when it is closed); False when
    another process holds it. Where there is no flock (Windows), every file counts as unlocked
    only when it is at least a day old, so a live write elsewhere is never taken for stale."""
    try:
        import fcntl
    except ImportError:
        import time

        return wait or time.time() - os.fstat(descriptor).st_mtime > 86400
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks (some network mounts): never taken for stale
        return wait
    return True


@contextlib.contextmanager
def _write_errors_in_one_line(shown, folder: Path, remedy: str | None, on_failure=None) -> Iterator[None]:
    """Inside the block, a failed write (a full disk, no permission, ...) becomes ``write_error``'s
    one line; ``on_failure()`` runs first on any exception (a temporary file removed)."""
    try:
        yield
    except BaseException as error:
        if on_failure is not None:
            on_failure()
        disk_error = _write_os_error(error, folder)
        if disk_error is not None:
            raise write_error(shown, disk_error, remedy) from None
        raise


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8",
                remedy: str | None = None) -> Iterator[IO]:
    """Open a temporary file for writing; it replaces ``target`` only if the block succeeds."""
    if "b" in mode:
        encoding = None
    descriptor = descriptor_of(target)
    if descriptor is not None:
        # /dev/stdout and the like: written where the descriptor is, not reopened by name
        handle = _open_descriptor(descriptor, mode, encoding)
        try:
            with _write_errors_in_one_line(target, Path("."), remedy):
                yield handle
                handle.flush()
        finally:
            with contextlib.suppress(OSError):
                handle.close()
        return
    with atomic_path(target, remedy=remedy) as tmp:
        with open(tmp, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            if stream_target(tmp) is None:  # a pipe or device cannot be synced (EINVAL)
                os.fsync(handle.fileno())
