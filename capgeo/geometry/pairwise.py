"""One blockwise pass over the caption cosine-similarity matrix.

The N x N matrix is never built: the pass walks its upper triangle in
``block_size x block_size`` tiles (one torch matmul each, into a reused buffer)
and, from each tile, accumulates

* a histogram (plus exact moments) of the cosines of pairs of *different* groups
  (the negatives a contrastive loss sees), each unordered pair counted once;
* a separate histogram of pairs *inside* one group (captions of the same image:
  positives, not negatives);
* for every caption, a running top-k of its most similar captions of other groups
  (its hardest companions). A tile updates the top-k of both its rows and its
  columns, so each pair is computed once.

Memory is O(block_size^2 + N * k) beyond the vectors themselves.

Top-k ties are broken by the lower caption index, so results do not depend on the
block size or on torch's topk order: a tile's top-k is taken with one extra
candidate, rows whose k-th and (k+1)-th values tie are redone with a stable sort,
and the merge with the running top-k sorts by index, then stably by cosine.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from capgeo.errors import CapgeoError
from capgeo.geometry.distribution import (
    DEFAULT_BINS,
    DEFAULT_SHARE_EDGES,
    Histogram,
    bin_indices_torch,
    summarize_values,
)
from capgeo.progress import progress_bar

DEFAULT_BLOCK_SIZE = 2048
DEFAULT_TOP_K = 10
SMALL_TILE = 256  # tiles narrower than this run on one CPU thread
UNIT_NORM_TOLERANCE = 1e-6


@dataclass
class PairScan:
    """Result of the pairwise pass (exact, or an estimate: see ``mode``).

    ``companion_index[i, j]`` is the caption index of caption i's (j+1)-th most
    similar caption of another group and ``companion_cosine[i, j]`` its cosine,
    sorted by cosine descending, ties by lower index; -1 and NaN where caption i has
    fewer than ``top_k`` captions of other groups.
    """

    negatives: Histogram
    same_group: Histogram
    companion_index: np.ndarray
    companion_cosine: np.ndarray
    n: int
    top_k: int
    block_size: int
    mode: str = "exact"  # "exact" | "sampled" (pairwise distribution from sampled pairs)
    companion_mode: str = "exact"  # "exact" | "faiss" (approximate nearest neighbours)
    negative_pairs_total: int = 0  # number of different-group pairs in the dataset
    same_group_pairs_total: int = 0  # number of same-group pairs in the dataset
    bounds: dict | None = None  # error bounds of a sampled distribution
    companion_recall: dict | None = None  # measured recall of approximate companions
    device: str = "cpu"
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def pairwise_summary(self, share_edges=DEFAULT_SHARE_EDGES) -> dict:
        """Negatives' distribution as a JSON-ready dict, with how it was obtained."""
        summary = self.negatives.summary(share_edges)
        summary["mode"] = self.mode
        summary["pairs_total"] = int(self.negative_pairs_total)
        if self.bounds is not None:
            summary["bounds"] = dict(self.bounds)
        return summary

    def same_group_summary(self, share_edges=DEFAULT_SHARE_EDGES) -> dict:
        summary = self.same_group.summary(share_edges)
        summary["pairs_total"] = int(self.same_group_pairs_total)
        if "same_group_bounds" in self.extra:
            summary["bounds"] = dict(self.extra["same_group_bounds"])
        return summary

    def hardest_companion_summary(self, share_edges=DEFAULT_SHARE_EDGES) -> dict:
        """Distribution of each caption's hardest-companion cosine (column 0), with N stated.

        The hardest companion is a maximum over N captions, so it grows with N:
        compare datasets only at similar ``n_captions``.
        """
        summary = summarize_values(self.companion_cosine[:, 0] if self.top_k else np.array([]),
                                   share_edges=share_edges, bins=self.negatives.bins,
                                   low=self.negatives.low, high=self.negatives.high)
        summary["n_captions"] = int(self.n)
        summary["n_with_companion"] = int(summary["n"])
        summary["mode"] = self.companion_mode
        if self.companion_recall is not None:
            summary["recall"] = dict(self.companion_recall)
        return summary


