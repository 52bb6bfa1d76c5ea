"""Vectors computed elsewhere, read from .npy, .npz or Parquet, and the
writer `capgeo encode -o` uses, so an export loads back as an encoder.

Layouts:
- ``.npy``: an (N, d) array, row i for caption i.
- ``.npz``: ``vectors`` (N, d) and optionally ``ids`` (N,) caption ids.
- ``.parquet``: one list/array column of floats (``vector`` or ``embedding``, or the
  only such column) and optionally a ``caption_id`` (or ``id``) column.

With ids, vectors are matched to captions by caption id (extra ids are
ignored, missing ones are an error); without, by row (counts must match).
Token counts are unknown: they are reported as -1 and the context length as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from capgeo.encoders.base import EncoderInfo, file_fingerprint
from capgeo.encoders.unit_npy import check_rows, fast_path_header, read_npy_header, read_unit_rows, rescaled
from capgeo.errors import EncoderError

KIND = "precomputed"
VECTOR_COLUMNS = ("vector", "embedding", "vectors", "embeddings")
ID_COLUMNS = ("caption_id", "id")
UNKNOWN_TOKEN_COUNT = -1
NORMALISE_CHUNK_ROWS = 65536


@dataclass(frozen=True)
class VectorNames:
    """Which arrays (.npz) and columns (.parquet) hold the vectors and their ids, in order of preference."""

    npz_vectors: tuple[str, ...]
    npz_ids: tuple[str, ...]
    parquet_vectors: tuple[str, ...]
    parquet_ids: tuple[str, ...]


#: caption vectors: .npz `vectors` + `ids`; .parquet a vector column + `caption_id`/`id`
CAPTION_VECTOR_NAMES = VectorNames(("vectors",), ("ids",), VECTOR_COLUMNS, ID_COLUMNS)


@dataclass
class VectorFile:
    vectors: np.ndarray          # (N, d) float32 as stored (not yet normalised)
    ids: list[str] | None        # caption ids, or None when aligned by row


def read_vector_file(path: str | Path, names: VectorNames = CAPTION_VECTOR_NAMES) -> VectorFile:
    """Vectors, and their ids when the file has them, from .npy, .npz or .parquet, checked
    to be one real (N, d) array with unique ids."""
    path = Path(path)
    if not path.is_file():
        # "not found: PATH" kept first: scripts and the docs match on it
        raise EncoderError(f"vector file not found: {path}" if not path.is_dir()
                           else f"vector file {path} is a folder, not a file")
    suffix = path.suffix.lower()
    import zipfile
    import zlib

    from polars.exceptions import PolarsError

    if suffix in (".npy", ".npz", ".parquet") and path.stat().st_size == 0:
        raise EncoderError(f"{path}: cannot read vectors: the file is empty (0 bytes)")
    try:
        if suffix == ".npy":
            with open(path, "rb") as handle:
                read_npy_header(handle, path, path.stat().st_size)
            stored = VectorFile(np.load(path, allow_pickle=False), None)
        elif suffix == ".npz":
            stored = _read_npz(path, names)
        elif suffix == ".parquet":
            stored = _read_parquet(path, names)
        else:
            raise EncoderError(f"{path}: vector files must end in .npy, .npz or .parquet")
    # a damaged .npz is a damaged zip archive (BadZipFile: bad CRC, not a zip; zlib.error inside
    # a compressed member); a cut .npy ends early (EOFError)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, PolarsError) as error:
        # first line only: polars and numpy messages can run over several
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if "allow_pickle" in reason:
            # numpy's advice (allow_pickle=True) would run code from a file of unknown origin
            reason = "not a plain numeric array file (it is damaged, or holds Python objects, which are never loaded)"
        raise EncoderError(f"{path}: cannot read vectors: {reason}") from error
    vectors = stored.vectors
    if vectors.ndim != 2 or vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise EncoderError(f"{path}: expected an (N, d) array of vectors, got shape {vectors.shape}")
    if not np.issubdtype(vectors.dtype, np.number) or np.issubdtype(vectors.dtype, np.complexfloating):
        raise EncoderError(f"{path}: expected real-valued vectors, got dtype {vectors.dtype}")
    if stored.ids is not None:
        if len(stored.ids) != vectors.shape[0]:
            raise EncoderError(f"{path}: {len(stored.ids)} ids for {vectors.shape[0]} vectors")
        duplicates = len(stored.ids) - len(set(stored.ids))
        if duplicates:
            first = next(i for i, count in _counts(stored.ids).items() if count > 1)
            raise EncoderError(f"{path}: {duplicates} duplicate ids (e.g. {first!r})")
    return stored


def _counts(values: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


#: the most a deflated zip member expands: deflate's limit is about 1032 to 1
DEFLATE_RATIO = 1100


def _check_npz_member(archive, path: Path, name: str) -> None:
    """The array ``name`` of an open ``.npz`` claims no more than its member can hold: numpy
    allocates the claimed shape before reading the member."""
    names = archive.zip.namelist()
    info = archive.zip.getinfo(f"{name}.npy" if f"{name}.npy" in names else name)
    holds = info.file_size
    if info.compress_type == 8:  # deflated (np.savez_compressed): bounded by what deflate can expand to
        holds = min(holds, info.compress_size * DEFLATE_RATIO + 1024)
    with archive.zip.open(info) as member:
        read_npy_header(member, path, holds, name)


def _read_npz(path: Path, names: VectorNames) -> VectorFile:
    with np.load(path, allow_pickle=False) as archive:
        vectors_key = next((name for name in names.npz_vectors if name in archive.files), None)
        if vectors_key is None:
            raise EncoderError(f"{path}: .npz needs an array named {' or '.join(map(repr, names.npz_vectors))} "
                               f"(found: {', '.join(archive.files)})")
        ids_key = next((name for name in names.npz_ids if name in archive.files), None)
        for key in (vectors_key, ids_key):
            if key is not None:
                _check_npz_member(archive, path, key)
        ids = None
        if ids_key:
            stored = archive[ids_key]
            if stored.ndim != 1:  # a 0-d string array's tolist() is one str, read as its characters
                raise EncoderError(f"{path}: the {ids_key!r} array must be one-dimensional (one id per vector), "
                                   f"got shape {stored.shape}")
            ids = [_id_text(value, path) for value in stored.tolist()]
        return VectorFile(archive[vectors_key], ids)


def _id_text(value, path: Path) -> str:
    """An id as text; ids saved as a bytes array (numpy dtype S) are UTF-8 text, not "b'...'"."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as error:
            raise EncoderError(f"{path}: the ids array holds bytes that are not UTF-8 text ({value!r})") from error
    return str(value)


