"""Random training-style batches: B captions, each from a different group.

The HN-CLIP loss acts inside a batch, so the in-batch statistics (profile) and
the gamma diagnostics are computed on batches drawn exactly like this.
"""

from __future__ import annotations

import numpy as np

from capgeo.errors import CapgeoError


def sample_batches(group_codes: np.ndarray, batch_size: int, n_batches: int, seed: int = 0) -> np.ndarray:
    """Indices of ``n_batches`` random batches, shape (n_batches, batch_size).

    Each batch takes ``batch_size`` distinct groups uniformly at random and one
    caption uniformly at random from each, so no two captions of a batch describe
    the same image. Deterministic for a seed.
    """
    # any integer labels: renumber to 0..G-1 so that G counts the groups that exist
    group_codes = np.unique(np.asarray(group_codes), return_inverse=True)[1].reshape(-1)
    n_groups = int(group_codes.max()) + 1 if group_codes.size else 0
    if batch_size < 2:
        raise CapgeoError(f"batch size must be at least 2, got {batch_size}")
    if batch_size > n_groups:
        raise CapgeoError(
            f"batch size {batch_size} is larger than the number of groups (images) in the dataset, {n_groups}: "
            f"a batch needs {batch_size} captions of different images"
        )
    # captions of each group, as contiguous slices of one sorted index array
    order = np.argsort(group_codes, kind="stable")
    starts = np.searchsorted(group_codes[order], np.arange(n_groups))
    sizes = np.bincount(group_codes, minlength=n_groups)

    rng = np.random.default_rng(seed)
    batches = np.empty((n_batches, batch_size), dtype=np.int64)
    for b in range(n_batches):
        groups = rng.choice(n_groups, size=batch_size, replace=False)
        picks = (rng.random(batch_size) * sizes[groups]).astype(np.int64)
        batches[b] = order[starts[groups] + picks]
    return batches