def prepare_inputs(vectors, group_codes, device=None):
    """Check and move inputs: (unit float32 vectors on device, int64 group codes on device, device)."""
    import torch

    from capgeo.device import default_device

    device = torch.device(device if device is not None else default_device())
    matrix = torch.as_tensor(vectors)
    if matrix.ndim != 2:
        raise CapgeoError(f"caption embeddings must be a 2-D array (captions x width), got shape {tuple(matrix.shape)}")
    n = int(matrix.shape[0])
    if n < 2:
        raise CapgeoError(f"pairwise statistics need at least 2 captions, got {n}")
    if matrix.shape[1] < 1:
        raise CapgeoError("caption embeddings have width 0")
    matrix = matrix.to(device=device, dtype=torch.float32)
    # a row holding NaN or inf has a non-finite sum; checking row sums first avoids
    # torch.isfinite's temporaries (~5 bytes per element: 0.5 GB at 100,000 x 768)
    suspects = torch.nonzero(~torch.isfinite(matrix.sum(dim=1)))[:, 0]
    if suspects.numel():
        # a finite row can still overflow its sum: check the suspects element by element
        finite = torch.isfinite(matrix[suspects]).all(dim=1)
        if not bool(finite.all()):
            bad = int(suspects[torch.nonzero(~finite)[0, 0]])
            raise CapgeoError(f"caption embedding {bad} contains NaN or infinite values")
    norms = torch.linalg.vector_norm(matrix, dim=1, keepdim=True)
    # cosine needs unit vectors. Embeddings that already are (norms within 1e-6 of 1, so
    # cosines within ~2e-6) are used as given: no copy, which at 1M x 768 saves 3 GiB
    if bool(((norms - 1).abs() > UNIT_NORM_TOLERANCE).any()):
        original = matrix
        matrix = matrix / norms
        # a float32 norm can overflow (values ~1e20 and up) or underflow (~1e-20 and
        # down): those rows are normalised in float64
        extreme = torch.nonzero(~torch.isfinite(norms[:, 0]) | (norms[:, 0] == 0))[:, 0]
        if extreme.numel():
            rows = original[extreme].to(torch.float64)
            row_norms = torch.linalg.vector_norm(rows, dim=1, keepdim=True)
            if bool((row_norms == 0).any()):
                bad = int(extreme[torch.nonzero(row_norms[:, 0] == 0)[0, 0]])
                raise CapgeoError(f"caption embedding {bad} is all zeros: its cosine is undefined")
            matrix[extreme] = (rows / row_norms).to(torch.float32)

    codes = np.asarray(group_codes)
    if codes.shape != (n,):
        raise CapgeoError(f"group codes must have one entry per caption ({n}), got shape {codes.shape}")
    if not np.issubdtype(codes.dtype, np.integer):
        raise CapgeoError(f"group codes must be integers, got dtype {codes.dtype}")
    if np.unique(codes).size < 2:
        raise CapgeoError(
            "all captions belong to one group (image): there are no pairs of different groups to compare"
        )
    groups = torch.as_tensor(codes.astype(np.int64), device=device)
    return matrix, groups, device


