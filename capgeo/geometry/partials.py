"""Partial results of the pairwise pass and their merge.

The pass is a sum over tiles, so any set of tiles (one tile, one row block against a
range of column blocks, a whole Ray task) yields a :class:`PairPartial`, and
:func:`merge_partials` combines partials **associatively and commutatively, bit for
bit**: whichever way tiles are grouped and in whatever order partials meet, the merged
result is the same, provided every partial was computed on the same tile grid
(``block_size``) and device kind, so that each tile's cosines are the same floats.

That holds because nothing in a partial depends on merge order:

* histogram counts are integers;
* each tile's sums are float64 numbers that are added **exactly** (as integers in units
  of 2**-1074, the smallest float64 step), then rounded once at the end;
* min and max are exact;
* a caption's top-k companions are merged by (cosine descending, caption index
  ascending): a total order, so the k best of a union do not depend on grouping;
* pairs at or above a threshold are a set, sorted by (row, column) at the end.

numpy only: this module is imported by Ray workers and drivers that may not hold torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce
from typing import Iterable

import numpy as np

from capgeo.errors import CapgeoError

# 2**-1074 is float64's smallest positive step, so every finite float64 is an integer
# multiple of it: sums of such integers are exact and order-independent
_EXACT_SCALE = 1 << 1074


def exact_units(value: float) -> int:
    """``value`` (a finite float) as an integer number of 2**-1074 steps, exactly."""
    numerator, denominator = float(value).as_integer_ratio()
    return numerator * (_EXACT_SCALE // denominator)


def from_exact_units(units: int) -> float:
    """The float nearest to ``units`` * 2**-1074 (correctly rounded)."""
    return float(Fraction(units, _EXACT_SCALE))


class TooManyPairs(CapgeoError):
    """More pairs reach the threshold than the caller allowed (the pass stops there)."""

    def __init__(self, limit: int, threshold: float):
        super().__init__(f"more than {limit:,} caption pairs reach cosine {threshold:.4f}")
        self.limit, self.threshold = limit, threshold


@dataclass
class Moments:
    """Count, exact sum and sum of squares (in 2**-1074 units), min and max of some cosines."""

    count: int = 0
    total: int = 0
    squares: int = 0
    minimum: float = float("inf")
    maximum: float = float("-inf")

    def merged(self, other: "Moments") -> "Moments":
        return Moments(self.count + other.count, self.total + other.total, self.squares + other.squares,
                       min(self.minimum, other.minimum), max(self.maximum, other.maximum))

    @property
    def sum(self) -> float:
        return from_exact_units(self.total)

    @property
    def sum_of_squares(self) -> float:
        return from_exact_units(self.squares)


@dataclass
class PairPartial:
    """What some tiles of the pass contribute. Build with the pass, combine with :func:`merge_partials`.

    ``companion_rows`` (m,) ascending caption indices with at least one candidate;
    ``companion_cosine`` / ``companion_index`` (m, top_k): their best other-group captions so
    far, cosine descending then index ascending, -inf / -1 padding. ``pair_rows``,
    ``pair_columns``, ``pair_cosines``: the different-group pairs (row < column) with cosine
    >= ``threshold`` (empty when ``threshold`` is None).
    """

    n: int
    top_k: int
    bins: int
    block_size: int
    histograms: bool
    threshold: float | None
    negative_counts: np.ndarray
    same_counts: np.ndarray
    negative: Moments
    same: Moments
    companion_rows: np.ndarray
    companion_cosine: np.ndarray
    companion_index: np.ndarray
    pair_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pair_columns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pair_cosines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    tiles: int = 0
    precision: str = "fp32"
    precision_error: dict | None = None  # bound and measured error of tf32 / bf16 cosines
    # tf32 / bf16 work: tile rows whose every candidate near the k-th was re-scored, and
    # pairs re-scored in all (they count work, so they depend on how the tiles were split)
    rows_too_close: int = 0
    pairs_rescored: int = 0
    # different-group pairs with cosine >= count_threshold, counted without keeping them (tf32 /
    # bf16: their histogram is within a bound, not a bin, so a count read from it would not be)
    count_threshold: float | None = None
    n_at_or_above: int = 0

    @property
    def layout(self) -> tuple:
        """What two partials must share to be merged."""
        return (self.n, self.top_k, self.bins, self.block_size, self.histograms, self.threshold, self.precision,
                self.count_threshold)

    def dense_companions(self) -> tuple[np.ndarray, np.ndarray]:
        """(index (n, k) int64 with -1, cosine (n, k) float32 with NaN) for every caption."""
        index = np.full((self.n, self.top_k), -1, dtype=np.int64)
        cosine = np.full((self.n, self.top_k), np.nan, dtype=np.float32)
        if self.top_k and self.companion_rows.size:
            index[self.companion_rows] = self.companion_index
            cosine[self.companion_rows] = self.companion_cosine
        missing = ~np.isfinite(cosine)
        cosine[missing] = np.nan
        index[missing] = -1
        return index, cosine


#: slots of a pass's exact sums (2**-1074 units): every counted pair, then the same-group pairs among them
ALL_SUM, ALL_SQUARES, SAME_SUM, SAME_SQUARES = range(4)


@dataclass
class Tallies:
    """An engine's accumulators after its tiles, host-side numpy: what :func:`pass_partial` reads.

    Counts with the overflow bin last; ``sums``: the four exact sums by slot; ``touched``: captions
    the tiles reached, ascending; ``best_cosine`` / ``best_index``: their running lists (one row
    each); ``pairs``: (rows, columns, cosines) parts of the threshold pairs; ``rows_too_close`` and
    ``pairs_rescored``: tf32 / bf16 work counters (PairPartial's)."""

    negative_counts: np.ndarray
    same_counts: np.ndarray
    sums: list
    negative_range: np.ndarray
    same_range: np.ndarray
    touched: np.ndarray
    best_cosine: np.ndarray
    best_index: np.ndarray
    pairs: list
    tiles: int
    n_at_or_above: int
    rows_too_close: int = 0
    pairs_rescored: int = 0


def pass_partial(scan, tallies: Tallies) -> PairPartial:
    """The :class:`PairPartial` of an engine's accumulators: what both engines of the pass (numpy's
    and torch's) hand on. ``scan``: the engine's state (its ``grid``, ``top_k``, ``bins``,
    ``histograms_on``, ``threshold``, ``count_threshold``)."""
    sums, pairs = tallies.sums, tallies.pairs
    best_cosine, best_index = tallies.best_cosine, tallies.best_index
    negative_counts, same_counts = tallies.negative_counts[:scan.bins].copy(), tallies.same_counts[:scan.bins].copy()
    negative = Moments(int(negative_counts.sum()), sums[ALL_SUM] - sums[SAME_SUM], sums[ALL_SQUARES] - sums[SAME_SQUARES],
                       *map(float, tallies.negative_range))
    same = Moments(int(same_counts.sum()), sums[SAME_SUM], sums[SAME_SQUARES], *map(float, tallies.same_range))
    touched = np.asarray(tallies.touched, dtype=np.int64)
    if scan.top_k:  # captions with at least one candidate
        found = np.isfinite(best_cosine[:, 0])
        touched, best_cosine, best_index = touched[found], best_cosine[found], best_index[found]
    if pairs:
        pair_rows, pair_columns, pair_cosines = (np.concatenate(parts) for parts in zip(*pairs))
    else:
        pair_rows = pair_columns = np.zeros(0, np.int64)
        pair_cosines = np.zeros(0, np.float32)
    return PairPartial(
        n=scan.grid.n, top_k=scan.top_k, bins=scan.bins, block_size=scan.grid.block_size,
        histograms=scan.histograms_on, threshold=scan.threshold,
        negative_counts=negative_counts, same_counts=same_counts, negative=negative, same=same,
        companion_rows=touched, companion_cosine=best_cosine.astype(np.float32),
        companion_index=best_index.astype(np.int64),
        pair_rows=pair_rows.astype(np.int64), pair_columns=pair_columns.astype(np.int64),
        pair_cosines=pair_cosines.astype(np.float32), tiles=int(tallies.tiles),
        count_threshold=scan.count_threshold, n_at_or_above=int(tallies.n_at_or_above),
        rows_too_close=tallies.rows_too_close, pairs_rescored=tallies.pairs_rescored,
    )


def merge_two(first: PairPartial, second: PairPartial) -> PairPartial:
    """``first`` + ``second`` (neither is modified). Associative and commutative, bit for bit."""
    if first.layout != second.layout:
        raise ValueError(f"cannot merge partials of different passes: {first.layout} and {second.layout}")
    rows, index, cosine = _merge_companions(first, second)
    return PairPartial(
        n=first.n, top_k=first.top_k, bins=first.bins, block_size=first.block_size,
        histograms=first.histograms, threshold=first.threshold,
        negative_counts=first.negative_counts + second.negative_counts,
        same_counts=first.same_counts + second.same_counts,
        negative=first.negative.merged(second.negative),
        same=first.same.merged(second.same),
        companion_rows=rows, companion_cosine=cosine, companion_index=index,
        pair_rows=np.concatenate([first.pair_rows, second.pair_rows]),
        pair_columns=np.concatenate([first.pair_columns, second.pair_columns]),
        pair_cosines=np.concatenate([first.pair_cosines, second.pair_cosines]),
        tiles=first.tiles + second.tiles,
        precision=first.precision,
        precision_error=first.precision_error or second.precision_error,
        rows_too_close=first.rows_too_close + second.rows_too_close,
        pairs_rescored=first.pairs_rescored + second.pairs_rescored,
        count_threshold=first.count_threshold,
        n_at_or_above=first.n_at_or_above + second.n_at_or_above,
    )


def merge_partials(partials: Iterable[PairPartial]) -> PairPartial:
    """All ``partials`` combined; the order and grouping do not change the result."""
    partials = list(partials)
    if not partials:
        raise ValueError("no partial results to merge")
    return reduce(merge_two, partials[1:], partials[0])


def sorted_pairs(partial: PairPartial) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The threshold pairs as (rows, columns, cosines) sorted by row, then column."""
    order = np.lexsort((partial.pair_columns, partial.pair_rows))
    return partial.pair_rows[order], partial.pair_columns[order], partial.pair_cosines[order]


def _merge_companions(first: PairPartial, second: PairPartial):
    k = first.top_k
    rows = np.union1d(first.companion_rows, second.companion_rows).astype(np.int64)
    if k == 0 or rows.size == 0:
        return rows, np.zeros((rows.size, k), np.int64), np.zeros((rows.size, k), np.float32)
    cosine = np.full((rows.size, 2 * k), -np.inf, dtype=np.float32)
    index = np.full((rows.size, 2 * k), -1, dtype=np.int64)
    for half, partial in enumerate((first, second)):
        where = np.searchsorted(rows, partial.companion_rows)
        cosine[where, half * k:(half + 1) * k] = partial.companion_cosine
        index[where, half * k:(half + 1) * k] = partial.companion_index
    # cosine descending, then caption index ascending: a total order on candidates
    order = np.lexsort((index, -cosine), axis=1)[:, :k]
    return rows, np.take_along_axis(index, order, 1), np.take_along_axis(cosine, order, 1)
