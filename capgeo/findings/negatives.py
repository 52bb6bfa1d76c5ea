"""Hard-negative export: each caption's K most similar captions of other images within a cosine range.

For losses that train on mined (anchor, negatives) tuples. HN-CLIP itself needs none of
this: its Gbar term weighs the negatives already in the batch.

The candidates are the pairwise pass's top-k companion lists (scanned with
``k + SCAN_SLACK`` columns). A caption whose list is full yet holds fewer than K
companions in range (near-duplicates above ``max_cosine`` took the slots) is
re-searched exactly, in blocks, so every row is exact. Order: cosine descending, equal
cosines by the lower caption row, as in pairwise.py.
"""

from __future__ import annotations

import numpy as np

from capgeo.defaults import NEGATIVE_SUFFIXES, NEGATIVES_K, NEGATIVES_MAX_COSINE, NEGATIVES_MIN_COSINE
from capgeo.errors import CapgeoError

DEFAULT_K = NEGATIVES_K
#: cosine at or above which a companion is treated as a false negative (an exact or
#: near-exact duplicate: the same scene), the near-duplicate threshold of `capgeo profile`
DEFAULT_MAX_COSINE = NEGATIVES_MAX_COSINE
DEFAULT_MIN_COSINE = NEGATIVES_MIN_COSINE
#: extra companions scanned per caption so that a few near-duplicates above the range
#: rarely force a re-search (results do not depend on it)
SCAN_SLACK = 10
QUANTILE_LEVELS = (0.01, 0.1, 0.5, 0.9, 0.99)


def check_range(min_cosine: float, max_cosine: float) -> None:
    for name, value in (("--min-cosine", min_cosine), ("--max-cosine", max_cosine)):
        if not -1.0 <= value <= 1.0:
            raise CapgeoError(f"{name}: expected a cosine between -1 and 1, got {value}")
    if min_cosine >= max_cosine:
        raise CapgeoError(f"--min-cosine ({min_cosine:g}) must be below --max-cosine ({max_cosine:g})")


def _in_range(cosine: np.ndarray, min_cosine: float, max_cosine: float) -> np.ndarray:
    """``cosine`` clipped to [-1, 1] by the caller: float32 products of antipodal vectors reach
    -1.0000001, which the default floor of -1 (no floor) left out."""
    return np.isfinite(cosine) & (cosine >= min_cosine) & (cosine < max_cosine)