def same_group_pair_count(group_codes) -> int:
    sizes = np.unique(np.asarray(group_codes), return_counts=True)[1].astype(np.int64)
    return int((sizes * (sizes - 1) // 2).sum())


def scan_pairs(
    vectors,
    group_codes,
    *,
    top_k: int = DEFAULT_TOP_K,
    block_size: int = DEFAULT_BLOCK_SIZE,
    bins: int = DEFAULT_BINS,
    device=None,
    progress: bool | None = None,
    histograms: bool = True,
    bookkeeping_threads: int | None = 1,
) -> PairScan:
    """Exact pairwise statistics of unit caption embeddings in one blockwise pass.

    ``vectors``: (N, d) array or tensor (normalised here unless already unit length);
    ``group_codes``: (N,) integers, captions of one image share a code. ``histograms=False`` skips the
    distributions and computes the hardest companions only (estimate mode uses it).
    ``progress``: None shows a bar on a terminal only. ``bookkeeping_threads``: CPU
    threads for everything but the matmuls (histogram, top-k, merges); None keeps
    torch's setting. One is the default because these memory-bound steps gain little
    from a second thread and lose a lot when cores are shared (measured in
    docs/geometry.md); the matmuls always use torch's thread setting.
    """
    import torch

    if top_k < 0:
        raise CapgeoError(f"top-k must be >= 0, got {top_k}")
    if block_size < 1:
        raise CapgeoError(f"block size must be >= 1, got {block_size}")
    started = time.perf_counter()
    matrix, groups, device = prepare_inputs(vectors, group_codes, device)
    n = matrix.shape[0]
    block_size = min(block_size, n)
    state = _ScanState(n, top_k, block_size, bins, device, histograms)
    starts = list(range(0, n, block_size))
    group_sets = [np.unique(np.asarray(group_codes)[s:s + block_size]) for s in starts]
    total_tiles = len(starts) * (len(starts) + 1) // 2
    bookkeeping_threads = _CpuThreads(device, bookkeeping_threads)

    with torch.inference_mode(), _threads_for_tiles(device, block_size), \
            progress_bar("pairwise cosines", total_tiles, enabled=progress) as bar:
        for row_block, row_start in enumerate(starts):
            row_end = min(row_start + block_size, n)
            rows = matrix[row_start:row_end]
            for column_block in range(row_block, len(starts)):
                column_start = starts[column_block]
                column_end = min(column_start + block_size, n)
                tile = state.tile(row_end - row_start, column_end - column_start)
                torch.mm(rows, matrix[column_start:column_end].T, out=tile)
                # most tiles hold no pair of one group when captions of a group are adjacent
                shares_groups = np.intersect1d(group_sets[row_block], group_sets[column_block]).size > 0
                with bookkeeping_threads:
                    same = None
                    if shares_groups:
                        same = groups[row_start:row_end, None] == groups[None, column_start:column_end]
                    state.accumulate(tile, row_start, column_start, same, diagonal=row_block == column_block)
                bar.advance(1)

    negatives, same_group = state.histograms()
    index, cosine = state.companions()
    return PairScan(
        negatives=negatives,
        same_group=same_group,
        companion_index=index,
        companion_cosine=cosine,
        n=n,
        top_k=top_k,
        block_size=block_size,
        mode="exact",
        negative_pairs_total=n * (n - 1) // 2 - same_group_pair_count(group_codes),
        same_group_pairs_total=same_group_pair_count(group_codes),
        device=str(device),
        seconds=time.perf_counter() - started,
    )


@contextlib.contextmanager
def _threads_for_tiles(device, block_size):
    """One CPU thread for tiny tiles: waking a thread pool costs more than a 64 x 64 matmul
    (milliseconds per tile on a loaded machine). Large tiles keep torch's default."""
    import torch

    if device.type != "cpu" or block_size >= SMALL_TILE:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _CpuThreads:
    """Reusable context: torch runs on ``threads`` CPU threads inside, its own setting outside."""

    def __init__(self, device, threads):
        import torch

        self.torch = torch
        self.active = device.type == "cpu" and threads is not None
        self.threads = threads
        self.saved = None

    def __enter__(self):
        if self.active:
            self.saved = self.torch.get_num_threads()
            self.torch.set_num_threads(self.threads)

    def __exit__(self, *exc):
        if self.active:
            self.torch.set_num_threads(self.saved)


class _ScanState:
    """Running accumulators of the pass, plus reusable tile-sized buffers."""

    def __init__(self, n, top_k, block_size, bins, device, histograms):
        import torch

        self.torch = torch
        self.n, self.top_k, self.bins, self.histograms_on = n, top_k, bins, histograms
        self.device = device
        cells = block_size * block_size
        # flat buffers viewed at each tile's shape, so edge tiles stay contiguous
        self._tile = torch.empty(cells, dtype=torch.float32, device=device)
        self._scratch = torch.empty(cells, dtype=torch.float32, device=device) if histograms else None
        self._bins = torch.empty(cells, dtype=torch.int32, device=device) if histograms else None
        # the tile transposed: topk along rows of a copy is 2-3x faster than along columns
        self._transposed = torch.empty(cells, dtype=torch.float32, device=device)
        # strict lower triangle + diagonal of a diagonal tile: pairs already counted or self-pairs
        self._lower = torch.ones(block_size, block_size, dtype=torch.bool, device=device).tril()
        self._upper = ~self._lower
        self.negative_counts = torch.zeros(bins + 1, dtype=torch.int64, device=device)
        self.same_counts = torch.zeros(bins, dtype=torch.int64, device=device)
        self.negative_moments = np.zeros(3)  # n, sum, sum of squares (float64)
        self.same_moments = np.zeros(3)
        self.negative_range = [float("inf"), float("-inf")]
        self.same_range = [float("inf"), float("-inf")]
        self.best_cosine = torch.full((n, top_k), float("-inf"), dtype=torch.float32, device=device)
        self.best_index = torch.full((n, top_k), -1, dtype=torch.int64, device=device)

    def tile(self, rows, columns):
        return self._tile[: rows * columns].view(rows, columns)

    def accumulate(self, tile, row_start, column_start, same, diagonal):
        torch = self.torch
        rows, columns = tile.shape
        if self.histograms_on:
            self._histogram(tile, same, diagonal)
        # exclude self-pairs and same-group pairs from companions and from the negatives' max
        if same is not None:
            tile.masked_fill_(same, float("-inf"))
        if diagonal:
            tile.fill_diagonal_(float("-inf"))
        if self.histograms_on:
            self.negative_range[1] = max(self.negative_range[1], float(tile.max()))
        if self.top_k == 0:
            return
        column_ids = torch.arange(column_start, column_start + columns, device=self.device)
        values, ids = _tile_topk(tile, column_ids, self.top_k)
        self._merge(row_start, values, ids)
        if not diagonal:
            row_ids = torch.arange(row_start, row_start + rows, device=self.device)
            transposed = self._transposed[: rows * columns].view(columns, rows)
            transposed.copy_(tile.T)
            values, ids = _tile_topk(transposed, row_ids, self.top_k)
            self._merge(column_start, values, ids)

    def _histogram(self, tile, same, diagonal):
        """Bin counts, moments and min of the tile's pairs (the max is taken after masking)."""
        torch = self.torch
        rows, columns = tile.shape
        cells = rows * columns
        bins = bin_indices_torch(tile, self.bins, scratch=self._scratch[:cells].view(rows, columns),
                                 out=self._bins[:cells].view(rows, columns))
        flat = tile.reshape(-1)
        # float32 sums are cascaded (~1e-7 relative); tiles add up in float64
        included, total, squares = cells, float(flat.sum()), float(torch.dot(flat, flat))
        minimum = float(flat.min())
        excluded_minimum = float("inf")
        if diagonal:
            # each unordered pair once: the strict upper triangle. Its sums are those of the
            # whole tile less the diagonal, halved (the tile is symmetric up to float rounding)
            bins.masked_fill_(self._lower[:rows, :columns], self.bins)  # overflow bin, discarded
            self_pairs = tile.diagonal()
            included = rows * (rows - 1) // 2
            total = (total - float(self_pairs.sum())) / 2
            squares = (squares - float(torch.dot(self_pairs, self_pairs))) / 2
            excluded_minimum = float(self_pairs.min())
            if same is not None:
                same = same & self._upper[:rows, :columns]
        if same is not None:
            inside = tile[same]
            if inside.numel():
                inside_bins = bins[same]
                same_counts = torch.bincount(inside_bins, minlength=self.bins + 1)
                self.same_counts += same_counts[: self.bins]
                self.negative_counts -= same_counts
                inside_total = float(inside.sum())
                inside_squares = float(torch.dot(inside, inside))
                self.same_moments += (inside.numel(), inside_total, inside_squares)
                low, high = torch.aminmax(inside)
                self.same_range = [min(self.same_range[0], float(low)), max(self.same_range[1], float(high))]
                excluded_minimum = min(excluded_minimum, float(low))
                included -= int(inside.numel())
                total -= inside_total
                squares -= inside_squares
        self.negative_counts += torch.bincount(bins.reshape(-1), minlength=self.bins + 1)
        self.negative_moments += (included, total, squares)
        if included and excluded_minimum <= minimum + 1e-6:
            # the tile's minimum may be a self or same-group pair: take it over negatives only
            excluded = torch.zeros_like(tile, dtype=torch.bool) if same is None else same.clone()
            if diagonal:
                excluded |= self._lower[:rows, :columns]
            minimum = float(tile.masked_fill(excluded, float("inf")).min())
        if included:
            self.negative_range[0] = min(self.negative_range[0], minimum)

    def _merge(self, start, values, ids):
        """Merge a tile's candidates into the running top-k of rows start..start+len.

        Tiles reach each row in increasing column order, so every candidate's index is
        larger than those already kept: a stable sort by cosine (running list first)
        keeps equal cosines in index order.
        """
        torch = self.torch
        end = start + values.shape[0]
        merged_values = torch.cat([self.best_cosine[start:end], values], dim=1)
        merged_ids = torch.cat([self.best_index[start:end], ids], dim=1)
        sorted_values, order = torch.sort(merged_values, dim=1, descending=True, stable=True)
        self.best_cosine[start:end] = sorted_values[:, : self.top_k]
        self.best_index[start:end] = torch.gather(merged_ids, 1, order[:, : self.top_k])

    def histograms(self):
        negatives, same_group = Histogram(bins=self.bins), Histogram(bins=self.bins)
        if self.histograms_on:
            counts = self.negative_counts[: self.bins].cpu().numpy()
            negatives.add_counts(counts, n=int(self.negative_moments[0]), total=self.negative_moments[1],
                                 total_squares=self.negative_moments[2], minimum=self.negative_range[0],
                                 maximum=self.negative_range[1])
            same_group.add_counts(self.same_counts.cpu().numpy(), n=int(self.same_moments[0]),
                                  total=self.same_moments[1], total_squares=self.same_moments[2],
                                  minimum=self.same_range[0], maximum=self.same_range[1])
        return negatives, same_group

    def companions(self):
        cosine = self.best_cosine.cpu().numpy().astype(np.float32)
        index = self.best_index.cpu().numpy().astype(np.int64)
        missing = ~np.isfinite(cosine)
        cosine[missing] = np.nan
        index[missing] = -1
        return index, cosine


def _tile_topk(tile, ids, k):
    """Top-k of each row of ``tile`` (a view is fine): cosine descending, equal cosines by id.

    ``ids`` gives each column's caption index (ascending). Returns (values, ids) with
    min(k, columns) columns.
    """
    torch = _torch()
    rows, columns = tile.shape
    if columns <= k:
        values, positions = torch.sort(tile, dim=1, descending=True, stable=True)
        return values, ids[positions]
    values, positions = torch.topk(tile, k + 1, dim=1, largest=True, sorted=True)
    # topk picks and orders arbitrarily among equal values. Where the k-th and (k+1)-th
    # tie, the choice matters: redo those rows with a stable (lowest id first) sort.
    # Where ties sit inside the top-k, only the order does: sort those rows' ids.
    boundary = (values[:, k - 1] == values[:, k]) & torch.isfinite(values[:, k - 1])
    values, positions = values[:, :k], positions[:, :k]
    inner = ((values[:, 1:] == values[:, :-1]) & torch.isfinite(values[:, 1:])).any(dim=1)
    tied = boundary | inner
    if bool(tied.any()):
        tied_rows = torch.nonzero(tied)[:, 0]
        exact_values, exact_positions = torch.sort(tile[tied_rows], dim=1, descending=True, stable=True)
        values = values.clone()
        positions = positions.clone()
        values[tied_rows] = exact_values[:, :k]
        positions[tied_rows] = exact_positions[:, :k]
    return values, ids[positions]


def _sort_desc_by_value_then_index(values, ids):
    """Sort each row by value descending, ties by id ascending (-1 placeholders first among -inf)."""
    torch = _torch()
    by_id = torch.argsort(ids, dim=1, stable=True)
    values = torch.gather(values, 1, by_id)
    ids = torch.gather(ids, 1, by_id)
    order = torch.sort(values, dim=1, descending=True, stable=True).indices
    return torch.gather(values, 1, order), torch.gather(ids, 1, order)


def _torch():
    import torch

    return torch


def query_companions(vectors, group_codes, queries, *, top_k: int = DEFAULT_TOP_K,
                     block_size: int = DEFAULT_BLOCK_SIZE, device=None):
    """Exact top-k other-group companions of the captions ``queries`` only.

    Same ordering rules as :func:`scan_pairs` (cosine desc, lower index first); used to
    measure the recall of approximate companions on a sample of captions.
    Returns (index (q, k) int64, cosine (q, k) float32) with -1 / NaN where missing.
    """
    import torch

    matrix, groups, device = prepare_inputs(vectors, group_codes, device)
    queries = torch.as_tensor(np.asarray(queries, dtype=np.int64), device=device)
    n = matrix.shape[0]
    best_cosine = torch.full((len(queries), top_k), float("-inf"), device=device)
    best_index = torch.full((len(queries), top_k), -1, dtype=torch.int64, device=device)
    with torch.inference_mode():
        for start in range(0, n, block_size):
            end = min(start + block_size, n)
            tile = matrix[queries] @ matrix[start:end].T
            columns = torch.arange(start, end, device=device)
            excluded = (groups[queries, None] == groups[None, start:end]) | (queries[:, None] == columns[None, :])
            tile.masked_fill_(excluded, float("-inf"))
            values, ids = _tile_topk(tile, columns, top_k)
            merged_values, merged_ids = _sort_desc_by_value_then_index(torch.cat([best_cosine, values], 1),
                                                                       torch.cat([best_index, ids], 1))
            best_cosine, best_index = merged_values[:, :top_k], merged_ids[:, :top_k]
    cosine = best_cosine.cpu().numpy().astype(np.float32)
    index = best_index.cpu().numpy()
    missing = ~np.isfinite(cosine)
    cosine[missing], index[missing] = np.nan, -1
    return index, cosine
