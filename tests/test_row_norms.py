"""Row norms in blocks: the same float32 norms as one whole-array call, and the rows that break them."""

import numpy as np

from capgeo.geometry import row_norms as module
from capgeo.geometry.row_norms import first_non_finite_row, row_norms


def test_block_norms_equal_the_whole_array_norm(monkeypatch):
    monkeypatch.setattr(module, "CHUNK_ROWS", 7)   # many blocks and a ragged last one
    vectors = np.random.default_rng(0).normal(size=(100, 13)).astype(np.float32) * 5
    np.testing.assert_array_equal(row_norms(vectors), np.linalg.norm(vectors, axis=1, keepdims=True))
    assert row_norms(vectors).dtype == np.float32 and row_norms(vectors[:0]).shape == (0, 1)


def test_first_non_finite_row_ignores_finite_rows_whose_norm_overflows():
    vectors = np.ones((6, 3), dtype=np.float32)
    vectors[1] = 3e38        # finite values, but the float32 norm overflows
    vectors[4, 2] = np.nan
    vectors[5, 0] = -np.inf
    norms = row_norms(vectors)
    assert not np.isfinite(norms[1, 0])
    assert first_non_finite_row(vectors, norms) == 4
    assert first_non_finite_row(vectors[:4], norms[:4]) is None
