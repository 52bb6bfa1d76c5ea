"""One blockwise pass over the caption cosine-similarity matrix.

The N x N matrix is never built: the pass walks its upper triangle in
``block_size x block_size`` tiles (each filled from fixed-shape arithmetic block products,
:mod:`capgeo.geometry.torch_blocks`, so every cosine is the same float whatever the tile)
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
import contextvars
import time
from dataclasses import dataclass, field

import numpy as np

from capgeo.encoders.base import UNIT_NORM_TOLERANCE
from capgeo.errors import CapgeoError
from capgeo.preflight import check_pair_threshold
from capgeo.geometry.distribution import (
    DEFAULT_SHARE_EDGES,
    Histogram,
    bin_indices_torch,
    summarize_values,
)
from capgeo.geometry.partials import (PairPartial, Tallies, TooManyPairs, exact_units, pass_partial,
                                      sorted_pairs)
from capgeo.geometry.precision import (
    ReducedProducts,
    check_precision,
    matmul_precision,
    rescored_cosines,
)
from capgeo.geometry.scan_options import ScanOptions
from capgeo.defaults import PAIR_BLOCK_SIZE, TOP_K
from capgeo.progress import progress_bar

# Another driver of the same tiles and merge (capgeo.scale runs them as Ray tasks). It is
# installed from outside for the length of a command, so this engine imports no executor.
_pass_runner: contextvars.ContextVar = contextvars.ContextVar("capgeo_pass_runner", default=None)


@contextlib.contextmanager
def running_passes_with(runner):
    """Inside the block, :func:`scan_pairs` hands its work to ``runner(vectors, group_codes, options,
    exclude_codes=...)`` (``options`` a ScanOptions)."""
    token = _pass_runner.set(runner)
    try:
        yield
    finally:
        _pass_runner.reset(token)
DEFAULT_TOP_K = TOP_K
# a tile side where more than this share of cells may enter the top-k lists takes the
# dense path (a top-k over every cell); below it the few are picked out and merged
DENSE_ABOVE_SHARE = 1 / 64


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
        if "precision" in self.extra:
            summary["precision"] = dict(self.extra["precision"])
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


def runs_on_numpy(device, precision: str = "fp32") -> bool:
    """Whether the pass runs in numpy (the CPU at fp32) rather than torch (cuda, mps, tf32, bf16)."""
    from capgeo.device import default_device

    name = default_device() if device is None else str(device)
    return precision == "fp32" and name.split(":")[0] == "cpu"


def prepare_inputs(vectors, group_codes, device=None, *, precision: str = "fp32"):
    """Check and move inputs: (unit float32 vectors on device, int64 group codes on device, device).

    On the CPU at fp32 these are numpy arrays and the device is ``"cpu"`` (the numpy pass of
    :mod:`capgeo.geometry.cpu_pass`, no torch); elsewhere torch tensors and a torch.device.
    """
    from capgeo.device import check_device, default_device

    # the hardware is asked for here, not only when a model loads: a run whose vectors all come
    # from the cache loads none, and still runs this pass on --device
    check_device(device)
    from capgeo.geometry.cpu_pass import check_embedding_shape, checked_group_codes, prepare_arrays

    if runs_on_numpy(device, precision):
        matrix, groups = prepare_arrays(vectors, group_codes)
        return matrix, groups, "cpu"
    import torch

    device = torch.device(device if device is not None else default_device())
    matrix = torch.as_tensor(vectors)
    check_embedding_shape(tuple(matrix.shape))
    n = int(matrix.shape[0])
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

    groups = torch.as_tensor(checked_group_codes(group_codes, n), device=device)
    return matrix, groups, device


def same_group_pair_count(group_codes) -> int:
    sizes = np.unique(np.asarray(group_codes), return_counts=True)[1].astype(np.int64)
    return int((sizes * (sizes - 1) // 2).sum())


@dataclass(frozen=True)
class TileGrid:
    """The pass's tiles: rows ``[b * block_size, (b + 1) * block_size)`` form block ``b``;
    tile (r, c) with r <= c holds block r's rows against block c's columns."""

    n: int
    block_size: int

    @property
    def blocks(self) -> int:
        return -(-self.n // self.block_size)

    def span(self, block: int) -> tuple[int, int]:
        start = block * self.block_size
        return start, min(start + self.block_size, self.n)

    def tiles(self) -> list[tuple[int, int]]:
        """Every tile of the upper triangle, in the row-major order the pass walks them."""
        return [(row, column) for row in range(self.blocks) for column in range(row, self.blocks)]


def scan_pairs(vectors, group_codes, options: ScanOptions | None = None, *, exclude_codes=None,
               **values) -> PairScan:
    """Exact pairwise statistics of unit caption embeddings in one blockwise pass.

    ``vectors``: (N, d) array or tensor (normalised here unless already unit length);
    ``group_codes``: (N,) integers, captions of one image share a code. ``options``: a
    :class:`~capgeo.geometry.scan_options.ScanOptions`; its fields may also be given as keywords
    (``top_k=5``), which replace those of ``options``. Of its fields: ``block_size``:
    rows per tile, None sizes it from the device and N (:func:`choose_block_size`).
    ``histograms=False`` skips the distributions and computes the hardest companions only
    (estimate mode uses it). ``threshold``: also collect every different-group pair with
    cosine >= threshold (``PairScan.extra["pairs"]``: rows, columns, cosines), from the same
    tiles. ``precision``: ``fp32`` (exact), or ``tf32`` / ``bf16`` tile products with the
    companions and threshold pairs re-scored in float32 and the histograms' error stated in
    ``PairScan.extra["precision"]`` (:mod:`capgeo.geometry.precision`). ``count_at_or_above``:
    also count the different-group pairs with cosine >= that value, exactly (re-scored under
    tf32 / bf16), without keeping them (``PairScan.extra["count_at_or_above"]``).
    ``max_pairs``: with ``threshold``, raise :class:`TooManyPairs` (a :class:`CapgeoError`) as
    soon as more pairs than this reach it, so the pairs kept stay bounded.
    ``progress``: None shows a bar on a terminal only. ``bookkeeping_threads``: CPU
    threads for everything but the matmuls (histogram, top-k, merges); None keeps
    torch's setting. One is the default because these memory-bound steps gain little
    from a second thread and lose a lot when cores are shared (measured in
    docs/geometry.md); the matmuls always use torch's thread setting. The estimate's fields
    (``n_pairs``, ``seed``, ``companions``, ``recall_queries``) do not apply here.
    ``exclude_codes``: (N,) integers; pairs of equal codes are no companions and no threshold
    pairs (the histograms still count them): `dupes --skip-exact` passes one code per text.

    This is the local driver of the engine: :func:`tile_partial` computes what any set
    of tiles contributes, :func:`capgeo.geometry.partials.merge_partials` combines such
    partials, :func:`finish_scan` turns the whole into a :class:`PairScan`. Running the
    tiles in other processes and merging gives bit-identical results.
    """
    options = ScanOptions.of(options, "scan_pairs", **values)
    if options.bins < 1:
        raise CapgeoError(f"bins must be at least 1, got {options.bins}")
    for name in ("threshold", "count_at_or_above"):
        if getattr(options, name) is not None:
            check_pair_threshold(getattr(options, name), name)
    runner = _pass_runner.get()
    if runner is not None:  # e.g. inside a --ray command (capgeo.scale): the same tiles and merge, elsewhere
        return runner(vectors, group_codes, options, exclude_codes=exclude_codes)
    started = time.perf_counter()
    check_precision(options.precision)
    matrix, groups, device = prepare_inputs(vectors, group_codes, options.device, precision=options.precision)
    grid = make_grid(matrix.shape[0], options.block_size, device, top_k=options.top_k)
    partial = tile_partial(matrix, groups, grid, grid.tiles(), options, exclude_codes=exclude_codes)
    return finish_scan(partial, group_codes, device=device, seconds=time.perf_counter() - started)


def make_grid(n: int, block_size: int | None, device, *, top_k: int = DEFAULT_TOP_K) -> TileGrid:
    """The tile grid for ``n`` captions: ``block_size`` rows per tile, or sized from the device."""
    from capgeo.geometry.tile_size import choose_block_size

    if top_k < 0:
        raise CapgeoError(f"top-k must be >= 0, got {top_k}")
    if block_size is None:
        block_size = choose_block_size(n, device)
    if block_size < 1:
        raise CapgeoError(f"block size must be >= 1, got {block_size}")
    return TileGrid(n, min(int(block_size), n))


def tile_partial(matrix, groups, grid: TileGrid, tiles, options: ScanOptions | None = None, *, exclude_codes=None,
                 **values) -> PairPartial:
    """What ``tiles`` ((row block, column block) pairs, row <= column) contribute to the pass.

    ``matrix``, ``groups``: from :func:`prepare_inputs` (unit float32 vectors and int64
    group codes, on the device the tiles run on). The tiles are walked in row-major
    order whatever order they are given in (the running top-k relies on it). Host work
    per tile is a fixed number of torch calls; group membership is tested on the device.
    ``options`` (or its fields as keywords) as for :func:`scan_pairs`; its ``device`` is not
    read (the tiles run where ``matrix`` is). ``max_pairs``: raise :class:`TooManyPairs` as
    soon as more pairs than this reach ``threshold`` (memory stays bounded however low the
    threshold). Numpy inputs (from :func:`prepare_inputs` on the CPU) run the numpy pass at
    fp32, torch's at tf32 / bf16.
    """
    options = ScanOptions.of(options, "tile_partial", **values)
    precision, progress = options.precision, options.progress
    tiles = sorted({(int(row), int(column)) for row, column in tiles})
    if any(not 0 <= row <= column < grid.blocks for row, column in tiles):
        raise ValueError(f"tiles must satisfy 0 <= row block <= column block < {grid.blocks}")
    if exclude_codes is not None:
        exclude_codes = np.asarray(exclude_codes, dtype=np.int64)
        if exclude_codes.shape != (grid.n,):
            raise CapgeoError(f"exclusion codes must have one entry per caption ({grid.n}), got shape "
                              f"{exclude_codes.shape}")
    if isinstance(matrix, np.ndarray) and check_precision(precision) == "fp32":
        from capgeo.geometry.cpu_pass import ArrayScanState, block_threads

        with block_threads() as pool, progress_bar("pairwise cosines", len(tiles), enabled=progress) as bar:
            state = ArrayScanState(grid, matrix, np.asarray(groups), options, exclude_codes, pool)
            state.add_tiles(tiles, bar.advance)
        return state.partial()
    import torch

    from capgeo.geometry.torch_blocks import block_threads as torch_block_threads

    if isinstance(matrix, np.ndarray):
        import warnings

        with warnings.catch_warnings():  # (Ray's object-store arrays are read-only; the tiles only read them)
            warnings.simplefilter("ignore", UserWarning)
            matrix, groups = torch.from_numpy(matrix), torch.from_numpy(np.asarray(groups))
    device = matrix.device
    reduced = precision_error = None
    with torch.inference_mode():
        if check_precision(precision) != "fp32":
            reduced = ReducedProducts(matrix, precision)
            precision_error = {"cosine_error_bound": reduced.bound, "product": reduced.product_kind,
                               **reduced.measure(options.bins)}
        state = _ScanState(grid, matrix, groups, options, reduced,
                           None if exclude_codes is None else torch.from_numpy(exclude_codes).to(device))
    threads = _CpuThreads(device, options.bookkeeping_threads if options.bookkeeping_threads is not None
                          else torch.get_num_threads())
    with torch.inference_mode(), matmul_precision(precision), torch_block_threads(device) as pool, \
            progress_bar("pairwise cosines", len(tiles), enabled=progress) as bar:
        state.products.pool = pool
        for row_block, column_block in tiles:
            state.add_tile(row_block, column_block, threads)
            bar.advance(1)
    partial = state.partial()
    partial.precision, partial.precision_error = precision, precision_error
    return partial


def finish_scan(partial: PairPartial, group_codes, *, device=None, seconds: float = 0.0) -> PairScan:
    """The :class:`PairScan` of a partial that covers every tile of the grid."""
    negatives, same_group = Histogram(bins=partial.bins), Histogram(bins=partial.bins)
    if partial.histograms:
        for histogram, counts, moments in ((negatives, partial.negative_counts, partial.negative),
                                           (same_group, partial.same_counts, partial.same)):
            histogram.add_counts(counts, n=int(counts.sum()), total=moments.sum,
                                 total_squares=moments.sum_of_squares, minimum=moments.minimum,
                                 maximum=moments.maximum)
    index, cosine = partial.dense_companions()
    same_total = same_group_pair_count(group_codes)
    n = partial.n
    scan = PairScan(
        negatives=negatives,
        same_group=same_group,
        companion_index=index,
        companion_cosine=cosine,
        n=n,
        top_k=partial.top_k,
        block_size=partial.block_size,
        mode="exact",
        negative_pairs_total=n * (n - 1) // 2 - same_total,
        same_group_pairs_total=same_total,
        device=str(device if device is not None else "cpu"),
        seconds=seconds,
    )
    if partial.threshold is not None:
        scan.extra["threshold"] = float(partial.threshold)
        scan.extra["pairs"] = sorted_pairs(partial)
    if partial.count_threshold is not None:
        scan.extra["count_at_or_above"] = {"threshold": float(partial.count_threshold),
                                           "pairs": int(partial.n_at_or_above)}
    scan.extra["tiles"] = int(partial.tiles)
    if partial.precision != "fp32":
        scan.extra["precision"] = {"mode": partial.precision, **(partial.precision_error or {}),
                                   "rows_too_close_to_call": int(partial.rows_too_close),
                                   "pairs_rescored": int(partial.pairs_rescored),
                                   "companions": "exact (re-scored from the float32 vectors)"}
    return scan


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
    """Device-side accumulators of the tiles one call walks, plus reusable tile-sized buffers.

    Every cosine comes from a fixed-shape arithmetic block product
    (:class:`capgeo.geometry.torch_blocks.TorchBlockProducts`), so each is the same float for
    any tile size. The float64 sums are taken per arithmetic block (each row of the A x A
    product summed in float32, rows added in float64), by the one tile that holds the block's
    first counted cell, kept on the device and added exactly by :meth:`partial`: they do not
    depend on the tiles either, nor on how tiles are grouped.
    """

    def __init__(self, grid, matrix, groups, options: ScanOptions, reduced=None, exclude_codes=None):
        """``options``: its top_k, bins, histograms, threshold, max_pairs and count_at_or_above."""
        import torch

        from capgeo.geometry.torch_blocks import TorchBlockProducts

        self.exclude = exclude_codes
        self.torch = torch
        self.grid, self.matrix, self.groups = grid, matrix, groups
        top_k, bins, histograms = options.top_k, options.bins, options.histograms
        self.top_k, self.bins, self.histograms_on, self.threshold = top_k, bins, histograms, options.threshold
        device = self.device = matrix.device
        n, block_size = grid.n, grid.block_size
        cells = block_size * block_size
        # a tile can hold a same-group pair only if the group code ranges of its row and
        # column blocks overlap (always true near the diagonal when groups are adjacent):
        # an O(1) test per tile, the exact mask is then built on the device
        codes = groups.cpu().numpy() if groups.device.type != "cpu" else groups.numpy()
        spans = [grid.span(block) for block in range(grid.blocks)]
        self._code_low = [int(codes[start:end].min()) for start, end in spans]
        self._code_high = [int(codes[start:end].max()) for start, end in spans]
        # flat buffers viewed at each tile's shape, so edge tiles stay contiguous
        self._tile = torch.empty(cells, dtype=torch.float32, device=device)
        self._scratch = torch.empty(cells, dtype=torch.float32, device=device) if histograms else None
        self._bins = torch.empty(cells, dtype=torch.int32, device=device) if histograms else None
        # the tile transposed: topk along rows of a copy is 2-3x faster than along columns
        self._transposed = torch.empty(cells, dtype=torch.float32, device=device) if top_k else None
        # cells above their query's running k-th best (less the error margin for tf32 / bf16)
        self._above = torch.empty(cells, dtype=torch.bool, device=device) if top_k else None
        # strict lower triangle + diagonal of a diagonal tile: pairs already counted or self-pairs
        self._lower = torch.ones(block_size, block_size, dtype=torch.bool, device=device).tril()
        self.negative_counts = torch.zeros(bins + 1, dtype=torch.int64, device=device)
        self.same_counts = torch.zeros(bins + 1, dtype=torch.int64, device=device)
        self._tile_number = 0
        inputs = matrix if reduced is None else reduced.inputs
        self.products = TorchBlockProducts(inputs, multiply=None if reduced is None else reduced.multiply,
                                           on_block=self._block_sums if histograms else None)
        size = self.products.size
        # group codes of the arithmetic blocks, padded (padding cells' cosines are zero: whatever
        # group they seem to share, they add nothing to a sum)
        blocks = -(-n // size)
        self._padded_groups = torch.full((blocks * size,), -1, dtype=torch.int64, device=device)
        self._padded_groups[:n] = groups
        self._block_low = [int(codes[start:start + size].min()) for start in range(0, n, size)]
        self._block_high = [int(codes[start:start + size].max()) for start in range(0, n, size)]
        self._block_sum_parts = []  # (4,) float64 per arithmetic block: partials.ALL_SUM, ...
        self._span = (0, 0, 0, 0)  # the tile being walked: rows, then columns
        infinity = torch.tensor(float("inf"), device=device)
        # running (min, max) of negatives and of same-group pairs, on the device (no sync per tile)
        self.negative_range = torch.stack([infinity, -infinity])
        self.same_range = torch.stack([infinity, -infinity])
        self.best_cosine = torch.full((n, top_k), float("-inf"), dtype=torch.float32, device=device)
        self.best_index = torch.full((n, top_k), -1, dtype=torch.int64, device=device)
        self._touched = torch.zeros(n, dtype=torch.bool, device=device)
        self._pairs = []
        self._mask_buffer = None
        self._pair_count = 0
        self.max_pairs = options.max_pairs
        self.reduced = reduced  # tf32 / bf16 products (capgeo.geometry.precision), None for fp32
        # work counters of tf32 / bf16 (they depend on how the tiles are split, the results do not)
        self._rows_too_close = 0
        self._pairs_rescored = 0
        self.count_threshold = options.count_at_or_above
        self._n_at_or_above = 0

    def add_tile(self, row_block, column_block, threads):
        torch = self.torch
        row_start, row_end = self.grid.span(row_block)
        column_start, column_end = self.grid.span(column_block)
        rows, columns = row_end - row_start, column_end - column_start
        tile = self._tile[: rows * columns].view(rows, columns)
        self._span = (row_start, row_end, column_start, column_end)
        self.products.tile_into(row_start, row_end, column_start, column_end, tile)
        shares_groups = (self._code_low[row_block] <= self._code_high[column_block]
                         and self._code_low[column_block] <= self._code_high[row_block])
        diagonal = row_block == column_block
        with threads:
            same = None
            if shares_groups:
                # the same-group cells as (rows, columns): few, so indexing them beats masking whole tiles
                same = _true_cells(self.groups[row_start:row_end, None] == self.groups[None, column_start:column_end])
            self._accumulate(tile, row_start, column_start, same, diagonal,
                             row_end=row_end, column_end=column_end)
        self._tile_number += 1

    def _accumulate(self, tile, row_start, column_start, same, diagonal, *, row_end, column_end):
        rows, columns = tile.shape
        self._touched[row_start:row_start + rows] = True
        self._touched[column_start:column_start + columns] = True
        # pairs counted elsewhere or self-pairs: the lower triangle and diagonal of a diagonal tile
        lower = self._lower[:rows, :columns] if diagonal else None
        if self.histograms_on:
            counted_same = same
            if same is not None and diagonal:  # the upper triangle's
                upper = same[0] < same[1]
                counted_same = same[0][upper], same[1][upper]
            self._histogram(tile, counted_same, lower)
        # exclude self-pairs and same-group pairs from companions and from the pairs kept
        if same is not None:
            tile.index_put_(same, tile.new_tensor(float("-inf")))
        if self.exclude is not None:
            excluded = self.exclude[row_start:row_end, None] == self.exclude[None, column_start:column_end]
            tile.masked_fill_(excluded, float("-inf"))
        if diagonal:
            tile.fill_diagonal_(float("-inf"))
        if self.threshold is not None:
            self._collect_pairs(tile, row_start, column_start, lower)
        if self.count_threshold is not None:
            self._n_at_or_above += int(self._pairs_at_or_above(tile, row_start, column_start, lower,
                                                               self.count_threshold)[0].numel())
        if self.top_k == 0:
            return
        self._update_companions(tile, row_start, column_start, by_column=False)
        if not diagonal:
            self._update_companions(tile, column_start, row_start, by_column=True)

    def _update_companions(self, tile, query_start, candidate_start, *, by_column):
        """Merge the tile's candidates into the running top-k of its rows (``by_column``: of its columns).

        Only cells above a query's running k-th best can enter its top-k: candidates reach a
        query in increasing index order, so one equal to the k-th loses the tie. Once a query
        has met a tile or two, few cells pass, so they are picked out and merged directly,
        without a top-k over every cell (or a transposed copy of the tile for the columns).
        A query's first tiles, where most cells pass, take the dense path. tf32 / bf16 tiles
        do the same with their cells' approximate cosines, widened by the error margin, and
        re-score what they pick (:func:`capgeo.geometry.precision.rescored_cosines`).
        """
        rows, columns = tile.shape
        if self._merge_cells_above_kth(tile, query_start, candidate_start, by_column):
            return
        if by_column:
            transposed = self._transposed[: rows * columns].view(columns, rows)
            tile = transposed.copy_(tile.T)
        self._merge_dense(tile, query_start, candidate_start)

    def _merge_dense(self, tile, query_start, candidate_start):
        """Merge the best candidates of every row of ``tile`` (queries ``query_start``.. against
        candidates ``candidate_start``..) into the running lists."""
        if self.reduced is not None:
            self._merge_rescored_finalists(tile, query_start, candidate_start)
            return
        candidate_ids = self.torch.arange(candidate_start, candidate_start + tile.shape[1], device=self.device)
        values, ids = _tile_topk(tile, candidate_ids, self.top_k)
        self._merge(query_start, values, ids)

    def _most_picks(self, rows, columns, queries) -> float:
        """The most cells a tile side may pick out before the dense path is cheaper."""
        if self.reduced is None:
            return rows * columns * DENSE_ABOVE_SHARE
        # each pick is re-scored (a d-long dot product): fewer than the dense path's 2k + 1 a query
        return queries * (2 * self.top_k + 1)

    def _merge_cells_above_kth(self, tile, query_start, candidate_start, by_column) -> bool:
        """Merge the cells above their query's running k-th best; False (nothing merged) when
        too many pass for that to beat the dense path."""
        torch = self.torch
        rows, columns = tile.shape
        queries = columns if by_column else rows
        kth = self.best_cosine[query_start:query_start + queries, self.top_k - 1]
        if self.reduced is not None:  # an approximate cosine may sit up to the margin below its exact one
            kth = kth - self.reduced.margin
        above = self._above[: rows * columns].view(rows, columns)
        # strictly above: masked cells (-inf) never pass
        torch.gt(tile, kth[None, :] if by_column else kth[:, None], out=above)
        hits = _count_true(above)
        if hits > self._most_picks(rows, columns, queries):
            return False
        if not hits:
            return True
        tile_rows, tile_columns = _true_cells(above)
        if by_column:
            # grouped by query (a column), candidates ascending within each group
            order = torch.argsort(tile_columns, stable=True)
            tile_rows, tile_columns = tile_rows[order], tile_columns[order]
            query, candidate = tile_columns + query_start, tile_rows + candidate_start
        else:
            query, candidate = tile_rows + query_start, tile_columns + candidate_start
        table = self._candidate_table(query, rows * columns // 4)
        if table is None:
            return False
        cosines = tile[tile_rows, tile_columns] if self.reduced is None else self._rescore(query, candidate)
        self._merge_candidates(table, query, candidate, cosines)
        return True

    def _candidate_table(self, query, most_cells):
        """The shape of the merge table of candidates grouped by ``query``: (queries, counts,
        width), or None when it would hold more than ``most_cells`` cells (12 bytes each,
        sorted once), so the pass's memory stays what the tile size allows for
        (capgeo.geometry.tile_size)."""
        queries, counts = self.torch.unique_consecutive(query, return_counts=True)
        width = self.top_k + int(counts.max())
        if most_cells is not None and queries.numel() * width > most_cells:
            return None
        return queries, counts, width

    def _merge_candidates(self, table, query, candidate, cosines):
        """Merge (query, candidate, cosine) triples, grouped by query with candidates ascending
        (and above every index in the query's running list), into the running top-k lists:
        per query, cosine descending then index ascending, as :meth:`_merge`."""
        torch, k = self.torch, self.top_k
        queries, counts, width = table
        # one row per query: its running list, then its candidates; a stable sort by cosine
        # then keeps equal cosines in index order (the running list's indices are all smaller)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.arange(query.numel(), device=self.device) - torch.repeat_interleave(starts, counts) + k
        table_row = torch.repeat_interleave(torch.arange(queries.numel(), device=self.device), counts)
        values = torch.full((queries.numel(), width), float("-inf"), dtype=torch.float32, device=self.device)
        ids = torch.full((queries.numel(), width), -1, dtype=torch.int64, device=self.device)
        values[:, :k] = self.best_cosine[queries]
        ids[:, :k] = self.best_index[queries]
        values[table_row, slot] = cosines
        ids[table_row, slot] = candidate
        values, order = torch.sort(values, dim=1, descending=True, stable=True)
        self.best_cosine[queries] = values[:, :k]
        self.best_index[queries] = torch.gather(ids, 1, order[:, :k])

    def _merge_rescored_finalists(self, tile, query_start, candidate_start):
        """The dense path of tf32 / bf16 tiles: each query's best 2k + 1 candidates by the
        approximate cosine are re-scored and merged. A query whose best left-out candidate
        could still, within the margin, reach its new k-th is merged again from its list
        before the tile, with every candidate within the margin of that k-th re-scored."""
        torch, k = self.torch, self.top_k
        queries, columns = tile.shape
        finalists = min(2 * k + 1, columns)
        approximate, positions = torch.topk(tile, finalists, dim=1, sorted=True)
        finite = torch.isfinite(approximate)
        query_ids = torch.arange(query_start, query_start + queries, device=self.device)
        candidate_ids = positions + candidate_start
        values = torch.full_like(approximate, float("-inf"))
        values[finite] = self._rescore(query_ids[:, None].expand(-1, finalists)[finite], candidate_ids[finite])
        values, ids = _sort_desc_by_value_then_index(values, candidate_ids.masked_fill(~finite, -1))
        running = slice(query_start, query_start + queries)
        before = None
        if finalists < columns:
            before = self.best_cosine[running].clone(), self.best_index[running].clone()
        self._merge(query_start, values[:, :k], ids[:, :k])
        if before is None:  # every candidate was a finalist
            return
        kth = self.best_cosine[running, k - 1]
        # (a finite last finalist means 2k + 1 finite finalists, so a finite k-th)
        unsafe = finite[:, -1] & (approximate[:, -1] + self.reduced.margin >= kth)
        rows = torch.nonzero(unsafe)[:, 0]
        if not rows.numel():
            return
        self._rows_too_close += rows.numel()
        floor = kth[rows] - self.reduced.margin  # (a copy: kth is a view of the lists restored next)
        self.best_cosine[query_start + rows] = before[0][rows]
        self.best_index[query_start + rows] = before[1][rows]
        # rows in groups of at most a sixteenth of the tile's cells: their picks' indices (16
        # bytes each) and merge table (12) then stay within the temporaries the tile size allows
        # for (capgeo.geometry.tile_size), even where every cell is within the margin
        step = max(1, queries * columns // 16 // (k + columns))
        for first in range(0, rows.numel(), step):
            part = rows[first:first + step]
            above = tile[part] > floor[first:first + step, None]
            part_rows, part_columns = _true_cells(above)
            if not part_rows.numel():  # the finalists' re-scored cosines all fell below the k-th
                continue
            query, candidate = query_start + part[part_rows], candidate_start + part_columns
            self._merge_candidates(self._candidate_table(query, None), query, candidate,
                                   self._rescore(query, candidate))

    def _block_sums(self, row_block, column_block, product):
        """Keep the sums of one arithmetic block (``product``: its A x A cosines, row block <=
        column block) if its first counted cell lies in the tile being walked."""
        torch, size = self.torch, self.products.size
        row_start, row_end, column_start, column_end = self._span
        first_row, first_column = row_block * size, column_block * size + (row_block == column_block)
        if not (row_start <= first_row < row_end and column_start <= first_column < min(column_end, self.grid.n)):
            return
        counted = product
        if row_block == column_block:  # the pairs i < j only
            counted = torch.triu(product, 1)
        squares = torch.mul(counted, counted)  # (new tensors: blocks run on several threads)
        sums = [_block_total(counted), _block_total(squares)]
        if self._block_low[row_block] <= self._block_high[column_block] and \
                self._block_low[column_block] <= self._block_high[row_block]:
            codes = self._padded_groups
            same = codes[first_row:first_row + size, None] == codes[None, column_block * size:(column_block + 1) * size]
            inside = torch.where(same, counted, 0.0)
            sums += [_block_total(inside), _block_total(inside.mul_(inside))]
        else:
            sums += [sums[0].new_zeros(()), sums[0].new_zeros(())]
        self._block_sum_parts.append(torch.stack(sums))

    def _rescore(self, rows, columns):
        """Float32 cosines of caption pairs, independent of how they are batched (tf32 / bf16)."""
        self._pairs_rescored += rows.numel()
        return rescored_cosines(self.matrix, rows, columns)

    def _histogram(self, tile, same, lower):
        """Bin counts, float64 sums, min and max of the tile's pairs (upper triangle on the diagonal).
        ``same``: (rows, columns) of the tile's counted same-group cells, or None."""
        torch = self.torch
        rows, columns = tile.shape
        cells = rows * columns
        scratch = self._scratch[:cells].view(rows, columns)
        bins = bin_indices_torch(tile, self.bins, scratch=scratch, out=self._bins[:cells].view(rows, columns))
        if lower is not None:
            bins.masked_fill_(lower, self.bins)  # overflow bin, discarded
        has_same = same is not None and same[0].numel() > 0
        if has_same:
            inside = tile[same]
            self.same_counts += torch.bincount(bins[same], minlength=self.bins + 1)
            low, high = torch.aminmax(inside)
            self.same_range = torch.stack([torch.minimum(self.same_range[0], low),
                                           torch.maximum(self.same_range[1], high)])
            bins.index_put_(same, bins.new_tensor(self.bins))
        self.negative_counts += torch.bincount(bins.reshape(-1), minlength=self.bins + 1)
        if lower is None and not has_same:
            low, high = torch.aminmax(tile)
        else:  # the negatives only: lower triangle and same-group cells set to a value that cannot win
            extremes = []
            for fill, reduce in ((float("inf"), torch.min), (float("-inf"), torch.max)):
                scratch.copy_(tile)
                if lower is not None:
                    scratch.masked_fill_(lower, fill)
                if has_same:
                    scratch.index_put_(same, scratch.new_tensor(fill))
                extremes.append(reduce(scratch))
            low, high = extremes
        self.negative_range = torch.stack([torch.minimum(self.negative_range[0], low),
                                           torch.maximum(self.negative_range[1], high)])

    def _pairs_at_or_above(self, tile, row_start, column_start, lower, threshold):
        """(rows, columns, cosines) of the tile's different-group pairs with cosine >= ``threshold``
        (masked cells are -inf by now); tf32 / bf16 cells within the margin are re-scored first."""
        # one mask buffer for every tile: a new tile-sized mask each time, between the small tensors
        # of kept pairs, fragmented the C heap (a 60k-caption report grew by gigabytes)
        hits = self._mask(tile)
        if self.reduced is None:
            self.torch.ge(tile, threshold, out=hits)
        else:  # approximate cosines: gather within the margin, then keep those whose re-scored cosine passes
            self.torch.ge(tile, threshold - self.reduced.margin, out=hits)
        if lower is not None:
            hits.masked_fill_(lower, False)
        rows, columns = _true_cells(hits)
        if self.reduced is None:
            return rows + row_start, columns + column_start, tile[rows, columns]
        rows, columns = rows + row_start, columns + column_start
        cosines = self._rescore(rows, columns) if rows.numel() else tile.new_empty(0)
        kept = cosines >= threshold
        return rows[kept], columns[kept], cosines[kept]

    def _mask(self, tile):
        """A bool tensor of the tile's shape, on its device, reused from tile to tile."""
        cells = tile.shape[0] * tile.shape[1]
        if self._mask_buffer is None or self._mask_buffer.numel() < cells or self._mask_buffer.device != tile.device:
            self._mask_buffer = self.torch.empty(cells, dtype=self.torch.bool, device=tile.device)
        return self._mask_buffer[:cells].view(tile.shape[0], tile.shape[1])

    def _collect_pairs(self, tile, row_start, column_start, lower):
        """Different-group pairs at or above the threshold, kept."""
        rows, columns, cosines = self._pairs_at_or_above(tile, row_start, column_start, lower, self.threshold)
        if not rows.numel():
            return
        self._pairs.append((rows, columns, cosines))
        self._pair_count += int(rows.numel())
        if self.max_pairs is not None and self._pair_count > self.max_pairs:
            raise TooManyPairs(self.max_pairs, self.threshold)

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

    def partial(self) -> PairPartial:
        """The accumulators as a host-side :class:`PairPartial` (sums added exactly here)."""
        torch = self.torch
        block_sums = torch.stack(self._block_sum_parts).cpu().numpy() if self._block_sum_parts else np.zeros((0, 4))
        pairs = [tuple(torch.cat(parts).cpu().numpy() for parts in zip(*self._pairs))] if self._pairs else []
        touched = torch.nonzero(self._touched)[:, 0]
        return pass_partial(self, Tallies(
            negative_counts=self.negative_counts.cpu().numpy(), same_counts=self.same_counts.cpu().numpy(),
            sums=[sum(exact_units(value) for value in block_sums[:, slot]) for slot in range(4)],
            negative_range=self.negative_range.cpu().numpy(), same_range=self.same_range.cpu().numpy(),
            touched=touched.cpu().numpy(), best_cosine=self.best_cosine[touched].cpu().numpy(),
            best_index=self.best_index[touched].cpu().numpy(), pairs=pairs, tiles=self._tile_number,
            n_at_or_above=self._n_at_or_above, rows_too_close=self._rows_too_close,
            pairs_rescored=self._pairs_rescored))


def _count_true(mask) -> int:
    """Number of True cells of a bool tensor (numpy's count on CPU: ~6x torch's there)."""
    if mask.device.type == "cpu" and mask.is_contiguous():
        return int(np.count_nonzero(mask.numpy()))
    return int(_torch().count_nonzero(mask))


def _true_cells(mask):
    """(rows, columns) of the True cells of a 2-D bool tensor, in row-major order (torch
    documents nonzero's indices as sorted lexicographically, CPU and CUDA; numpy's
    flatnonzero is ascending). On CPU numpy's is used: ~6x faster than torch.nonzero there."""
    torch = _torch()
    if mask.device.type != "cpu" or not mask.is_contiguous():
        return torch.nonzero(mask, as_tuple=True)
    flat = torch.from_numpy(np.flatnonzero(mask.numpy()))
    return torch.div(flat, mask.shape[1], rounding_mode="floor"), torch.remainder(flat, mask.shape[1])


def _block_total(block):
    """Sum of one A x A block (contiguous): each row in float32, rows added in float64.

    One shape, so one reduction kernel in one order for every block. A float64 reduction
    costs ~4x a float32 one on CPU; row sums keep the float32 rounding to one block row
    (~1e-7 relative, averaging out).
    """
    return block.sum(dim=1).to(dtype=_torch().float64).sum()


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
                     block_size: int | None = PAIR_BLOCK_SIZE, device=None):
    """Exact top-k other-group companions of the captions ``queries`` only.

    Same ordering rules as :func:`scan_pairs` (cosine descending, lower index first); used to
    measure the recall of approximate companions on a sample of captions, and by dedup. Every
    cosine comes from one fixed-shape arithmetic block product (the queries' rows against the
    captions', :class:`capgeo.geometry.cpu_pass.BlockProducts`), so ``block_size`` only sets how
    many columns a tile holds (memory): the result is the same for any. Returns (index (q, k)
    int64, cosine (q, k) float32) with -1 / NaN where missing.
    """
    matrix, groups, device = prepare_inputs(vectors, group_codes, device)
    n = matrix.shape[0]
    block_size = make_grid(n, block_size, device).block_size
    if isinstance(matrix, np.ndarray):
        from capgeo.geometry.cpu_pass import BlockProducts, block_threads

        queries = np.asarray(queries, dtype=np.int64)
        with block_threads() as pool:
            products = BlockProducts(matrix[queries], matrix, pool=pool)
            return _query_companions_numpy(products, groups, queries, top_k, block_size)
    import torch

    from capgeo.geometry.torch_blocks import TorchBlockProducts, block_threads

    queries = torch.as_tensor(np.asarray(queries, dtype=np.int64), device=device)
    best_cosine = torch.full((len(queries), top_k), float("-inf"), device=device)
    best_index = torch.full((len(queries), top_k), -1, dtype=torch.int64, device=device)
    with torch.inference_mode(), block_threads(device) as pool:
        products = TorchBlockProducts(matrix[queries], matrix, pool=pool)
        tile_buffer = torch.empty(len(queries) * min(block_size, n), dtype=torch.float32, device=device)
        for start in range(0, n, block_size):
            end = min(start + block_size, n)
            tile = tile_buffer[:len(queries) * (end - start)].view(len(queries), end - start)
            products.tile_into(0, len(queries), start, end, tile)
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


