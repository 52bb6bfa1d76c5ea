"""Row norms of a caption-vector matrix without a temporary as large as the matrix.

``np.linalg.norm(vectors, axis=1)`` squares the whole matrix first: 3 GB more at a million
768-wide captions, faulted in and filled each time (seconds on the project's machine, and
a report asked four times). The same float32 norms, a block of rows at a time.
"""

from __future__ import annotations

import numpy as np

CHUNK_ROWS = 65536


def row_norms(vectors: np.ndarray) -> np.ndarray:
    """(N, 1) Euclidean norms of the rows of float32 ``vectors``, equal to
    ``np.linalg.norm(vectors, axis=1, keepdims=True)``."""
    norms = np.empty((len(vectors), 1), dtype=np.float32)
    # a norm that overflows is inf, which callers test for: no numpy warning on the way
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, len(vectors), CHUNK_ROWS):
            norms[start:start + CHUNK_ROWS] = np.linalg.norm(vectors[start:start + CHUNK_ROWS], axis=1,
                                                             keepdims=True)
    return norms


def first_non_finite_row(vectors: np.ndarray, norms: np.ndarray) -> int | None:
    """The first row holding NaN or inf (None when there is none), checked only where the norm is not finite."""
    for row in np.flatnonzero(~np.isfinite(norms[:, 0])):
        if not np.isfinite(vectors[row]).all():
            return int(row)
    return None
