"""Estimate mode for datasets too large for the exact pass.

The exact pass costs N^2 / 2 dot products. Above ``estimate_threshold`` captions the
pairwise distribution is estimated from pairs of captions of different groups drawn
uniformly at random (with replacement, so they are independent), with stated error
bounds:

* mean: standard error ``std / sqrt(n)`` and a 95% interval of +-1.96 standard errors;
* CDF and quantiles: the Dvoretzky-Kiefer-Wolfowitz bound. With probability 0.95 the
  sample's CDF is within ``eps = sqrt(ln(2 / 0.05) / (2 n))`` of the dataset's CDF
  everywhere, so each share above a threshold is within +-eps and the dataset's
  quantile at level p lies between the sample's quantiles at p - eps and p + eps
  (reported per quantile, widened by one bin width of the histogram).

Hardest companions are still computed exactly (the blockwise top-k alone, without the
histograms), or approximately with a faiss HNSW index when asked for; then recall@1
is measured against an exact computation for a random sample of captions.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from capgeo.defaults import COMPANION_MODES, ESTIMATE_THRESHOLD, PAIR_BLOCK_SIZE, PAIRWISE_MODES, SAMPLED_PAIRS
from capgeo.errors import CapgeoError
from capgeo.geometry.distribution import QUANTILE_PERCENTS, Histogram
from capgeo.geometry.pairwise import (
    PairScan,
    make_grid,
    prepare_inputs,
    query_companions,
    same_group_pair_count,
    scan_pairs,
)
from capgeo.geometry.scan_options import RECALL_QUERIES, ScanOptions
from capgeo.progress import progress_bar

#: With mode="auto", datasets larger than this many captions use the sampled estimate:
#: the exact pass costs N^2 / 2 dot products (100,000 captions take minutes on 2 CPU
#: cores, 1,000,000 take hours).
DEFAULT_ESTIMATE_THRESHOLD = ESTIMATE_THRESHOLD
DEFAULT_SAMPLED_PAIRS = SAMPLED_PAIRS
DEFAULT_RECALL_QUERIES = RECALL_QUERIES
CONFIDENCE = 0.95
#: pairs whose cosines are computed at once (two gathers of this many rows of the vectors)
PAIR_CHUNK = 4096
#: faiss looks past same-group captions: at most this many extra neighbours per caption
MAX_EXTRA_NEIGHBOURS = 64


def pairwise_mode(mode: str, n_captions: int, estimate_threshold: int = DEFAULT_ESTIMATE_THRESHOLD) -> str:
    """The one place that decides: "exact" or "sampled" for ``mode`` ("auto" switches to
    sampled above ``estimate_threshold`` captions)."""
    if mode not in PAIRWISE_MODES:
        raise CapgeoError(f"pairwise mode must be auto, exact or sampled, got {mode!r}")
    if mode == "auto":
        return "sampled" if n_captions > estimate_threshold else "exact"
    return mode


def resolved_mode(mode: str, group_codes, estimate_threshold: int = DEFAULT_ESTIMATE_THRESHOLD,
                  n_pairs: int = DEFAULT_SAMPLED_PAIRS) -> str:
    """The mode that runs: :func:`pairwise_mode`'s choice, except that a sample as large as the
    negative pairs themselves is no sample: every pair is taken, by the exact pass (cheaper than
    drawing that many with replacement, and exact)."""
    chosen = pairwise_mode(mode, len(group_codes), estimate_threshold)
    if chosen == "sampled":
        codes = np.asarray(group_codes).astype(np.int64)
        n = len(codes)
        if n_pairs >= n * (n - 1) // 2 - same_group_pair_count(codes):
            return "exact"
    return chosen


def scan_or_estimate(vectors, group_codes, options: ScanOptions | None = None, *,
                     estimate_threshold: int = DEFAULT_ESTIMATE_THRESHOLD, mode: str = "auto", **values) -> PairScan:
    """The exact pass up to ``estimate_threshold`` captions, the estimate above (``mode="auto"``).

    ``mode="exact"`` or ``"sampled"`` forces one (a sample of at least every negative pair is the
    exact pass: :func:`resolved_mode`). ``options`` (a ScanOptions, or its fields as keywords) go to
    :func:`scan_pairs` or :func:`estimate_pairs`, each reading the fields that apply to it
    (``n_pairs``, ``seed``, ``companions`` to the latter only; ``precision`` and
    ``count_at_or_above`` to the former only: sampled pairs are scored one by one in fp32, and the
    sample's own estimate counts the pairs above a threshold).
    """
    options = ScanOptions.of(options, "scan_or_estimate", **values)
    if resolved_mode(mode, group_codes, estimate_threshold, options.n_pairs) == "exact":
        return scan_pairs(vectors, group_codes, options)
    return estimate_pairs(vectors, group_codes, options)


def estimate_pairs(vectors, group_codes, options: ScanOptions | None = None, **values) -> PairScan:
    """Pairwise distributions from ``n_pairs`` sampled pairs, plus hardest companions.

    ``options``: a :class:`~capgeo.geometry.scan_options.ScanOptions` (or its fields as keywords);
    read are ``n_pairs``, ``seed``, ``top_k``, ``companions``, ``recall_queries``, ``block_size``,
    ``bins``, ``device`` and ``progress``. Returns a :class:`PairScan` with ``mode="sampled"`` and
    ``bounds`` (see module docstring); ``companion_mode`` is ``"exact"`` or ``"faiss"`` (then
    ``companion_recall`` holds the measured recall). Deterministic for a seed.
    """
    options = ScanOptions.of(options, "estimate_pairs", **values)
    n_pairs, seed, top_k, companions = options.n_pairs, options.seed, options.top_k, options.companions
    block_size, bins, progress = options.block_size, options.bins, options.progress
    if n_pairs < 2:  # a mean's error needs two draws
        raise CapgeoError(f"--sampled-pairs: expected at least 2, got {n_pairs}")
    if companions not in COMPANION_MODES:
        raise CapgeoError(f"companions must be one of {', '.join(COMPANION_MODES)}, got {companions!r}")
    started = time.perf_counter()
    matrix, _, device = prepare_inputs(vectors, group_codes, options.device)
    if isinstance(matrix, np.ndarray):  # the CPU pass's numpy inputs: the sampled pairs are binned with torch
        import torch

        matrix, device = torch.from_numpy(matrix), torch.device("cpu")
    codes = np.asarray(group_codes).astype(np.int64)
    n = len(codes)
    rng = np.random.default_rng(seed)

    negative_total = n * (n - 1) // 2 - same_group_pair_count(codes)
    first, second = sample_different_group_pairs(codes, n_pairs, rng)
    negatives = pair_cosine_histogram(matrix, first, second, bins, progress, "sampled pairs")
    bounds = {"negatives": sampling_bounds(negatives, population=negative_total)}

    # pairs inside one group are usually few: all of them when they fit in n_pairs
    same_total = same_group_pair_count(codes)
    if same_total <= n_pairs:
        first, second = all_same_group_pairs(codes)
        same_group = pair_cosine_histogram(matrix, first, second, bins, progress, "same-group pairs")
        bounds["same_group"] = {"sampled": False, "population": same_total}
    else:
        first, second = sample_same_group_pairs(codes, n_pairs, rng)
        same_group = pair_cosine_histogram(matrix, first, second, bins, progress, "same-group pairs")
        bounds["same_group"] = sampling_bounds(same_group, population=same_total)

    unit = matrix.cpu().numpy() if companions == "faiss" and top_k else None
    del matrix  # the exact companions pass makes its own copy of the vectors
    recall = None
    if top_k == 0:
        index = np.zeros((n, 0), dtype=np.int64)
        cosine = np.zeros((n, 0), dtype=np.float32)
    elif companions == "exact":
        exact = scan_pairs(vectors, codes, ScanOptions(top_k=top_k, block_size=block_size, bins=bins, device=device,
                                                       progress=progress, histograms=False))
        index, cosine = exact.companion_index, exact.companion_cosine
    else:
        index, cosine = faiss_companions(unit, codes, top_k, progress=progress)
        fill_unfound_companions(unit, codes, index, cosine, block_size=block_size, device=device)
        recall = measure_recall(unit, codes, index, cosine, dataclasses.replace(options, device=device))

    return PairScan(
        negatives=negatives,
        same_group=same_group,
        companion_index=index,
        companion_cosine=cosine,
        n=n,
        top_k=top_k,
        block_size=make_grid(n, block_size, device).block_size,
        mode="sampled",
        companion_mode=companions,
        negative_pairs_total=negative_total,
        same_group_pairs_total=same_total,
        bounds=bounds["negatives"],
        companion_recall=recall,
        device=str(device),
        seconds=time.perf_counter() - started,
        extra={"same_group_bounds": bounds["same_group"], "seed": seed},
    )


def sampling_bounds(histogram: Histogram, *, population: int, confidence: float = CONFIDENCE) -> dict:
    """Error bounds of a distribution estimated from ``histogram.n`` independent uniform draws."""
    n = histogram.n
    alpha = 1 - confidence
    dkw = math.sqrt(math.log(2 / alpha) / (2 * n))
    # the sample's standard deviation (n - 1): with the spread of the draws themselves (n), two draws
    # understated the error, and one drew a mean "+-0.0000" (callers ask for at least two)
    standard_error = histogram.std / math.sqrt(n - 1) if n > 1 else float("inf")
    z = 1.959963984540054 if confidence == CONFIDENCE else _normal_quantile(1 - alpha / 2)
    intervals = {}
    for level in QUANTILE_PERCENTS:
        p = level / 100
        low, high = histogram.quantile([max(p - dkw, 0.0), min(p + dkw, 1.0)])
        # a level the DKW band pushes past 0 or 1 is bounded by nothing the sample saw (its smallest or
        # largest value is no bound on the dataset's), only by the range of a cosine
        intervals[f"p{level}"] = [-1.0 if p - dkw <= 0 else max(-1.0, float(low - histogram.width)),
                                  1.0 if p + dkw >= 1 else min(1.0, float(high + histogram.width))]
    return {
        "sampled": True,
        "sample_size": int(n),
        "population": int(population),
        "confidence": confidence,
        "mean_standard_error": float(standard_error),
        "mean_interval": [float(histogram.mean - z * standard_error), float(histogram.mean + z * standard_error)],
        "cdf_epsilon": float(dkw),  # DKW: every share / CDF value is within +-eps
        "quantile_intervals": intervals,
        "method": "uniform pairs with replacement; mean: normal approximation; CDF and quantiles: DKW",
    }


def sample_different_group_pairs(codes: np.ndarray, n_pairs: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``n_pairs`` independent uniform pairs (i, j), i != j, of different groups (rejection sampling)."""
    n = len(codes)
    first_parts, second_parts, have = [], [], 0
    while have < n_pairs:
        draw = max(int((n_pairs - have) * 1.1) + 64, 1024)
        first = rng.integers(0, n, draw)
        second = rng.integers(0, n - 1, draw)
        second += second >= first  # uniform over j != i
        keep = codes[first] != codes[second]
        first_parts.append(first[keep])
        second_parts.append(second[keep])
        have += int(keep.sum())
    return np.concatenate(first_parts)[:n_pairs], np.concatenate(second_parts)[:n_pairs]


def all_same_group_pairs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every unordered pair of captions of one group, vectorised (no loop over groups)."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    group_end = np.searchsorted(sorted_codes, sorted_codes, side="right")
    positions = np.arange(len(codes))
    partners = group_end - positions - 1  # later captions of the same group
    total = int(partners.sum())
    first_position = np.repeat(positions, partners)
    offset = np.arange(total) - np.repeat(np.cumsum(partners) - partners, partners)
    second_position = first_position + 1 + offset
    return order[first_position], order[second_position]


def sample_same_group_pairs(codes: np.ndarray, n_pairs: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Uniform pairs of captions of one group: a group with probability by its pair count, then two members."""
    order = np.argsort(codes, kind="stable")
    groups, starts, sizes = np.unique(codes[order], return_index=True, return_counts=True)
    weights = sizes * (sizes - 1) / 2
    chosen = rng.choice(len(groups), size=n_pairs, p=weights / weights.sum())
    first = (rng.random(n_pairs) * sizes[chosen]).astype(np.int64)
    second = (rng.random(n_pairs) * (sizes[chosen] - 1)).astype(np.int64)
    second += second >= first
    return order[starts[chosen] + first], order[starts[chosen] + second]


def pair_cosine_histogram(matrix, first, second, bins, progress, description) -> Histogram:
    """Histogram of the cosines of the given pairs.

    Rows are gathered in chunks into reused buffers (fresh multi-megabyte gathers cost
    page faults); the cosines (4 bytes a pair) are kept and binned once at the end.
    """
    import torch

    first = torch.as_tensor(first, device=matrix.device)
    second = torch.as_tensor(second, device=matrix.device)
    cosines = torch.empty(len(first), dtype=torch.float32, device=matrix.device)
    chunk = min(PAIR_CHUNK, max(len(first), 1))
    left = torch.empty(chunk, matrix.shape[1], dtype=matrix.dtype, device=matrix.device)
    right = torch.empty_like(left)
    starts = range(0, len(first), chunk)
    with torch.inference_mode(), progress_bar(description, len(starts), enabled=progress) as bar:
        for start in starts:
            end = min(start + chunk, len(first))
            size = end - start
            torch.index_select(matrix, 0, first[start:end], out=left[:size])
            torch.index_select(matrix, 0, second[start:end], out=right[:size])
            left[:size].mul_(right[:size])
            torch.sum(left[:size], dim=1, out=cosines[start:end])
            bar.advance(1)
    return Histogram(bins=bins).add(cosines)


def fill_unfound_companions(unit_vectors: np.ndarray, codes: np.ndarray, index: np.ndarray, cosine: np.ndarray, *,
                            block_size: int | None = PAIR_BLOCK_SIZE, device=None) -> int:
    """Exact companions, in place, for the captions faiss left short of their top-k although the
    dataset has enough captions of other images: those of groups larger than its search reached past
    (MAX_EXTRA_NEIGHBOURS). Returns how many captions were filled."""
    if not index.shape[1]:
        return 0
    sizes = np.bincount(codes - codes.min())
    possible = np.minimum(index.shape[1], len(codes) - sizes[codes - codes.min()])
    short = np.flatnonzero((index >= 0).sum(axis=1) < possible)
    if short.size:
        index[short], cosine[short] = query_companions(unit_vectors, codes, short, top_k=index.shape[1],
                                                       block_size=block_size, device=device)
    return int(short.size)


def faiss_companions(unit_vectors: np.ndarray, codes: np.ndarray, top_k: int, *, m: int = 32,
                     ef_construction: int = 80, ef_search: int = 128, progress=None):
    """Approximate top-k other-group companions from a faiss HNSW inner-product index.

    Searches past the caption itself and its own group's captions (up to
    ``MAX_EXTRA_NEIGHBOURS`` of them); captions left with fewer than k get -1 / NaN here, and
    exact companions from :func:`fill_unfound_companions` in the estimate.
    """
    try:
        import faiss
    except ImportError:
        raise CapgeoError("approximate companions need faiss: pip install faiss-cpu (or 'capgeo[faiss]')") from None
    unit_vectors = np.ascontiguousarray(unit_vectors, dtype=np.float32)
    n, width = unit_vectors.shape
    largest_group = int(np.bincount(codes - codes.min()).max())
    search_k = min(n, top_k + min(largest_group, MAX_EXTRA_NEIGHBOURS))
    index = faiss.IndexHNSWFlat(width, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    index.add(unit_vectors)
    index.hnsw.efSearch = max(ef_search, search_k)
    companion_index = np.full((n, top_k), -1, dtype=np.int64)
    companion_cosine = np.full((n, top_k), np.nan, dtype=np.float32)
    chunk = 8192
    with progress_bar("faiss companions", math.ceil(n / chunk), enabled=progress) as bar:
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            cosine, found = index.search(unit_vectors[start:end], search_k)
            rows = np.arange(start, end)[:, None]
            valid = (found >= 0) & (codes[np.maximum(found, 0)] != codes[rows])
            # order: valid first, then cosine descending, then lower index
            order = np.lexsort((found, -cosine, ~valid), axis=1)
            found = np.take_along_axis(found, order, 1)[:, :top_k]
            cosine = np.take_along_axis(cosine, order, 1)[:, :top_k]
            valid = np.take_along_axis(valid, order, 1)[:, :top_k]
            width_found = found.shape[1]
            companion_index[start:end, :width_found] = np.where(valid, found, -1)
            companion_cosine[start:end, :width_found] = np.where(valid, cosine, np.nan)
            bar.advance(1)
    return companion_index, companion_cosine


def measure_recall(unit_vectors, codes, index, cosine, options: ScanOptions, *, tolerance: float = 1e-5) -> dict:
    """Recall of approximate companions against the exact ones for a random sample of captions.

    ``options``: its ``recall_queries`` (how many captions), ``seed``, ``block_size`` and ``device``.

    recall@1: the approximate hardest companion is as similar as the exact one (within
    ``tolerance``, so ties count as found); recall@k: share of the exact top-k found.
    """
    n = len(codes)
    sample = np.sort(np.random.default_rng(options.seed + 1).choice(n, size=min(options.recall_queries, n),
                                                                    replace=False))
    exact_index, exact_cosine = query_companions(unit_vectors, codes, sample, top_k=index.shape[1],
                                                 block_size=options.block_size, device=options.device)
    has = ~np.isnan(exact_cosine[:, 0])
    found_cosine = np.nan_to_num(cosine[sample, 0], nan=-np.inf)
    hit_at_1 = found_cosine[has] >= exact_cosine[has, 0] - tolerance
    overlap = [np.intersect1d(exact_index[row][exact_index[row] >= 0], index[query][index[query] >= 0]).size
               / max((exact_index[row] >= 0).sum(), 1) for row, query in enumerate(sample) if has[row]]
    return {
        "queries": int(has.sum()),
        "recall_at_1": float(hit_at_1.mean()) if has.any() else None,
        "recall_at_k": float(np.mean(overlap)) if overlap else None,
        "k": int(index.shape[1]),
        "hardest_cosine_mean_error": float(np.mean(exact_cosine[has, 0] - np.nan_to_num(cosine[sample, 0][has],
                                                                                       nan=-1.0))),
        "method": "faiss IndexHNSWFlat (inner product) against exact top-k of a random sample of captions",
    }


def _normal_quantile(p: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(p))