def _query_companions_numpy(products, groups, queries, top_k, block_size):
    """:func:`query_companions` on the CPU: tile by tile of columns, merged by (cosine descending,
    index ascending)."""
    n = products.columns.shape[0]
    best_cosine = np.full((len(queries), top_k), -np.inf, dtype=np.float32)
    best_index = np.full((len(queries), top_k), -1, dtype=np.int64)
    tile_buffer = np.empty(len(queries) * min(block_size, n), dtype=np.float32)
    for start in range(0, n, block_size):
        end = min(start + block_size, n)
        tile = tile_buffer[:len(queries) * (end - start)].reshape(len(queries), end - start)
        products.tile_into(0, len(queries), start, end, tile)
        columns = np.arange(start, end)
        tile[(groups[queries, None] == groups[None, start:end]) | (queries[:, None] == columns[None, :])] = -np.inf
        values = np.concatenate([best_cosine, tile], axis=1)
        ids = np.concatenate([best_index, np.broadcast_to(columns, tile.shape)], axis=1)
        # per row: cosine descending, then index ascending (-1 placeholders sort last among -inf)
        order = np.lexsort((np.where(ids < 0, n, ids), -values), axis=1)[:, :top_k]
        best_cosine = np.take_along_axis(values, order, 1)
        best_index = np.take_along_axis(ids, order, 1)
    cosine = best_cosine.astype(np.float32)
    missing = ~np.isfinite(cosine)
    cosine[missing], best_index[missing] = np.nan, -1
    return best_index, cosine