def _read_parquet(path: Path, names: VectorNames) -> VectorFile:
    import polars as pl

    table = pl.read_parquet(path)
    list_columns = [name for name, dtype in table.schema.items() if isinstance(dtype, (pl.List, pl.Array))]
    named = [name for name in names.parquet_vectors if name in list_columns]
    if named:
        column = named[0]
    elif len(list_columns) == 1:
        column = list_columns[0]
    else:
        raise EncoderError(f"{path}: expected one list column of floats named {' or '.join(names.parquet_vectors)}, "
                           f"found {list_columns or 'none'}")
    series = table[column]
    inner = series.dtype.inner
    if not inner.is_numeric():  # a cast would turn booleans into 0/1 and strings into an error deep in polars
        raise EncoderError(f"{path}: column {column!r} holds lists of {inner}, expected lists of numbers")
    if series.null_count():
        row = int(series.is_null().arg_max())
        raise EncoderError(f"{path}: column {column!r} is empty at row {row}")
    if not len(series):
        raise EncoderError(f"{path}: column {column!r} has no rows; expected one vector per caption")
    if isinstance(series.dtype, pl.List):
        lengths = series.list.len()
        if lengths.n_unique() != 1:
            row = int((lengths != lengths[0]).arg_max())
            raise EncoderError(f"{path}: column {column!r} has vectors of length {lengths[0]} and "
                               f"{lengths[row]} (row {row})")
        series = series.cast(pl.Array(pl.Float64, int(lengths[0])))
    vectors = series.to_numpy()
    id_column = next((name for name in names.parquet_ids if name in table.columns), None)
    ids = [str(value) for value in table[id_column].to_list()] if id_column else None
    return VectorFile(np.asarray(vectors), ids)


