"""Precomputed vectors: .npy by row, Parquet/.npz by id, and every way they can fail to match."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from capgeo.captions.model import CaptionSet
from capgeo.encoders import embed, get_encoder
from capgeo.encoders.precomputed import PrecomputedEncoder, write_vector_file
from capgeo.errors import EncoderError


def caption_set(n: int) -> CaptionSet:
    table = pl.DataFrame({
        "caption_id": [f"c{i:03d}" for i in range(n)],
        "group_id": [f"g{i // 2}" for i in range(n)],
        "split": ["test"] * n,
        "text": [f"caption number {i}" for i in range(n)],
    })
    return CaptionSet(table, Path("x"), "test")


def raw_vectors(n: int, width: int = 6, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, width)) * 3


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.sqrt((rows ** 2).sum(axis=1, keepdims=True))


def test_npy_aligned_by_row_and_normalised(tmp_path):
    raw = raw_vectors(10)
    np.save(tmp_path / "v.npy", raw)
    result = embed(caption_set(10), f"vectors:{tmp_path / 'v.npy'}")
    assert result.vectors.dtype == np.float32
    np.testing.assert_allclose(result.vectors, unit(raw), atol=1e-6)
    assert result.origin == "precomputed" and result.info.kind == "precomputed"
    assert result.info.width == 6 and result.info.context_length == 0
    assert (result.token_counts == -1).all() and not result.truncated.any()


def test_parquet_aligned_by_id_ignoring_extra_ids(tmp_path):
    captions = caption_set(8)
    raw = raw_vectors(11)
    ids = [f"c{i:03d}" for i in range(11)]
    shuffled = np.random.default_rng(1).permutation(11)
    pl.DataFrame({"caption_id": [ids[i] for i in shuffled], "embedding": raw[shuffled].tolist()}) \
        .write_parquet(tmp_path / "v.parquet")
    result = embed(captions, str(tmp_path / "v.parquet"))
    np.testing.assert_allclose(result.vectors, unit(raw[:8]), atol=1e-6)
    assert result.notes == ("3 vectors in v.parquet match no caption and were ignored",)


def test_parquet_without_id_column_is_aligned_by_row(tmp_path):
    raw = raw_vectors(5)
    pl.DataFrame({"vector": raw.tolist(), "score": np.arange(5)}).write_parquet(tmp_path / "v.parquet")
    result = embed(caption_set(5), f"vectors:{tmp_path / 'v.parquet'}")
    np.testing.assert_allclose(result.vectors, unit(raw), atol=1e-6)


def test_npz_with_ids(tmp_path):
    raw = raw_vectors(4)
    np.savez(tmp_path / "v.npz", vectors=raw[::-1], ids=np.array(["c003", "c002", "c001", "c000"]))
    result = embed(caption_set(4), str(tmp_path / "v.npz"))
    np.testing.assert_allclose(result.vectors, unit(raw), atol=1e-6)


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".parquet"])
def test_written_file_loads_back_identically(tmp_path, suffix):
    captions = caption_set(9)
    vectors = unit(raw_vectors(9)).astype(np.float32)
    aligned = write_vector_file(tmp_path / f"out{suffix}", vectors, captions.ids, captions.groups)
    assert aligned == ("row" if suffix == ".npy" else "id")
    result = embed(captions, f"vectors:{tmp_path / f'out{suffix}'}")
    np.testing.assert_array_equal(result.vectors, vectors)
    assert not list(tmp_path.glob(".*.part"))


def test_parquet_export_has_ids_groups_and_vectors(tmp_path):
    captions = caption_set(4)
    vectors = unit(raw_vectors(4)).astype(np.float32)
    write_vector_file(tmp_path / "out.parquet", vectors, captions.ids, captions.groups)
    table = pl.read_parquet(tmp_path / "out.parquet")
    assert table.columns == ["caption_id", "group_id", "vector"]
    assert table["group_id"].to_list() == ["g0", "g0", "g1", "g1"]
    np.testing.assert_array_equal(np.stack(table["vector"].to_numpy()), vectors)


def expect_error(captions, spec, *fragments):
    with pytest.raises(EncoderError) as raised:
        embed(captions, spec)
    message = str(raised.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_row_count_mismatch(tmp_path):
    np.save(tmp_path / "v.npy", raw_vectors(9))
    expect_error(caption_set(10), str(tmp_path / "v.npy"), "v.npy", "9 vectors for 10 captions")


def test_missing_caption_id_is_named(tmp_path):
    pl.DataFrame({"caption_id": ["c000", "c002"], "vector": raw_vectors(2).tolist()}) \
        .write_parquet(tmp_path / "v.parquet")
    expect_error(caption_set(3), str(tmp_path / "v.parquet"), "1 of 3 caption ids have no vector", "'c001'")


def test_nan_is_named_by_row_and_by_id(tmp_path):
    raw = raw_vectors(6)
    raw[4, 2] = np.nan
    np.save(tmp_path / "v.npy", raw)
    expect_error(caption_set(6), str(tmp_path / "v.npy"), "NaN or infinite", "row 4")
    raw[4, 2] = np.inf
    np.savez(tmp_path / "v.npz", vectors=raw, ids=np.array([f"c{i:03d}" for i in range(6)]))
    expect_error(caption_set(6), str(tmp_path / "v.npz"), "NaN or infinite", "id 'c004'")


def test_zero_vector_rejected(tmp_path):
    raw = raw_vectors(3)
    raw[1] = 0
    np.save(tmp_path / "v.npy", raw)
    expect_error(caption_set(3), str(tmp_path / "v.npy"), "all zeros", "row 1")


def test_duplicate_ids_rejected(tmp_path):
    np.savez(tmp_path / "v.npz", vectors=raw_vectors(3), ids=np.array(["c000", "c001", "c000"]))
    expect_error(caption_set(2), str(tmp_path / "v.npz"), "duplicate ids", "'c000'")


def test_ragged_parquet_vectors_rejected(tmp_path):
    pl.DataFrame({"vector": [[1.0, 2.0], [1.0, 2.0, 3.0]]}).write_parquet(tmp_path / "v.parquet")
    expect_error(caption_set(2), str(tmp_path / "v.parquet"), "length 2 and 3", "row 1")


def test_bad_shapes_and_files(tmp_path):
    np.save(tmp_path / "flat.npy", np.ones(5))
    expect_error(caption_set(5), str(tmp_path / "flat.npy"), "(N, d)", "(5,)")
    expect_error(caption_set(5), f"vectors:{tmp_path / 'absent.npy'}", "not found", "absent.npy")
    (tmp_path / "v.txt").write_text("1 2 3")
    expect_error(caption_set(5), f"vectors:{tmp_path / 'v.txt'}", ".npy, .npz or .parquet")
    np.savez(tmp_path / "other.npz", embeddings=np.ones((5, 2)))
    expect_error(caption_set(5), str(tmp_path / "other.npz"), "'vectors'", "embeddings")
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY garbage")
    expect_error(caption_set(5), str(tmp_path / "broken.npy"), "broken.npy", "cannot read")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    expect_error(caption_set(5), str(tmp_path / "broken.parquet"), "broken.parquet", "cannot read")
    pl.DataFrame({"vector": [["a", "b"]] * 5}).write_parquet(tmp_path / "words.parquet")
    expect_error(caption_set(5), str(tmp_path / "words.parquet"), "words.parquet", "expected lists of numbers")
    np.save(tmp_path / "objects.npy", np.array([[1, "a"]], dtype=object))
    expect_error(caption_set(1), str(tmp_path / "objects.npy"), "objects.npy", "cannot read")


def test_precomputed_cannot_be_recut_or_encode_text(tmp_path):
    np.save(tmp_path / "v.npy", raw_vectors(3))
    with pytest.raises(EncoderError, match="cannot be re-cut"):
        embed(caption_set(3), str(tmp_path / "v.npy"), max_tokens=20)
    encoder = get_encoder(str(tmp_path / "v.npy"))
    assert isinstance(encoder, PrecomputedEncoder)
    with pytest.raises(EncoderError, match="cannot encode new text"):
        encoder.encode(["a caption"])


def test_fingerprint_follows_file_content(tmp_path):
    np.save(tmp_path / "v.npy", raw_vectors(3, seed=1))
    first = get_encoder(str(tmp_path / "v.npy")).info.fingerprint
    np.save(tmp_path / "v.npy", raw_vectors(3, seed=2))
    assert get_encoder(str(tmp_path / "v.npy")).info.fingerprint != first


def test_empty_and_damaged_files_are_one_line_errors(tmp_path):
    """An empty .npy/.npz, a cut or CRC-damaged .npz: numpy and zipfile raise EOFError and
    BadZipFile, which must become one line naming the file, not a traceback."""
    for name in ("empty.npy", "empty.npz", "empty.parquet"):
        (tmp_path / name).write_bytes(b"")
        expect_error(caption_set(5), f"vectors:{tmp_path / name}", name, "empty")
    np.savez(tmp_path / "good.npz", vectors=raw_vectors(5), ids=np.array([f"c{i:03d}" for i in range(5)]))
    data = (tmp_path / "good.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    expect_error(caption_set(5), f"vectors:{tmp_path / 'cut.npz'}", "cut.npz", "cannot read vectors")
    # flip one byte of the stored vectors (inside the first member's data): the CRC no longer matches
    damaged = bytearray(data)
    damaged[200] ^= 0xFF
    (tmp_path / "crc.npz").write_bytes(bytes(damaged))
    expect_error(caption_set(5), f"vectors:{tmp_path / 'crc.npz'}", "crc.npz", "cannot read vectors")
    compressed = tmp_path / "packed.npz"
    np.savez_compressed(compressed, vectors=raw_vectors(5))
    packed = bytearray(compressed.read_bytes())
    packed[120] ^= 0xFF
    (tmp_path / "packed-bad.npz").write_bytes(bytes(packed))
    expect_error(caption_set(5), f"vectors:{tmp_path / 'packed-bad.npz'}", "packed-bad.npz", "cannot read vectors")


def test_npz_ids_saved_as_bytes_are_text(tmp_path):
    raw = raw_vectors(4)
    np.savez(tmp_path / "v.npz", vectors=raw[::-1], ids=np.array([b"c003", b"c002", b"c001", b"c000"]))
    result = embed(caption_set(4), str(tmp_path / "v.npz"))
    np.testing.assert_allclose(result.vectors, unit(raw), atol=1e-6)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_float64_vectors_beyond_float32_range_are_normalised(tmp_path, scale):
    """Finite, non-zero float64 vectors are directions whatever their scale: 1e200 overflowed
    float32 ("NaN or infinite") and 1e-200 vanished ("all zeros") before."""
    import warnings

    raw = raw_vectors(6)
    np.save(tmp_path / "v.npy", raw * scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no stray RuntimeWarning on the terminal
        result = embed(caption_set(6), f"vectors:{tmp_path / 'v.npy'}")
    np.testing.assert_allclose(result.vectors, unit(raw), atol=1e-6)
    raw[2, 1] = np.inf
    np.save(tmp_path / "bad.npy", raw * scale)
    expect_error(caption_set(6), f"vectors:{tmp_path / 'bad.npy'}", "NaN or infinite", "row 2")


def test_parquet_vectors_must_be_numbers(tmp_path):
    """Lists of booleans were accepted as 0/1 vectors (a bool .npy is refused)."""
    pl.DataFrame({"vector": [[True, False]] * 5}).write_parquet(tmp_path / "bools.parquet")
    expect_error(caption_set(5), str(tmp_path / "bools.parquet"), "bools.parquet", "lists of Boolean",
                 "expected lists of numbers")
    pl.DataFrame({"vector": [[[1.0, 2.0]]] * 5}).write_parquet(tmp_path / "nested.parquet")
    expect_error(caption_set(5), str(tmp_path / "nested.parquet"), "nested.parquet", "expected lists of numbers")


def test_npy_output_is_what_np_save_writes_and_goes_through_a_pipe(tmp_path):
    """np.save asks the file for its position, which a FIFO named x.npy cannot give (a traceback)."""
    import os
    import threading

    from capgeo.encoders.precomputed import write_vector_file

    vectors = np.random.default_rng(0).normal(size=(70_000, 3)).astype(np.float32)
    ids = [str(i) for i in range(len(vectors))]
    write_vector_file(tmp_path / "mine.npy", vectors, ids)
    np.save(tmp_path / "numpy.npy", vectors)
    assert (tmp_path / "mine.npy").read_bytes() == (tmp_path / "numpy.npy").read_bytes()
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_vector_file(fifo, vectors[:100], ids[:100])
    reader.join(timeout=30)
    np.save(tmp_path / "small.npy", vectors[:100])
    assert received[0] == (tmp_path / "small.npy").read_bytes()