def hard_negatives(vectors: np.ndarray, group_codes: np.ndarray, *, k: int = DEFAULT_K,
                   min_cosine: float = DEFAULT_MIN_COSINE, max_cosine: float = DEFAULT_MAX_COSINE,
                   block_size: int = 2048, progress: bool | None = None,
                   device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(index (N, k) int64, cosine (N, k) float32): each caption's k most similar captions of
    other groups with min_cosine <= cosine < max_cosine; -1 / NaN where fewer exist. ``k`` is
    capped at the most any caption can have, N minus its image's captions (the smallest image's).
    ``device``: where the pass runs."""
    from capgeo.geometry.pairwise import scan_pairs
    from capgeo.geometry.row_norms import row_norms

    check_range(min_cosine, max_cosine)
    if k < 1:
        raise CapgeoError(f"-k: expected at least 1 negative per caption, got {k}")
    vectors = np.asarray(vectors, dtype=np.float32)
    vectors = vectors / row_norms(vectors)
    codes = np.asarray(group_codes)
    n = vectors.shape[0]
    smallest_group = int(np.unique(codes, return_counts=True)[1].min())
    k = max(1, min(k, n - smallest_group))
    scan = scan_pairs(vectors, codes, top_k=max(1, min(k + SCAN_SLACK, n - 1)), block_size=block_size,
                      histograms=False, progress=progress, device=device)
    index = np.asarray(scan.companion_index)
    cosine = np.clip(np.asarray(scan.companion_cosine, dtype=np.float32), -1.0, 1.0)
    keep = _in_range(cosine, min_cosine, max_cosine) & (index >= 0)
    out_index = np.full((n, k), -1, dtype=np.int64)
    out_cosine = np.full((n, k), np.nan, dtype=np.float32)
    # the first k in-range entries of each row, in list order
    rank = np.cumsum(keep, axis=1) - 1
    rows, columns = np.nonzero(keep & (rank < k))
    out_index[rows, rank[rows, columns]] = index[rows, columns]
    out_cosine[rows, rank[rows, columns]] = cosine[rows, columns]
    # a full list whose last entry is still >= min_cosine may hide in-range companions beyond it
    last = cosine[:, -1]
    short = (keep.sum(axis=1) < k) & (index[:, -1] >= 0) & np.isfinite(last) & (last >= min_cosine)
    for start_row in range(0, int(short.sum()), 256):
        rows = np.flatnonzero(short)[start_row:start_row + 256]
        out_index[rows], out_cosine[rows] = _search_in_range(vectors, codes, rows, k, min_cosine, max_cosine,
                                                             block_size)
    return out_index, out_cosine


def _search_in_range(vectors, codes, rows, k, min_cosine, max_cosine, block_size):
    """Exact top-k in-range other-group companions of ``rows``, blockwise."""
    best_cosine = np.full((len(rows), 0), -np.inf, dtype=np.float32)
    best_index = np.full((len(rows), 0), -1, dtype=np.int64)
    for start in range(0, vectors.shape[0], block_size):
        columns = np.arange(start, min(start + block_size, vectors.shape[0]))
        similarity = np.clip(vectors[rows] @ vectors[columns].T, -1.0, 1.0)
        allowed = _in_range(similarity, min_cosine, max_cosine) & (codes[rows][:, None] != codes[columns][None, :])
        similarity = np.where(allowed, similarity, -np.inf).astype(np.float32)
        merged_cosine = np.concatenate([best_cosine, similarity], axis=1)
        merged_index = np.concatenate([best_index, np.broadcast_to(columns, similarity.shape)], axis=1)
        # stable: running entries (lower rows) stay ahead of equal cosines from this block
        order = np.argsort(-merged_cosine, axis=1, kind="stable")[:, :k]
        best_cosine = np.take_along_axis(merged_cosine, order, axis=1)
        best_index = np.take_along_axis(merged_index, order, axis=1)
    missing = ~np.isfinite(best_cosine)
    best_index[missing] = -1
    best_cosine[missing] = np.nan
    pad = k - best_cosine.shape[1]
    if pad > 0:
        best_index = np.pad(best_index, ((0, 0), (0, pad)), constant_values=-1)
        best_cosine = np.pad(best_cosine, ((0, 0), (0, pad)), constant_values=np.nan)
    return best_index, best_cosine


def negative_rows(captions, index: np.ndarray, cosine: np.ndarray) -> list[dict]:
    """One row per anchor caption, its negatives hardest first (columns in docs/negatives.md)."""
    ids, groups, texts = captions.ids, captions.groups, captions.texts
    rows = []
    for anchor in range(len(ids)):
        found = index[anchor] >= 0
        negatives = index[anchor][found]
        rows.append({
            "anchor_id": ids[anchor], "anchor_group": groups[anchor], "anchor_text": texts[anchor],
            "negative_ids": [ids[j] for j in negatives], "negative_groups": [groups[j] for j in negatives],
            "negative_texts": [texts[j] for j in negatives],
            "negative_cosines": [float(c) for c in cosine[anchor][found]],
        })
    return rows


def cosine_quantiles(cosine: np.ndarray) -> list[dict]:
    """Quantiles of anchor-negative cosine per negative rank (1 = hardest) and over all."""
    summaries = []
    for label, values in [(str(rank + 1), cosine[:, rank]) for rank in range(cosine.shape[1])] + [("all", cosine)]:
        values = np.asarray(values, dtype=np.float64).ravel()
        values = values[np.isfinite(values)]
        summaries.append({
            "rank": label, "count": int(values.size),
            "mean": float(values.mean()) if values.size else None,
            "quantiles": {f"p{round(level * 100):g}": float(np.quantile(values, level)) if values.size else None
                          for level in QUANTILE_LEVELS},
        })
    return summaries


def export_negatives(captions, embeddings, output: str, *, k: int = DEFAULT_K, min_cosine: float = DEFAULT_MIN_COSINE,
                     max_cosine: float = DEFAULT_MAX_COSINE, block_size: int = 2048,
                     progress: bool | None = None, device: str | None = None) -> dict:
    """Mine hard negatives, write them to ``output`` (JSONL or Parquet by suffix, atomically),
    and return the summary (`capgeo negatives`, docs/negatives.md)."""
    import polars as pl

    from capgeo.findings.duplicates import write_rows
    from capgeo.findings.per_caption import table_format

    fmt = table_format(output, NEGATIVE_SUFFIXES)
    # as the command does: never over the dataset being mined (the CLI checks this before encoding)
    from capgeo.paths import check_output_paths

    check_output_paths({"DATA": getattr(captions, "source", None)}, {"output": output})
    index, cosine = hard_negatives(embeddings.vectors, captions.group_codes, k=k, min_cosine=min_cosine,
                                   max_cosine=max_cosine, block_size=block_size, progress=progress, device=device)
    k = index.shape[1]  # as hard_negatives capped it
    rows = negative_rows(captions, index, cosine)
    schema = {"anchor_id": pl.String, "anchor_group": pl.String, "anchor_text": pl.String,
              "negative_ids": pl.List(pl.String), "negative_groups": pl.List(pl.String),
              "negative_texts": pl.List(pl.String), "negative_cosines": pl.List(pl.Float64)}
    write_rows(rows, fmt, output, columns=tuple(schema), parquet_schema=schema)
    found = (index >= 0).sum(axis=1)
    return {
        "schema": "capgeo.negatives/1",
        "output": str(output),
        "n_anchors": len(rows),
        "k": int(k), "min_cosine": float(min_cosine), "max_cosine": float(max_cosine),
        "n_anchors_short": int((found < k).sum()),
        "n_negatives": int(found.sum()),
        "encoder": embeddings.info.to_dict() if hasattr(embeddings, "info") else None,
        "cosines": cosine_quantiles(cosine),
    }
