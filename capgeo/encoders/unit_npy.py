"""A float32 ``.npy`` of caption vectors read in one pass: hashed, checked and normalised.

At a million 768-wide captions the file is 3 GB, and reading it the plain way touched it
four times: ``np.load`` (a fresh 3 GB array), a sha256 of the file for the encoder's
fingerprint (the whole file read again), the float64 row norms, and the normalised copy
(a second fresh 3 GB array). Here the file is mapped (privately: copy on write) and walked
once, in chunks: another thread hashes each chunk while this one computes its rows'
norms, and rows that are not of unit length are rescaled in place once their chunk is
hashed. On this project's 2-core machine that took the vectors of a 1,000,000-caption
profile from 13-22 s to 1.7 s (docs/geometry.md).

The digest is of the bytes as mapped, and a file whose size or modification time
changes while it is walked is refused (reading it twice could pair the vectors of one
version with the name of another). Replace a vector file by writing a new one and
renaming it over the old, as capgeo's own writers do: a file rewritten in place under a
running command is unsafe with any reader, and one cut short under this map ends the
command (the kernel's SIGBUS), though it never changes the file.

Only little-endian float32, C-ordered, 2-D files take this path (what `capgeo encode -o`
and ``np.save`` of float32 vectors write); anything else goes the general way.
"""

from __future__ import annotations

import hashlib
import math
import os
import tokenize
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capgeo.encoders.base import UNIT_NORM_TOLERANCE
from capgeo.errors import EncoderError

#: bytes per chunk: small enough to stay in the last-level cache between the norm and the hash
CHUNK_BYTES = 8 << 20


@dataclass
class UnitRows:
    """Vectors of a ``.npy`` file, rows of unit length, and what was wrong with any row."""

    vectors: np.ndarray          # (N, d) float32, unit rows (rows listed below left as stored)
    sha256: str                  # of the whole file, header included
    not_finite: np.ndarray       # rows holding NaN or inf
    zero: np.ndarray             # all-zero rows


#: what numpy's header parser raises on a damaged header: its tokenizer's error among them
HEADER_ERRORS = (ValueError, SyntaxError, tokenize.TokenError, EOFError, TypeError, UnicodeDecodeError,
                 RecursionError)


@dataclass(frozen=True)
class NpyHeader:
    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype
    offset: int                  # where the array's bytes start

    @property
    def nbytes(self) -> int:
        """The bytes the array needs, as Python integers (no overflow however large the shape)."""
        return math.prod(self.shape) * self.dtype.itemsize


def read_npy_header(handle, path, holds: int, name: str = "") -> NpyHeader | None:
    """The header of the ``.npy`` stream ``handle`` (at its start), checked to be readable and to
    claim no more bytes than ``holds`` (what the file, or a ``.npz`` member, can hold after the
    header): numpy allocates the shape a header claims before reading, so a 2 KB file claiming
    (120, 2^25) would take 16 GB. ``name``: the array's name inside a ``.npz``, for messages.
    None when the stream is no ``.npy`` at all (numpy's own reader says what it is instead)."""
    what = f"the {name!r} array's" if name else "the .npy"
    where = f"{path}: cannot read vectors: {what}"
    start = handle.read(len(np.lib.format.MAGIC_PREFIX))
    if start != np.lib.format.MAGIC_PREFIX:
        return None
    handle.seek(0)
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version in ((2, 0), (3, 0)):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            raise ValueError(f"format version {version[0]}.{version[1]}, where numpy writes 1.0 to 3.0")
    except HEADER_ERRORS as error:
        text = error.args[0] if isinstance(error, tokenize.TokenError) and error.args else str(error)
        # numpy quotes the whole header, padding included: squeezed and cut to stay one short line
        reason = " ".join(str(text).split())[:120] or type(error).__name__
        raise EncoderError(f"{where} header is damaged ({reason}); expected a file written by numpy.save") from None
    header = NpyHeader(tuple(int(n) for n in shape), bool(fortran_order), dtype, handle.tell())
    if not dtype.hasobject and header.nbytes > holds - header.offset:
        raise EncoderError(f"{path}: cannot read vectors: the file is cut short or its header damaged ({what} header "
                           f"claims shape {header.shape} of {dtype}, {header.nbytes:,} bytes, more than the file holds: "
                           f"{max(holds - header.offset, 0):,} bytes after its header)")
    return header


def fast_path_header(path: str | Path) -> tuple[tuple[int, int], int] | None:
    """(shape, data offset) when the file is a plain 2-D little-endian float32 C-order array,
    else None (the caller reads it the general way, which also explains what is wrong). A damaged
    header, or one claiming more than the file holds, is an EncoderError here."""
    try:
        with open(path, "rb") as handle:
            header = read_npy_header(handle, path, os.fstat(handle.fileno()).st_size)
    except OSError:
        return None
    if header is None:
        return None
    shape = header.shape
    if header.fortran_order or header.dtype != np.dtype("<f4") or len(shape) != 2 or 0 in shape:
        return None
    return (shape[0], shape[1]), header.offset