def normalise_rows(vectors: np.ndarray, source: str, labels: Sequence[str] | None = None) -> np.ndarray:
    """float32 unit rows; a non-finite or zero row is an error naming the row (or id).

    Rows already of unit length (to float32 precision) are kept bit for bit, so
    vectors exported by `capgeo encode -o` load back identical.
    """
    stored = np.asarray(vectors)
    normalised = np.empty(stored.shape, dtype=np.float32)
    not_finite, zero = [], []
    # in chunks of rows: float64 copies of a chunk, never of the whole file (1,000,000 x 768
    # vectors would take 6 GB more, and the passes over it most of a profile's start-up)
    for start in range(0, len(stored), NORMALISE_CHUNK_ROWS):
        chunk = stored[start:start + NORMALISE_CHUNK_ROWS]
        norms, bad, zeros, rescale = check_rows(chunk)
        not_finite.append(bad + start)
        zero.append(zeros + start)
        with np.errstate(over="ignore"):  # float64 values beyond float32's range: their rows are rescaled next
            normalised[start:start + len(chunk)] = chunk
        if rescale.size:
            normalised[start + rescale] = rescaled(chunk[rescale], norms[rescale])
    nothing = np.zeros(0, dtype=np.int64)
    refuse_bad_rows(np.concatenate(not_finite) if not_finite else nothing,
                    np.concatenate(zero) if zero else nothing, source, labels)
    return normalised


def refuse_bad_rows(not_finite: np.ndarray, zero: np.ndarray, source: str,
                    labels: Sequence[str] | None = None) -> None:
    """EncoderError naming the first row (or id) with NaN/inf values, then the first all-zero row."""
    def name(row: int) -> str:
        return f"id {labels[row]!r}" if labels is not None else f"row {row}"

    if not_finite.size:
        raise EncoderError(f"{source}: {not_finite.size} vectors have NaN or infinite values "
                           f"(first: {name(int(not_finite[0]))})")
    if zero.size:
        raise EncoderError(f"{source}: {zero.size} vectors are all zeros (first: {name(int(zero[0]))})")


