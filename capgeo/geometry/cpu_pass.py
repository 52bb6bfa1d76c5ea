"""The pairwise pass on the CPU, in numpy: the same tiles, partials and merge as the torch
engine of :mod:`capgeo.geometry.pairwise`, without importing torch.

Tile-independent arithmetic. ``block_size`` only schedules the work (how many cosines are
held at once). Every cosine is computed in an *arithmetic block* of one fixed shape,
:data:`ARITHMETIC_BLOCK` rows of the vectors against as many rows (the last block of the
vectors zero-padded), always at the same position in it: the cosine of captions i < j is
entry ``(i % A, j % A)`` of the product of block ``i // A`` with block ``j // A``, and the
pair (j, i) reads that same float. A matrix product of one shape runs one kernel in one
order, so every cosine, and so every histogram bin, top-k list and threshold pair, is the
same float whatever the tile size. The float64 sums are taken per arithmetic block (rows
of one block summed in float32, the block's rows added in float64) and added exactly, so
they do not depend on the tile size either; each arithmetic block's sums are added by the
one tile that holds its first cell.

Small tiles (narrower than an arithmetic block) copy their part out of the block product,
kept from one tile to the next; tiles of whole arithmetic blocks are written in place.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from capgeo.defaults import ARITHMETIC_BLOCKS
from capgeo.encoders.base import UNIT_NORM_TOLERANCE
from capgeo.errors import CapgeoError
from capgeo.geometry.distribution import bin_scale_offset
from capgeo.geometry.partials import ALL_SQUARES, ALL_SUM, SAME_SQUARES, SAME_SUM, PairPartial, TooManyPairs, \
    Tallies, exact_units, pass_partial

#: rows of the vectors in one arithmetic block: every cosine is one entry of an A x A product
#: (bench/bench_geometry.py --fixed-shape measures what it costs; 256 pads small datasets less than 512)
ARITHMETIC_BLOCK = ARITHMETIC_BLOCKS["cpu"]



def check_embedding_shape(shape: tuple[int, ...]) -> None:
    """Captions x width, at least 2 captions and width 1: what every engine of the pass takes."""
    if len(shape) != 2:
        raise CapgeoError(f"caption embeddings must be a 2-D array (captions x width), got shape {shape}")
    if shape[0] < 2:
        raise CapgeoError(f"pairwise statistics need at least 2 captions, got {shape[0]}")
    if shape[1] < 1:
        raise CapgeoError("caption embeddings have width 0")


def checked_group_codes(group_codes, n: int) -> np.ndarray:
    """One integer group code per caption, of at least two groups, as int64: what every engine takes."""
    codes = np.asarray(group_codes)
    if codes.shape != (n,):
        raise CapgeoError(f"group codes must have one entry per caption ({n}), got shape {codes.shape}")
    if not np.issubdtype(codes.dtype, np.integer):
        raise CapgeoError(f"group codes must be integers, got dtype {codes.dtype}")
    if np.unique(codes).size < 2:
        raise CapgeoError(
            "all captions belong to one group (image): there are no pairs of different groups to compare"
        )
    return codes.astype(np.int64)


def prepare_arrays(vectors, group_codes) -> tuple[np.ndarray, np.ndarray]:
    """Checked inputs for the numpy pass: (unit float32 vectors, int64 group codes)."""
    if hasattr(vectors, "detach"):  # a torch tensor from a library caller
        vectors = vectors.detach().cpu().numpy()
    matrix = np.asarray(vectors)
    check_embedding_shape(tuple(matrix.shape))
    n = int(matrix.shape[0])
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    # a row holding NaN or inf has a non-finite sum; a finite row can still overflow its sum,
    # so the suspects are checked element by element
    with np.errstate(over="ignore", invalid="ignore"):
        suspects = np.flatnonzero(~np.isfinite(matrix.sum(axis=1)))
    if suspects.size:
        finite = np.isfinite(matrix[suspects]).all(axis=1)
        if not finite.all():
            raise CapgeoError(f"caption embedding {int(suspects[np.flatnonzero(~finite)[0]])} contains NaN or "
                              "infinite values")
    with np.errstate(over="ignore", under="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, None]
    # embeddings already of unit length are used as given: no copy
    if bool((np.abs(norms - 1) > UNIT_NORM_TOLERANCE).any()):
        original = matrix
        with np.errstate(divide="ignore", invalid="ignore"):
            matrix = matrix / norms
        # a float32 norm can overflow or underflow: those rows are normalised in float64
        extreme = np.flatnonzero(~np.isfinite(norms[:, 0]) | (norms[:, 0] == 0))
        if extreme.size:
            rows = original[extreme].astype(np.float64)
            scale = np.abs(rows).max(axis=1, keepdims=True)
            if bool((scale == 0).any()):
                bad = int(extreme[np.flatnonzero(scale[:, 0] == 0)[0]])
                raise CapgeoError(f"caption embedding {bad} is all zeros: its cosine is undefined")
            rows = rows / scale
            matrix[extreme] = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return matrix, checked_group_codes(group_codes, n)


def default_threads() -> int:
    """Threads for work split by hand: as many as BLAS would use (its own setting, which follows
    OMP_NUM_THREADS and the like), else the CPU count."""
    from threadpoolctl import threadpool_info

    blas = [pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"]
    return max(blas) if blas else (os.cpu_count() or 1)


@contextlib.contextmanager
def block_threads(threads: int | None = None):
    """A thread pool for the arithmetic blocks, with BLAS on one thread inside it.

    Each block product is small (256 x 256): a multithreaded BLAS call per block wakes and syncs
    its threads every time, which on shared cores cost 5-20x the product (measured under load on
    the 2-core machine). Whole blocks run side by side on ``threads`` Python threads instead
    (numpy releases the GIL in matmul), each product on one BLAS thread: also the same kernel
    for every block, whatever the thread count. Yields the pool (None for one thread).
    """
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    if threads is None:
        threads = default_threads()
    with threadpool_limits(1, user_api="blas"):
        if threads <= 1:
            yield None
            return
        with ThreadPoolExecutor(max_workers=threads) as pool:
            yield pool


class BlockProducts:
    """Cosines of a unit float32 ``matrix`` (or of ``matrix`` rows against ``other`` rows),
    every one from an arithmetic block of one shape (:data:`ARITHMETIC_BLOCK` squared)."""

    def __init__(self, matrix: np.ndarray, other: np.ndarray | None = None, size: int | None = None, pool=None):
        self.size = ARITHMETIC_BLOCK if size is None else size
        self.pool = pool  # from :func:`block_threads`: whole blocks of a tile run on it side by side
        self.rows = matrix
        self.columns = matrix if other is None else other
        self.symmetric = other is None
        self._padded: dict = {}
        self._kept = None  # (key, block product) of the last block a small tile read

    def block(self, vectors: np.ndarray, index: int) -> np.ndarray:
        """Rows ``index * A`` .. of ``vectors``, zero-padded to A rows (contiguous)."""
        start = index * self.size
        part = vectors[start:start + self.size]
        if part.shape[0] == self.size:
            return part
        key = (id(vectors), index)
        if key not in self._padded:
            padded = self._zeros(self.size, vectors)
            padded[:part.shape[0]] = part
            self._padded[key] = padded
        return self._padded[key]

    def _zeros(self, rows: int, like: np.ndarray) -> np.ndarray:
        """A zero block of ``rows`` rows, as wide as ``like`` (the padding of a last block)."""
        return np.zeros((rows, like.shape[1]), dtype=np.float32)

    def product_into(self, row_block: int, column_block: int, out: np.ndarray) -> None:
        """The A x A product of row block and column block into ``out`` (row <= column when symmetric)."""
        np.matmul(self.block(self.rows, row_block), self.block(self.columns, column_block).T, out=out)
        if self.symmetric and row_block == column_block:
            # the pair (j, i) reads the float of (i, j), so a caption meets the same cosine from either side
            lower = np.tril_indices(self.size, -1)
            out[lower] = out.T[lower]

    def whole_block_into(self, row_block: int, column_block: int, out: np.ndarray) -> None:
        """A block that lies whole inside a tile, into its place there (``out``, a view of the tile)."""
        self.product_into(row_block, column_block, out)

    def product(self, row_block: int, column_block: int) -> np.ndarray:
        """The A x A block (a view of the transposed upper block below the diagonal), kept for the next call."""
        flip = self.symmetric and row_block > column_block
        key = (column_block, row_block) if flip else (row_block, column_block)
        if self._kept is None or self._kept[0] != key:
            out = np.empty((self.size, self.size), dtype=np.float32)
            self.product_into(*key, out)
            self._kept = (key, out)
        return self._kept[1].T if flip else self._kept[1]

    def tile_into(self, row_start: int, row_end: int, column_start: int, column_end: int, out: np.ndarray) -> None:
        """Cosines of rows [row_start, row_end) against columns [column_start, column_end) into ``out``."""
        size = self.size
        diagonal = self.symmetric and row_start == column_start and row_end == column_end
        mirrored, whole_blocks = [], []
        for row_block in range(row_start // size, -(-row_end // size)):
            low, high = max(row_start, row_block * size), min(row_end, (row_block + 1) * size)
            for column_block in range(column_start // size, -(-column_end // size)):
                left, right = max(column_start, column_block * size), min(column_end, (column_block + 1) * size)
                target = out[low - row_start:high - row_start, left - column_start:right - column_start]
                whole = high - low == size and right - left == size
                if whole and diagonal and row_block > column_block:
                    mirrored.append((target, out[left - row_start:right - row_start, low - column_start:high - column_start]))
                elif whole:
                    whole_blocks.append((row_block, column_block, target))
                else:
                    block = self.product(row_block, column_block)
                    target[...] = block[low - row_block * size:high - row_block * size,
                                        left - column_block * size:right - column_block * size]
        if self.pool is None or len(whole_blocks) < 2:
            for job in whole_blocks:
                self.whole_block_into(*job)
        else:
            list(self.pool.map(lambda job: self.whole_block_into(*job), whole_blocks))
        for target, upper in mirrored:
            target[...] = upper.T


#: bits of a tile's (query, candidate) positions that one int64 merge key holds beside a cosine's 32
#: (tiles up to 32768 x 32768 at 15 + 15; larger ones sort on three keys)
_POSITION_BITS = 31

#: a tile's histogram is binned in bands of about this many cells, on the block threads when it has
#: more than one: a band's bin positions and indices (3 MB) stay in the last-level cache, and no
#: tile-sized scratch is touched (a fresh 32 MB cost 30 ms of page faults on the 2-core VM). Bands
#: of 65,536 cells were slower at 25,000 captions: more tasks queued among the block products.
_BAND_CELLS = 1 << 18


class ArrayScanState:
    """The numpy twin of :class:`capgeo.geometry.pairwise._ScanState` (fp32 only)."""

    def __init__(self, grid, matrix, groups, options, exclude_codes=None, pool=None):
        """``options``: a ScanOptions (its top_k, bins, histograms, threshold, max_pairs and
        count_at_or_above)."""
        self.grid, self.matrix, self.groups = grid, matrix, groups
        top_k, bins = options.top_k, options.bins
        self.top_k, self.bins, self.histograms_on, self.threshold = top_k, bins, options.histograms, options.threshold
        self.max_pairs, self.count_threshold = options.max_pairs, options.count_at_or_above
        self.exclude = exclude_codes
        self.products = BlockProducts(matrix, pool=pool)
        n, size = grid.n, self.products.size
        # tiles of whole arithmetic blocks have their products computed a tile ahead, beside this
        # tile's bookkeeping, by another BlockProducts (its own kept and padded blocks): the same
        # floats, from the same products
        self._ahead = BlockProducts(matrix, pool=pool) if pool is not None and grid.block_size >= size else None
        # padded group codes of the arithmetic blocks: padding rows belong to no group
        self._block_count = -(-n // size)
        padded = np.full(self._block_count * size, -1, dtype=np.int64)
        padded[:n] = groups
        self._padded_groups = padded
        self._block_low = [int(groups[start:start + size].min()) for start in range(0, n, size)]
        self._block_high = [int(groups[start:start + size].max()) for start in range(0, n, size)]
        spans = [grid.span(block) for block in range(grid.blocks)]
        self._code_low = [int(groups[start:end].min()) for start, end in spans]
        self._code_high = [int(groups[start:end].max()) for start, end in spans]
        if exclude_codes is not None:
            self._exclude_low = [int(exclude_codes[start:end].min()) for start, end in spans]
            self._exclude_high = [int(exclude_codes[start:end].max()) for start, end in spans]
        cells = grid.block_size * grid.block_size
        self._tile = np.empty(cells, dtype=np.float32)
        self._next_tile = np.empty(cells, dtype=np.float32) if self._ahead is not None else None
        self._scratch = np.empty(size * size, dtype=np.float32)
        self._mask = np.empty(cells, dtype=bool)   # the cells a tile's step picks out
        self._upper = np.triu(np.ones((size, size), dtype=np.float32), 1)
        self._upper_mask = self._upper.astype(bool)
        # the lower triangle and diagonal of a diagonal tile: pairs counted elsewhere, or self-pairs
        self._lower = np.tri(grid.block_size, dtype=bool)
        scale, offset = bin_scale_offset(bins)
        self._scale, self._offset = np.float32(scale), np.float32(offset)
        self.negative_counts = np.zeros(bins + 1, dtype=np.int64)
        self.same_counts = np.zeros(bins + 1, dtype=np.int64)
        self._sums = [0, 0, 0, 0]
        self.negative_range = [np.inf, -np.inf]
        self.same_range = [np.inf, -np.inf]
        self.best_cosine = np.full((n, top_k), -np.inf, dtype=np.float32)
        self.best_index = np.full((n, top_k), -1, dtype=np.int64)
        self._touched = np.zeros(n, dtype=bool)
        self._pairs: list = []
        self._pair_count = 0
        self._n_at_or_above = 0
        self._tiles = 0

    # ------------------------------------------------------------------ one tile

    def add_tiles(self, tiles, advance=None) -> None:
        """Every tile of ``tiles`` (row-major order), each tile's products computed while the
        tile before it is booked. ``advance(1)`` after each tile."""
        if self._ahead is None or len(tiles) < 2:
            for row_block, column_block in tiles:
                self.add_tile(row_block, column_block)
                if advance is not None:
                    advance(1)
            return
        from concurrent.futures import ThreadPoolExecutor

        buffers = [self._tile, self._next_tile]
        with ThreadPoolExecutor(max_workers=1) as producer:
            pending = producer.submit(self._products, *tiles[0], self._ahead, buffers[0])
            for number, (row_block, column_block) in enumerate(tiles):
                tile = pending.result()
                if number + 1 < len(tiles):
                    pending = producer.submit(self._products, *tiles[number + 1], self._ahead, buffers[(number + 1) % 2])
                self._book(row_block, column_block, tile)
                if advance is not None:
                    advance(1)

    def _products(self, row_block: int, column_block: int, products: "BlockProducts", buffer: np.ndarray) -> np.ndarray:
        """The tile's cosines, into ``buffer``, their exact block sums added by the thread that
        computes them (a tile ahead, that thread's work and the booking's are closer to even; the
        sums are integers, so which thread adds them changes nothing)."""
        row_start, row_end = self.grid.span(row_block)
        column_start, column_end = self.grid.span(column_block)
        tile = buffer[:(row_end - row_start) * (column_end - column_start)].reshape(row_end - row_start,
                                                                                  column_end - column_start)
        products.tile_into(row_start, row_end, column_start, column_end, tile)
        if self.histograms_on:
            self._add_block_sums(tile, row_start, row_end, column_start, column_end, products)
        return tile

    def add_tile(self, row_block: int, column_block: int) -> None:
        self._book(row_block, column_block, self._products(row_block, column_block, self.products, self._tile))

    def _book(self, row_block: int, column_block: int, tile: np.ndarray) -> None:
        """Everything a tile's cosines feed but their block sums (``tile``: they, which this changes)."""
        row_start, row_end = self.grid.span(row_block)
        column_start, column_end = self.grid.span(column_block)
        rows, columns = tile.shape
        diagonal = row_block == column_block
        self._touched[row_start:row_end] = True
        self._touched[column_start:column_end] = True
        same = None
        if self._code_low[row_block] <= self._code_high[column_block] and \
                self._code_low[column_block] <= self._code_high[row_block]:
            same = _cells(np.equal(self.groups[row_start:row_end, None], self.groups[None, column_start:column_end],
                                   out=self._mask[:rows * columns].reshape(rows, columns)))
        if self.histograms_on:
            self._histogram(tile, same, diagonal)
        # self-pairs, same-group pairs (and pairs of equal exclusion codes) are no companions
        if same is not None:
            tile[same] = -np.inf
        if self.exclude is not None and self._exclude_low[row_block] <= self._exclude_high[column_block] and \
                self._exclude_low[column_block] <= self._exclude_high[row_block]:
            tile[self.exclude[row_start:row_end, None] == self.exclude[None, column_start:column_end]] = -np.inf
        if diagonal:
            np.fill_diagonal(tile, -np.inf)
        if self.threshold is not None or self.count_threshold is not None:
            counted = tile
            if diagonal:
                counted = tile.copy()
                np.copyto(counted, -np.inf, where=self._lower[:rows, :columns])
            if self.threshold is not None:
                self._collect_pairs(counted, row_start, column_start)
            if self.count_threshold is not None:
                self._n_at_or_above += int(np.count_nonzero(counted >= self.count_threshold))
        if self.top_k:
            self._update(tile, row_start, column_start, by_column=False)
            if not diagonal:
                self._update(tile, column_start, row_start, by_column=True)
        self._tiles += 1

    def _add_block_sums(self, tile, row_start, row_end, column_start, column_end, products) -> None:
        """Exact sums of the arithmetic blocks whose first counted cell lies in this tile
        (``products``: the BlockProducts of the calling thread, for a block the tile cuts)."""
        size, n = products.size, self.grid.n
        counted = self._scratch.reshape(size, size)
        for row_block in range(row_start // size, -(-row_end // size)):
            first_row = row_block * size
            if not row_start <= first_row < row_end:
                continue
            last_row = min(first_row + size, n)
            for column_block in range(max(row_block, column_start // size), -(-column_end // size)):
                first_column = column_block * size
                if not column_start <= first_column + (column_block == row_block) < min(column_end, n):
                    continue
                last_column = min(first_column + size, n)
                if last_row <= row_end and last_column <= column_end:  # the block's every real cell is here
                    if last_row - first_row < size or last_column - first_column < size:
                        counted.fill(0.0)
                    counted[:last_row - first_row, :last_column - first_column] = \
                        tile[first_row - row_start:last_row - row_start, first_column - column_start:last_column - column_start]
                else:
                    counted[...] = products.product(row_block, column_block)
                self._block_sums(counted, row_block, column_block)

    def _block_sums(self, counted, row_block, column_block) -> None:
        """Add one arithmetic block's sums (``counted``: its cosines, a scratch it may change)."""
        size = self.products.size
        if row_block == column_block:
            np.multiply(counted, self._upper, out=counted)
        same = None
        if self._block_low[row_block] <= self._block_high[column_block] and \
                self._block_low[column_block] <= self._block_high[row_block]:
            codes = self._padded_groups
            rows = codes[row_block * size:(row_block + 1) * size]
            columns = codes[column_block * size:(column_block + 1) * size]
            same = (rows[:, None] == columns[None, :]) & (rows[:, None] >= 0)
            if row_block == column_block:
                same &= self._upper_mask
            if not same.any():
                same = None
        values = counted.copy() if same is not None else None
        self._sums[ALL_SUM] += exact_units(_block_total(counted))
        self._sums[ALL_SQUARES] += exact_units(_block_total(np.multiply(counted, counted, out=counted)))
        if same is None:
            return
        np.multiply(values, same, out=values)
        self._sums[SAME_SUM] += exact_units(_block_total(values))
        self._sums[SAME_SQUARES] += exact_units(_block_total(np.multiply(values, values, out=values)))

    def _histogram(self, tile, same, diagonal) -> None:
        """Bin counts, min and max of the tile's pairs (the upper triangle of a diagonal tile).
        Leaves the self-pairs and same-group cells at -inf."""
        bins = self.bins
        rows, columns = tile.shape

        def bin_rows(band):
            """The bin counts of the band's rows, [start, stop)."""
            start, stop = band
            where = self._bin_indices(tile[start:stop])
            if diagonal:
                np.copyto(where, bins, where=self._lower[start:stop, :columns])  # overflow bin, discarded
            return np.bincount(where.reshape(-1), minlength=bins + 1)

        # integer counts, so neither the bands nor the threads change them (numpy releases the
        # GIL in each step)
        step = max(1, _BAND_CELLS // max(columns, 1))
        bands = [(start, min(start + step, rows)) for start in range(0, rows, step)]
        pool = self.products.pool
        banded = map(bin_rows, bands) if pool is None or len(bands) == 1 else pool.map(bin_rows, bands)
        counts = sum(banded, np.zeros(bins + 1, dtype=np.intp))
        counted_same = same
        if diagonal and same is not None:
            upper = same[0] < same[1]
            counted_same = same[0][upper], same[1][upper]
        if counted_same is not None and counted_same[0].size:
            inside = tile[counted_same]
            same_counts = np.bincount(self._bin_indices(inside), minlength=bins + 1)
            self.same_counts += same_counts
            counts -= same_counts
            self.same_range = [min(self.same_range[0], float(inside.min())),
                               max(self.same_range[1], float(inside.max()))]
        self.negative_counts += counts
        # extremes of the negatives: a diagonal tile's lower triangle mirrors its upper one, so only
        # the self-pairs and the same-group cells are set to values that cannot win
        if same is None and not diagonal:
            low, high = float(tile.min()), float(tile.max())
        else:
            extremes = []
            for fill, reduce in ((np.inf, np.min), (-np.inf, np.max)):
                if same is not None:
                    tile[same] = fill
                if diagonal:
                    np.fill_diagonal(tile, fill)
                extremes.append(float(reduce(tile)))
            low, high = extremes
        if low <= high:  # (a diagonal tile of one caption holds no pair)
            self.negative_range = [min(self.negative_range[0], low), max(self.negative_range[1], high)]

    def _bin_indices(self, cosines: np.ndarray) -> np.ndarray:
        """The fine histogram's bin of each cosine (float32 steps, the same for a cell in any band)."""
        position = np.multiply(cosines, self._scale)
        np.add(position, self._offset, out=position)
        np.clip(position, 0, self.bins - 1, out=position)
        return position.astype(np.intp)  # >= 0 after the clip, where truncation is floor

    def _collect_pairs(self, counted, row_start, column_start) -> None:
        rows, columns = _cells(np.greater_equal(counted, self.threshold,
                                                out=self._mask[:counted.size].reshape(counted.shape)))
        if not rows.size:
            return
        self._pairs.append((rows + row_start, columns + column_start, counted[rows, columns]))
        self._pair_count += int(rows.size)
        if self.max_pairs is not None and self._pair_count > self.max_pairs:
            raise TooManyPairs(self.max_pairs, self.threshold)

    def _update(self, tile, query_start, candidate_start, *, by_column: bool) -> None:
        """Merge the tile's candidates into the running top-k of its rows (or, ``by_column``, of its
        columns): the queries.

        Tiles are walked in row-major order, so a tile's candidates all have larger indices than
        those already in its queries' lists: only cells strictly above a full list's k-th can
        enter it. Where a list is not full yet, the cells at or above the tile row's own k-th
        can. Those cells are picked out and merged by (cosine descending, index ascending). The
        columns' cells are compared in the tile's own memory order (a transposed walk of a
        2048-row tile cost 15x the comparison).
        """
        k = self.top_k
        queries, columns = tile.shape[::-1] if by_column else tile.shape
        running = slice(query_start, query_start + queries)
        floor = self.best_cosine[running, k - 1].copy()
        open_rows = np.flatnonzero(floor == -np.inf)
        if open_rows.size:
            kth = np.full(open_rows.size, -np.inf, dtype=np.float32)
            if columns > k:
                kth = _kth_floor(tile, open_rows, k, by_column)
            # at or above the k-th, and never a masked cell (-inf)
            with np.errstate(over="ignore"):
                floor[open_rows] = np.nextafter(kth, np.float32(-np.inf))
        mask = self._mask[:tile.size].reshape(tile.shape)
        np.greater(tile, floor[None, :] if by_column else floor[:, None], out=mask)
        row, column = _cells(mask)
        if not row.size:
            return
        query, candidate = (column, row) if by_column else (row, column)
        self._merge(tile, query, candidate, query_start, candidate_start, by_column)

    def _merge(self, tile, query, candidate, query_start, candidate_start, by_column: bool) -> None:
        """Merge the tile cells (``query``, ``candidate``: tile positions along the queries' side and
        the candidates', any order) into their queries' lists by (cosine descending, index ascending).

        The candidates are sorted once, on one int64 key (query, cosine descending, candidate);
        the lists are sorted already, so the lists and the candidates are two sorted runs of keys
        (query, cosine descending), which a stable sort merges in linear time. A list's entries go
        ahead of a candidate of the same cosine: tiles reach a caption in increasing index order."""
        k = self.top_k
        values = tile[candidate, query] if by_column else tile[query, candidate]
        inverted = _descending_bits(values)
        shift = max(int(tile.shape[0 if by_column else 1] - 1).bit_length(), 1)
        if int(tile.shape[1 if by_column else 0] - 1).bit_length() + shift <= _POSITION_BITS:
            key = (query.astype(np.int64) << (32 + shift)) | (inverted << shift) | candidate
            key.sort()
            query, candidate = key >> (32 + shift), key & ((1 << shift) - 1)
        else:  # (tiles too large for one key: a three-key sort, and the merge keys without the candidate)
            order = np.lexsort((candidate, inverted, query))
            query, candidate = query[order].astype(np.int64), candidate[order].astype(np.int64)
            shift = 0
            key = (query << 32) | inverted[order]
        values = tile[candidate, query] if by_column else tile[query, candidate]
        first = np.flatnonzero(np.concatenate([[True], query[1:] != query[:-1]]))
        local = query[first]
        if local.size == tile.shape[1 if by_column else 0]:  # (every query: slices, not gathers)
            rows = slice(query_start, query_start + local.size)
        else:
            rows = local + query_start
        old_cosine, old_index = self.best_cosine[rows], self.best_index[rows]
        old_key = ((local[:, None] << (32 + shift)) | (_descending_bits(old_cosine) << shift)).ravel()
        # two sorted runs: a stable sort merges them in one linear pass, a list's entries ahead of
        # a candidate of equal key; each query's first k of the merge are its new list (every query
        # has k entries, padding included, and at least one candidate)
        order = np.argsort(np.concatenate([old_key, key]), kind="stable")
        order = order[((np.arange(local.size) * k + first)[:, None] + np.arange(k)).ravel()]
        new_cosine = np.concatenate([old_cosine.ravel(), values])[order].reshape(local.size, k)
        new_index = np.concatenate([old_index.ravel(), candidate + candidate_start])[order].reshape(local.size, k)
        self.best_cosine[rows] = new_cosine
        self.best_index[rows] = new_index

    # ------------------------------------------------------------------ result

    def partial(self) -> PairPartial:
        touched = np.flatnonzero(self._touched)
        return pass_partial(self, Tallies(negative_counts=self.negative_counts, same_counts=self.same_counts,
                                          sums=self._sums, negative_range=self.negative_range,
                                          same_range=self.same_range, touched=touched,
                                          best_cosine=self.best_cosine[touched], best_index=self.best_index[touched],
                                          pairs=self._pairs, tiles=self._tiles, n_at_or_above=self._n_at_or_above))


#: a query's floor comes from every _SAMPLE_STEP-th candidate of a tile, _FLOOR_SAMPLE (or 4k) of
#: them at least
_FLOOR_SAMPLE, _SAMPLE_STEP = 256, 8


def _kth_floor(tile, queries, k: int, by_column: bool) -> np.ndarray:
    """For each of ``queries`` (tile rows, or columns ``by_column``), a value at or below the k-th
    largest of its cells: the cells at or above it hold the query's top k of the tile.

    The k-th largest of a subset is at or below the whole set's, so it is taken from every
    _SAMPLE_STEP-th candidate (spread, as an image's captions sit side by side), which costs an
    eighth of partitioning whole rows and lets about eight times k cells through to the exact
    merge. A query whose sample holds fewer than k unmasked cells gets its whole row's k-th."""
    candidates = tile.shape[0 if by_column else 1]
    step = min(_SAMPLE_STEP, max(candidates // max(_FLOOR_SAMPLE, 4 * k), 1))
    kth = _kth_largest(tile, queries, k, by_column, step)
    if step > 1:
        short = np.flatnonzero(kth == -np.inf)
        if short.size:
            kth[short] = _kth_largest(tile, queries[short], k, by_column, 1)
    return kth


def _kth_largest(tile, queries, k: int, by_column: bool, step: int) -> np.ndarray:
    """The k-th largest of every ``step``-th candidate of each query."""
    # (a column's cells copied out as a row: partitioning along a tile's columns is slow)
    cells = np.ascontiguousarray(tile[::step, queries].T) if by_column else tile[queries, ::step]
    return np.partition(cells, cells.shape[1] - k, axis=1)[:, cells.shape[1] - k]


def _descending_bits(values: np.ndarray) -> np.ndarray:
    """int64 in [0, 2**32) that order float32 ``values`` descending, equal values equal (-0.0 and
    0.0 too). A float32's bits, as an unsigned integer, ascend with a positive value and with a
    negative one's magnitude: flipping a positive one's low 31 bits puts the positives first,
    largest first, then the negatives, smallest magnitude first."""
    bits = (values + np.float32(0.0)).view(np.int32)  # (+0.0: -0.0 -> 0.0)
    flip = np.bitwise_and(np.invert(np.right_shift(bits, 31)), 0x7FFFFFFF)
    return np.bitwise_xor(bits, flip, out=flip).view(np.uint32).astype(np.int64)


def _cells(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of a 2-D mask's true cells, row-major: np.nonzero's answer, from the flat
    indices (np.nonzero of a 2-D mask cost 13x np.flatnonzero on a 2048-row tile)."""
    return np.divmod(np.flatnonzero(mask), mask.shape[1])


def _block_total(block: np.ndarray) -> float:
    """Sum of one A x A block: each row in float32 (numpy's pairwise order, fixed by A), rows in float64."""
    return float(block.sum(axis=1, dtype=np.float32).astype(np.float64).sum())
