"""The one-pass .npy reader: the same vectors and fingerprint as reading, hashing and
normalising separately, across chunk boundaries, and refusals for files cut short or
changed while read."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from capgeo.encoders import base, unit_npy
from capgeo.encoders.precomputed import PrecomputedEncoder, normalise_rows
from capgeo.errors import EncoderError


def mixed_rows(n: int = 53, width: int = 7) -> np.ndarray:
    """Unit rows (kept bit for bit), scaled rows (rescaled), and rows one float32 step off unit."""
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(n, width)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows[::3] *= np.float32(2.5)
    rows[1::7] = np.nextafter(rows[1::7], np.float32(2))
    return rows


@pytest.fixture
def small_chunks(monkeypatch):
    # 3 rows of width 7 per chunk: every chunk boundary case occurs in 53 rows
    monkeypatch.setattr(unit_npy, "CHUNK_BYTES", 3 * 7 * 4)


def test_same_vectors_as_load_then_normalise(tmp_path, small_chunks):
    rows = mixed_rows()
    np.save(tmp_path / "v.npy", rows)
    header = unit_npy.fast_path_header(tmp_path / "v.npy")
    assert header is not None and header[0] == rows.shape
    read = unit_npy.read_unit_rows(tmp_path / "v.npy", *header)
    expected = normalise_rows(np.load(tmp_path / "v.npy"), "v.npy")
    np.testing.assert_array_equal(read.vectors, expected)
    assert type(read.vectors) is np.ndarray and read.vectors.dtype == np.float32
    # the rescaled rows are in this process only: the file is what was saved
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), rows)
    assert read.sha256 == hashlib.sha256((tmp_path / "v.npy").read_bytes()).hexdigest()


def test_fingerprint_does_not_read_the_file_again(tmp_path, monkeypatch):
    np.save(tmp_path / "v.npy", mixed_rows())
    monkeypatch.setattr(base, "_file_sha256", lambda *key: pytest.fail("hashed the file a second time"))
    encoder = PrecomputedEncoder(tmp_path / "v.npy")
    assert encoder.info.fingerprint == hashlib.sha256((tmp_path / "v.npy").read_bytes()).hexdigest()


def test_bytes_after_the_array_are_part_of_the_fingerprint(tmp_path):
    np.save(tmp_path / "v.npy", mixed_rows())
    with open(tmp_path / "v.npy", "ab") as handle:
        handle.write(b"trailing")
    encoder = PrecomputedEncoder(tmp_path / "v.npy")
    assert encoder.info.fingerprint == hashlib.sha256((tmp_path / "v.npy").read_bytes()).hexdigest()
    np.testing.assert_array_equal(encoder.align([str(row) for row in range(53)]),
                                  normalise_rows(mixed_rows(), "v"))


def test_bad_rows_are_named_as_before(tmp_path, small_chunks):
    rows = mixed_rows()
    rows[40, 2] = np.inf
    rows[44, 1] = np.nan
    rows[10] = 0
    np.save(tmp_path / "v.npy", rows)
    encoder = PrecomputedEncoder(tmp_path / "v.npy")
    with pytest.raises(EncoderError, match=r"2 vectors have NaN or infinite values \(first: row 40\)"):
        encoder.align([str(row) for row in range(53)])
    rows[40, 2] = rows[44, 1] = 1
    np.save(tmp_path / "v.npy", rows)
    with pytest.raises(EncoderError, match=r"1 vectors are all zeros \(first: row 10\)"):
        PrecomputedEncoder(tmp_path / "v.npy").align([str(row) for row in range(53)])


@pytest.mark.parametrize("array", [np.ones((4, 3), dtype=np.float64), np.ones((4, 3), dtype=">f4"),
                                   np.asfortranarray(np.ones((4, 3), dtype=np.float32)),
                                   np.ones(4, dtype=np.float32), np.ones((0, 3), dtype=np.float32)])
def test_other_layouts_go_the_general_way(tmp_path, array):
    np.save(tmp_path / "v.npy", array)
    assert unit_npy.fast_path_header(tmp_path / "v.npy") is None


def test_file_cut_short(tmp_path):
    np.save(tmp_path / "v.npy", mixed_rows())
    data = (tmp_path / "v.npy").read_bytes()
    (tmp_path / "v.npy").write_bytes(data[:-5])
    with pytest.raises(EncoderError, match="v.npy: cannot read vectors: the file is cut short"):
        PrecomputedEncoder(tmp_path / "v.npy")


def test_file_changed_while_read(tmp_path, monkeypatch, small_chunks):
    np.save(tmp_path / "v.npy", mixed_rows())
    original = unit_npy._rescale

    def touching(vectors, pending):
        # another program rewrites the file's timestamp mid-read
        (tmp_path / "v.npy").touch()
        original(vectors, pending)

    monkeypatch.setattr(unit_npy, "_rescale", touching)
    with pytest.raises(EncoderError, match="v.npy: the file changed while it was read"):
        PrecomputedEncoder(tmp_path / "v.npy")


def test_a_file_that_cannot_be_mapped_is_read_into_memory(tmp_path, monkeypatch, small_chunks):
    rows = mixed_rows()
    np.save(tmp_path / "v.npy", rows)

    def refuse(*args, **kwargs):
        raise OSError("mmap not supported on this file system")

    monkeypatch.setattr(unit_npy.np, "memmap", refuse)
    read = unit_npy.read_unit_rows(tmp_path / "v.npy", *unit_npy.fast_path_header(tmp_path / "v.npy"))
    np.testing.assert_array_equal(read.vectors, normalise_rows(rows, "v.npy"))
    assert read.sha256 == hashlib.sha256((tmp_path / "v.npy").read_bytes()).hexdigest()