class PrecomputedEncoder:
    """Vectors from a file, handed out per caption rather than computed from text."""

    def __init__(self, path: str | Path, spec: str | None = None):
        self.path = Path(path)
        #: rows of a float32 .npy, already checked and normalised as they were read (else None)
        self.unit_rows = None
        header = fast_path_header(self.path) if self.path.suffix.lower() == ".npy" and self.path.is_file() else None
        if header is not None:
            self.unit_rows = read_unit_rows(self.path, *header)
            self.ids, self.raw_vectors = None, self.unit_rows.vectors
        else:
            stored = read_vector_file(self.path)
            self.ids, self.raw_vectors = stored.ids, stored.vectors
        self.info = EncoderInfo(
            spec=spec or str(path), kind=KIND, name=self.path.name, width=int(self.raw_vectors.shape[1]),
            context_length=0, logit_scale=None,
            # the one-pass read hashed the very bytes it used: no second read of the file
            fingerprint=self.unit_rows.sha256 if self.unit_rows is not None else file_fingerprint(self.path),
        )
        #: how many stored vectors matched no caption at the last align()
        self.ignored = 0

    def __len__(self) -> int:
        return self.raw_vectors.shape[0]

    def align(self, caption_ids: Sequence[str]) -> np.ndarray:
        """Normalised vectors in the order of ``caption_ids``."""
        source = str(self.path)
        if self.ids is None:
            if len(caption_ids) != len(self):
                raise EncoderError(f"{source}: {len(self)} vectors for {len(caption_ids)} captions "
                                   "(a file without ids must have one row per caption, in order)")
            self.ignored = 0
            if self.unit_rows is not None:
                refuse_bad_rows(self.unit_rows.not_finite, self.unit_rows.zero, source)
                return self.unit_rows.vectors
            return normalise_rows(self.raw_vectors, source)
        position = {caption_id: row for row, caption_id in enumerate(self.ids)}
        missing = [caption_id for caption_id in caption_ids if caption_id not in position]
        if missing:
            raise EncoderError(f"{source}: {len(missing)} of {len(caption_ids)} caption ids have no vector "
                               f"(first: {missing[0]!r})")
        rows = np.fromiter((position[caption_id] for caption_id in caption_ids), dtype=np.int64,
                           count=len(caption_ids))
        self.ignored = len(self) - len(caption_ids)
        return normalise_rows(self.raw_vectors[rows], source, labels=list(caption_ids))

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        return np.full(len(texts), UNKNOWN_TOKEN_COUNT, dtype=np.int64)

    def encode(self, texts: Sequence[str], *, max_tokens: int | None = None, batch_size: int = 64,
               progress: bool | None = None) -> np.ndarray:
        raise EncoderError(f"{self.path}: precomputed vectors cannot encode new text; "
                           "they are matched to captions by row or id")


def load_precomputed_encoder(path: str | Path, spec: str | None = None) -> PrecomputedEncoder:
    if not str(path).strip():  # (Path("") is ".": "vector file not found: .")
        raise EncoderError("vectors: names no file; give vectors:FILE (.npy, .npz or .parquet)")
    return PrecomputedEncoder(path, spec=spec)


def write_vector_file(path: str | Path, vectors: np.ndarray, caption_ids: Sequence[str],
                      group_ids: Sequence[str] | None = None) -> str:
    """Write vectors atomically; return how they are aligned ("row" or "id").

    ``.npy`` holds only the vectors (row-aligned); ``.npz`` adds ``ids`` (and
    ``group_ids``); ``.parquet`` has caption_id, group_id and vector columns.
    """
    from capgeo._atomic import MARK_KEY, atomic_path, output_mark

    path = Path(path)
    suffix = path.suffix.lower()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if suffix not in (".npy", ".npz", ".parquet"):
        raise EncoderError(f"{path}: output must end in .npy, .npz or .parquet")
    with atomic_path(path) as tmp:
        if suffix == ".npy":
            with open(tmp, "wb") as handle:
                # the header, then the raw rows: np.save's own fast path asks the file for its position,
                # which a pipe (a FIFO named x.npy, /dev/stdout) cannot give
                np.lib.format.write_array_header_1_0(handle, np.lib.format.header_data_from_array_1_0(vectors))
                for start in range(0, len(vectors), 1 << 16):
                    handle.write(vectors[start:start + (1 << 16)].tobytes())
            return "row"
        if suffix == ".npz":
            # the mark that lets a later run replace this file (a .npy has no room for one)
            arrays = {"vectors": vectors, "ids": np.asarray(list(caption_ids), dtype=str),
                      MARK_KEY: np.asarray(output_mark())}
            if group_ids is not None:
                arrays["group_ids"] = np.asarray(list(group_ids), dtype=str)
            with open(tmp, "wb") as handle:
                np.savez(handle, **arrays)
            return "id"
        import polars as pl

        columns = {"caption_id": list(caption_ids)}
        if group_ids is not None:
            columns["group_id"] = list(group_ids)
        table = pl.DataFrame(columns).with_columns(
            pl.Series("vector", vectors, dtype=pl.Array(pl.Float32, vectors.shape[1])))
        table.write_parquet(tmp, metadata={MARK_KEY: output_mark()})
        return "id"
