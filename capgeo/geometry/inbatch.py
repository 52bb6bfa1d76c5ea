"""In-batch statistics: what the HN-CLIP loss sees inside one training batch.

The loss compares each caption with the other B - 1 captions of its batch, so the
dataset-wide pairwise distribution is not enough: what matters is how many hard
negatives a random batch of size B holds. Batches are drawn exactly as training
would (``sample_batches``: B captions of B distinct groups), and every statistic
is computed from each batch's B x B caption-caption cosine matrix with the
diagonal left out. Memory stays bounded by processing the batches in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from capgeo.defaults import BUCKET_EDGES, NEAR_DUPLICATE_THRESHOLD, RELATIVE_LEVELS
from capgeo.errors import CapgeoError
from capgeo.geometry.batch_size import DEFAULT_N_BATCHES
from capgeo.geometry.batches import sample_batches
from capgeo.geometry.distribution import QUANTILE_PERCENTS, Histogram

DEFAULT_BUCKET_EDGES = BUCKET_EDGES
#: Pairwise quantile levels used as bucket edges with --relative-buckets.
DEFAULT_RELATIVE_LEVELS = RELATIVE_LEVELS
#: Cosine at or above which two captions of different images count as near-duplicates.
#: Chosen above the mean hardest companion of real long-caption benchmarks with
#: CLIP-family encoders (0.92-0.94 in HN-CLIP Table A1), so it flags pairs that are
#: nearly interchangeable rather than merely similar. Encoder dependent; change it with
#: --near-duplicate-threshold.
DEFAULT_NEAR_DUPLICATE_THRESHOLD = NEAR_DUPLICATE_THRESHOLD
#: Rows/columns of the example batch matrix returned for plotting.
EXAMPLE_ROWS = 128
#: Cosine entries (and gathered vector entries) held at once while processing a chunk of batches
#: (2 MB in float32: the chunk stays in the CPU's cache).
_CHUNK_ENTRIES = 1 << 19
#: Quantile levels reported for the hardest in-batch negative: the profile's p1..p99, as fractions.
QUANTILE_LEVELS = tuple(percent / 100 for percent in QUANTILE_PERCENTS)


def quantile_key(level: float) -> str:
    """0.5 -> 'p50', 0.01 -> 'p1', 0.999 -> 'p99.9' (the keys Histogram.summary uses)."""
    return f"p{round(level * 100, 6):g}"


def check_edges(edges: Sequence[float], what: str = "bucket edges") -> tuple[float, ...]:
    """Validate user bucket edges: strictly ascending cosines in [-1, 1]."""
    values = tuple(float(edge) for edge in edges)
    if not values:
        raise CapgeoError(f"{what}: give at least one cosine edge, e.g. 0.7,0.8,0.9")
    if any(not np.isfinite(v) or v < -1.0 or v > 1.0 for v in values):
        raise CapgeoError(f"{what}: every edge must be a cosine between -1 and 1, got {list(values)}")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise CapgeoError(f"{what}: edges must be strictly ascending, got {list(values)}")
    return values


def bucket_labels(edges: Sequence[float], digits: int = 4) -> list[str]:
    """Names of the len(edges) + 1 buckets, e.g. ['<0.7', '0.7-0.8', '0.8-0.9', '>=0.9']."""
    text = [f"{edge:.{digits}f}".rstrip("0").rstrip(".") if digits else str(edge) for edge in edges]
    labels = [f"<{text[0]}"]
    labels += [f"{low}-{high}" for low, high in zip(text, text[1:])]
    labels.append(f">={text[-1]}")
    return labels


def summarize_sample(values: np.ndarray, levels: Sequence[float] = QUANTILE_LEVELS) -> dict:
    """count, mean, std, min, max and exact quantiles of a 1-D sample (JSON-ready)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {"count": 0, "mean": None, "std": None, "min": None, "max": None, "quantiles": {}}
    quantiles = np.quantile(values, levels)
    return {
        "count": int(values.size),
        "mean": float(values.mean()),
        "std": float(values.std()),
        "min": float(values.min()),
        "max": float(values.max()),
        "quantiles": {quantile_key(level): float(q) for level, q in zip(levels, quantiles)},
    }