def read_unit_rows(path: str | Path, shape: tuple[int, int], offset: int) -> UnitRows:
    """Map, hash and normalise the file whose header :func:`fast_path_header` parsed."""
    path = Path(path)
    before = os.stat(path)
    expected = offset + shape[0] * shape[1] * 4
    if before.st_size < expected:
        raise EncoderError(f"{path}: cannot read vectors: the file is cut short ({before.st_size:,} bytes, "
                           f"its header promises {expected:,})")
    # a private (copy-on-write) map of the file's pages: no fresh 3 GB array to fault in and
    # fill (on a virtual machine that cost more than everything else here), and rows rescaled
    # below are copied page by page into this process, never written to the file
    try:
        vectors = np.memmap(path, dtype="<f4", mode="c", offset=offset, shape=shape)
    except (OSError, ValueError):
        # a file system that cannot map files: read it into memory instead
        vectors = np.fromfile(path, dtype="<f4", count=shape[0] * shape[1], offset=offset).reshape(shape)
    rows_per_chunk = max(1, CHUNK_BYTES // (shape[1] * 4))
    digest = hashlib.sha256()
    not_finite, zero = [], []
    # hashlib releases the GIL on large buffers, so one worker hashes chunk i while this
    # thread computes the norms of chunk i + 1; chunks are hashed in order
    with open(path, "rb") as handle, ThreadPoolExecutor(max_workers=1) as hasher:
        digest.update(handle.read(offset))
        pending = None   # (hash future, start row, rows to rescale, their norms) of the previous chunk
        for start in range(0, shape[0], rows_per_chunk):
            chunk = vectors[start:start + rows_per_chunk]
            hashed = hasher.submit(digest.update, memoryview(chunk).cast("B"))
            norms, bad, zeros, rescale = check_rows(chunk)
            not_finite.append(bad + start)
            zero.append(zeros + start)
            _rescale(vectors, pending)
            pending = (hashed, start, rescale, norms[rescale])
        _rescale(vectors, pending)
        # bytes past the array are part of the file, so part of its fingerprint
        handle.seek(expected)
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    after = os.stat(path)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise EncoderError(f"{path}: the file changed while it was read; run again once it is complete")
    # a plain ndarray over the map (slices and pickles of a np.memmap stay np.memmap)
    return UnitRows(np.asarray(vectors), digest.hexdigest(), np.concatenate(not_finite), np.concatenate(zero))


def check_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(float64 norms, rows holding NaN or inf, all-zero rows, rows to rescale) of a block of
    rows; the three index arrays count from the block's first row. Rows within
    UNIT_NORM_TOLERANCE of unit length are not to rescale: they are kept bit for bit."""
    if rows.dtype.kind == "f" and rows.dtype.itemsize > 4:
        norms = _wide_float_norms(rows)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    # squares of float32 values cannot overflow float64, so a row's norm is finite exactly
    # when all its values are: no second pass over the block (one would take twice the einsum's time)
    finite = np.isfinite(norms)
    rescale = np.flatnonzero(finite & (np.abs(norms - 1.0) > UNIT_NORM_TOLERANCE) & (norms > 0))
    return norms, np.flatnonzero(~finite), np.flatnonzero(finite & (norms == 0)), rescale


def _wide_float_norms(rows: np.ndarray) -> np.ndarray:
    """Norms of float64 rows, each scaled by its largest magnitude first, so values whose
    squares overflow (1e200) or vanish (1e-200) in float64 still have their finite, non-zero norm."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        largest = np.max(np.abs(rows), axis=1).astype(np.float64)
        scale = np.where(np.isfinite(largest) & (largest > 0), largest, 1.0)
        scaled = rows / scale[:, None]
        norms = scale * np.sqrt(np.einsum("ij,ij->i", scaled, scaled, dtype=np.float64))
    return np.where(np.isfinite(largest), norms, np.inf)


def rescaled(rows: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """``rows`` divided by their float64 ``norms``, in float32."""
    return (rows.astype(np.float64) / norms[:, None]).astype(np.float32)


def _rescale(vectors: np.ndarray, pending) -> None:
    """Rescale a chunk's off-unit rows once its bytes are hashed (the digest is of the file as stored)."""
    if pending is None:
        return
    hashed, start, rows, norms = pending
    hashed.result()
    if rows.size:
        rows = rows + start
        vectors[rows] = rescaled(vectors[rows], norms)