def hardest_in_batch_histogram(values: np.ndarray) -> dict:
    """The ``histogram`` (and ``bin_width``) of each batch row's hardest negative, on the fine bins of the
    profile's other cosine histograms (width 0.0005, the pairwise pass's bin rule), so the report draws it
    beside the hardest companion on one grid. Counts are exact: one per batch row."""
    histogram = Histogram()
    values = np.asarray(values, dtype=np.float32).reshape(-1)
    if values.size:
        histogram.add(values)
    compact = histogram.compact()
    start, width, counts = compact["start"], compact["width"], compact["counts"]
    edges = np.round(start + width * np.arange(len(counts) + 1), 10).tolist() if counts else []
    return {"histogram": {"edges": edges, "counts": counts, "start": start, "width": width}, "bin_width": width}


def _composition(kind: str, edges: Sequence[float], above_counts: np.ndarray, n_entries: int,
                 n_rows: int, levels: Sequence[float] | None, labels: list[str] | None = None) -> dict:
    """Bucket shares from the counts of (ordered) negatives at or above each edge."""
    share_above = above_counts / n_entries
    # bucket i holds [edge_{i-1}, edge_i): differences of the "at or above" shares
    cumulative = np.concatenate([[1.0], share_above, [0.0]])
    shares = cumulative[:-1] - cumulative[1:]
    return {
        "kind": kind,
        "edges": [float(edge) for edge in edges],
        "quantile_levels": None if levels is None else [float(level) for level in levels],
        "labels": labels if labels is not None else bucket_labels(edges),
        "shares": [float(share) for share in shares],
        "share_above": [float(share) for share in share_above],
        "expected_above_per_row": [float(count / n_rows) for count in above_counts],
    }


def _example_matrix(similarity: np.ndarray, indices: np.ndarray, caption_ids, group_ids) -> dict:
    """One batch's cosine matrix for plotting: rounded, diagonal null."""
    rows = min(len(indices), EXAMPLE_ROWS)
    upper = np.triu(similarity[:rows, :rows].astype(np.float64), k=1)
    block = np.round(upper + upper.T, 4).tolist()  # mirrored: exactly symmetric
    for i in range(rows):
        block[i][i] = None
    picked = indices[:rows].tolist()
    return {
        "caption_ids": [str(caption_ids[i]) for i in picked] if caption_ids is not None else picked,
        "group_ids": [str(group_ids[i]) for i in picked] if group_ids is not None else None,
        "cosine": block,
    }


@dataclass(frozen=True)
class InBatchOptions:
    """How the batches of :func:`inbatch_statistics` are drawn and what is counted in them.

    ``relative_edges`` (with the ``relative_levels`` they stand for) adds a second composition
    whose edges are the dataset's own pairwise quantiles."""

    n_batches: int = DEFAULT_N_BATCHES
    seed: int = 0
    edges: Sequence[float] = DEFAULT_BUCKET_EDGES
    relative_edges: Sequence[float] | None = None
    relative_levels: Sequence[float] | None = None
    near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD

    @classmethod
    def of(cls, options: "InBatchOptions | None" = None, **values) -> "InBatchOptions":
        """``options`` (default: all defaults) with the fields in ``values`` replaced."""
        from capgeo.arguments import with_fields

        return with_fields(cls, options, "inbatch_statistics", values)


def inbatch_statistics(vectors: np.ndarray, group_codes: np.ndarray, batch_size: int,
                       options: InBatchOptions | None = None, *, caption_ids: Sequence[str] | None = None,
                       group_ids: Sequence[str] | None = None, progress=None, **values) -> dict:
    """In-batch negative statistics for one batch size, as a JSON-ready dict.

    ``vectors`` are the (N, d) L2-normalised caption embeddings, ``group_codes`` the
    (N,) integer group of each caption. ``options``: an :class:`InBatchOptions` (or its fields as
    keywords, which replace those of ``options``); ``caption_ids`` and ``group_ids`` label the
    example batch. Raises CapgeoError when B exceeds the number of groups.
    Deterministic for a seed. See docs/profile-schema.md, section ``batches``.
    """
    options = InBatchOptions.of(options, **values)
    n_batches, seed, edges = options.n_batches, options.seed, options.edges
    relative_edges, relative_levels = options.relative_edges, options.relative_levels
    near_duplicate_threshold = options.near_duplicate_threshold
    edges = check_edges(edges)
    if n_batches < 1:
        raise CapgeoError(f"number of batches must be at least 1, got {n_batches}")
    vectors = np.asarray(vectors, dtype=np.float32)
    batches = sample_batches(group_codes, batch_size, n_batches, seed)
    relative = None
    if relative_edges is not None:
        relative = np.asarray(relative_edges, dtype=np.float64)
        if relative.ndim != 1 or relative.size == 0 or np.any(np.diff(relative) < 0):
            raise CapgeoError(f"relative bucket edges must be ascending, got {list(relative)}")
        if relative_levels is None or len(relative_levels) != relative.size:
            raise CapgeoError("relative bucket edges need one quantile level per edge")

    B = batch_size
    n_rows = n_batches * B
    n_entries = n_rows * (B - 1)  # (row, column) negatives, diagonal excluded: each pair twice
    hardest = np.empty((n_batches, B), dtype=np.float32)
    near_pairs = np.empty(n_batches, dtype=np.int64)
    upper = np.triu(np.ones((B, B), dtype=bool), k=1)
    diagonal = np.arange(B)
    # each compared as given: an edge as a Python float (in float32, as numpy compares a float32 array
    # with one), a relative edge as a float64 scalar (in float64)
    thresholds = [*edges, *([] if relative is None else relative)]
    example = []

    def chunk_counts(start: int) -> tuple[int, np.ndarray]:
        """The batches from ``start``: their hardest negatives and near pairs written in place, and how
        many ordered negatives lie at or above each threshold (absolute edges, then relative ones)."""
        stop = min(start + chunk, n_batches)
        members = vectors[batches[start:stop]]                      # (c, B, d)
        # numpy's stacked float32 product, one sgemm a batch: bit for bit what torch.bmm computes
        # (tests/test_inbatch.py), without importing torch for it
        similarity = np.matmul(members, members.transpose(0, 2, 1))  # (c, B, B)
        if start == 0:
            example.append(_example_matrix(similarity[0], batches[0], caption_ids, group_ids))
        # each unordered pair once (the float32 product need not be exactly symmetric);
        # it is a negative of both its rows, hence the factor 2 for per-row counts
        negatives = similarity[:, upper]                             # (c, B*(B-1)/2)
        above = np.array([2 * int(np.count_nonzero(negatives >= edge)) for edge in thresholds], dtype=np.int64)
        near_pairs[start:stop] = np.count_nonzero(negatives >= near_duplicate_threshold, axis=1)
        similarity[:, diagonal, diagonal] = -np.inf
        hardest[start:stop] = similarity.max(axis=2)
        return stop - start, above

    from capgeo.geometry.cpu_pass import block_threads

    # bound both the (c, B, B) cosines and the (c, B, d) gathered vectors: a chunk this small stays
    # in the CPU's cache from the product to the counts
    chunk = max(1, min(_CHUNK_ENTRIES // (B * B), _CHUNK_ENTRIES // (B * vectors.shape[1])))
    starts = range(0, n_batches, chunk)
    above = np.zeros(len(thresholds), dtype=np.int64)
    # chunks side by side, each sgemm on one BLAS thread: small products, and the same kernel for
    # every batch whatever the thread count; the counts are integers, summed in any order
    with block_threads(1 if len(starts) < 2 else None) as pool:
        for done, counts in (map if pool is None else pool.map)(chunk_counts, starts):
            above += counts
            if progress is not None:
                progress.advance(done)
    absolute_above, relative_above = above[:len(edges)], above[len(edges):]
    example = example[0]

    return {
        "batch_size": int(B),
        "n_batches": int(n_batches),
        "seed": int(seed),
        "negatives_per_row": int(B - 1),
        "buckets": _composition("absolute", edges, absolute_above, n_entries, n_rows, None),
        "relative_buckets": None if relative is None else _composition(
            "relative", relative.tolist(), relative_above, n_entries, n_rows, relative_levels,
            labels=_relative_labels(relative_levels),
        ),
        "hardest_in_batch": {**summarize_sample(hardest.ravel()), **hardest_in_batch_histogram(hardest.ravel())},
        "near_duplicate": {
            "threshold": float(near_duplicate_threshold),
            "share_batches": float(np.count_nonzero(near_pairs) / n_batches),
            "mean_pairs_per_batch": float(near_pairs.mean()),
        },
        "example": example,
    }


def _relative_labels(levels: Sequence[float]) -> list[str]:
    names = [quantile_key(level) for level in levels]
    return [f"<{names[0]}"] + [f"{a}-{b}" for a, b in zip(names, names[1:])] + [f">={names[-1]}"]
