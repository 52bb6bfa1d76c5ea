"""Distributions of cosine similarities: a fine fixed-bin histogram and exact small-sample summaries.

The pairwise pass sees up to N^2/2 cosines, far too many to keep, so it folds them
into a :class:`Histogram`: fixed bins over [-1, 1] (default 4000 bins of width
0.0005) plus exact running count, sum, sum of squares, min and max. Mean and std
are then exact (up to float rounding); quantiles are read from the bins and are
accurate to one bin width, which the summary states as ``quantile_resolution``.

For arrays small enough to keep (one cosine per caption, e.g. the hardest
companions), :func:`summarize_values` gives the same dict with exact quantiles.

Bin rule (shared by :meth:`Histogram.add` and the blockwise pass, so both put a
value in the same bin): ``bin = clamp(trunc(value * scale + offset), 0, bins - 1)``
with ``scale = bins / (high - low)`` and ``offset = -low * scale``, computed in the
values' own float precision. A cosine of exactly 1.0 goes to the last bin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from capgeo.defaults import BINS as DEFAULT_BINS

DEFAULT_SHARE_EDGES = (0.7, 0.8, 0.9)
#: The quantiles every summary reports, in percent (keys p1..p99).
QUANTILE_PERCENTS = (1, 5, 10, 25, 50, 75, 90, 95, 99)


def bin_scale_offset(bins: int, low: float = -1.0, high: float = 1.0) -> tuple[float, float]:
    """``(scale, offset)`` such that ``value * scale + offset`` is the value's position in bins."""
    scale = bins / (high - low)
    return scale, -low * scale


def bin_indices_torch(values, bins: int, low: float = -1.0, high: float = 1.0, *, scratch=None, out=None):
    """Bin index of every element of a float tensor (same shape, int32: half the memory
    traffic of int64, and torch's bincount is faster on it).

    ``scratch`` (float, same shape) and ``out`` (int32, same shape) are optional
    preallocated buffers: the blockwise pass reuses them for every block because
    fresh multi-megabyte allocations cost more than the arithmetic.
    """
    import torch

    scale, offset = bin_scale_offset(bins, low, high)
    if scratch is None:
        scratch = torch.empty_like(values)
    if out is None:
        out = torch.empty(values.shape, dtype=torch.int32, device=values.device)
    # one fused pass: offset + scale * value
    torch.add(torch.tensor(offset, dtype=values.dtype, device=values.device), values, alpha=scale, out=scratch)
    # clamp before truncating: positions are then >= 0, where truncation is floor
    scratch.clamp_(0, bins - 1)
    out.copy_(scratch)
    return out


@dataclass
class Histogram:
    """Fixed-bin histogram of values in [low, high] with exact running moments.

    ``counts[i]`` counts values in ``[low + i*width, low + (i+1)*width)``; values
    at or beyond ``high`` fall in the last bin, values below ``low`` in the first.
    """

    bins: int = DEFAULT_BINS
    low: float = -1.0
    high: float = 1.0
    counts: np.ndarray = field(default=None, repr=False)
    n: int = 0
    total: float = 0.0
    total_squares: float = 0.0
    min: float = float("inf")
    max: float = float("-inf")

    def __post_init__(self) -> None:
        if self.bins < 1:
            raise ValueError(f"histogram needs at least one bin, got {self.bins}")
        if not self.high > self.low:
            raise ValueError(f"histogram range must have high > low, got [{self.low}, {self.high}]")
        if self.counts is None:
            self.counts = np.zeros(self.bins, dtype=np.int64)

    @property
    def width(self) -> float:
        return (self.high - self.low) / self.bins

    @property
    def edges(self) -> np.ndarray:
        return self.low + self.width * np.arange(self.bins + 1)

    # -- accumulation -----------------------------------------------------------------

    def add(self, values) -> "Histogram":
        """Add a torch tensor or array-like of values (any shape)."""
        if not type(values).__module__.startswith("torch"):
            return self._add_array(np.asarray(values))
        import torch

        # binned on the CPU: values come in modest batches, and float64 moments are not
        # available on every accelerator (mps)
        tensor = torch.as_tensor(values).detach().cpu()
        if not tensor.is_floating_point():
            tensor = tensor.to(torch.float64)
        tensor = tensor.reshape(-1)
        if tensor.numel() == 0:
            return self
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError("histogram values must be finite")
        indices = bin_indices_torch(tensor, self.bins, self.low, self.high)
        counts = torch.bincount(indices, minlength=self.bins).cpu().numpy()
        as_double = tensor.to(torch.float64)
        low_high = torch.aminmax(tensor)
        self.add_counts(
            counts,
            n=int(tensor.numel()),
            total=float(as_double.sum()),
            total_squares=float((as_double * as_double).sum()),
            minimum=float(low_high.min),
            maximum=float(low_high.max),
        )
        return self

    def _add_array(self, values: np.ndarray) -> "Histogram":
        """:meth:`add` for numpy values, binned as the CPU pass bins them (capgeo.geometry.cpu_pass):
        ``value * scale`` then ``+ offset``, in the values' float type, clipped, truncated."""
        if not np.issubdtype(values.dtype, np.floating):
            values = values.astype(np.float64)
        values = values.reshape(-1)
        if values.size == 0:
            return self
        if not bool(np.isfinite(values).all()):
            raise ValueError("histogram values must be finite")
        scale, offset = bin_scale_offset(self.bins, self.low, self.high)
        position = values * values.dtype.type(scale)
        position += values.dtype.type(offset)
        np.clip(position, 0, self.bins - 1, out=position)
        as_double = values.astype(np.float64)
        self.add_counts(np.bincount(position.astype(np.int64), minlength=self.bins), n=int(values.size),
                        total=float(as_double.sum()), total_squares=float((as_double * as_double).sum()),
                        minimum=float(values.min()), maximum=float(values.max()))
        return self

    def add_counts(self, counts, *, n: int, total: float, total_squares: float, minimum: float, maximum: float) -> None:
        """Fold in counts and moments computed elsewhere with the same bin rule (the blockwise pass)."""
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (self.bins,):
            raise ValueError(f"expected {self.bins} bin counts, got shape {counts.shape}")
        self.counts += counts
        self.n += int(n)
        self.total += float(total)
        self.total_squares += float(total_squares)
        if n:
            self.min = min(self.min, float(minimum))
            self.max = max(self.max, float(maximum))

    def merge(self, other: "Histogram") -> "Histogram":
        """Add another histogram with the same bins into this one."""
        if (other.bins, other.low, other.high) != (self.bins, self.low, self.high):
            raise ValueError(
                f"cannot merge histograms with different bins: {self.bins} over [{self.low}, {self.high}] "
                f"and {other.bins} over [{other.low}, {other.high}]"
            )
        self.add_counts(other.counts, n=other.n, total=other.total, total_squares=other.total_squares,
                        minimum=other.min, maximum=other.max)
        return self

    # -- statistics -------------------------------------------------------------------

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else float("nan")

    @property
    def std(self) -> float:
        """Population standard deviation (ddof=0) of the values added."""
        if not self.n:
            return float("nan")
        mean = self.mean
        variance = self.total_squares / self.n - mean * mean
        return float(np.sqrt(max(variance, 0.0)))

    def quantile(self, q: float | Sequence[float]) -> float | np.ndarray:
        """Quantile(s) read from the bins, accurate to one bin width.

        Follows numpy's default (linear) definition: position ``q * (n - 1)`` in the
        sorted values. Each order statistic is placed by linear interpolation inside
        its bin, then clamped to the exact min and max.
        """
        levels = np.atleast_1d(np.asarray(q, dtype=np.float64))
        if np.any((levels < 0) | (levels > 1)):
            raise ValueError(f"quantile levels must be in [0, 1], got {q}")
        if not self.n:
            result = np.full(levels.shape, np.nan)
            return float(result[0]) if np.ndim(q) == 0 else result
        positions = levels * (self.n - 1)
        lower = self._order_statistic(np.floor(positions))
        upper = self._order_statistic(np.ceil(positions))
        result = lower + (positions - np.floor(positions)) * (upper - lower)
        result = np.clip(result, self.min, self.max)
        return float(result[0]) if np.ndim(q) == 0 else result

    def _order_statistic(self, ranks: np.ndarray) -> np.ndarray:
        """Estimated value of the order statistics at 0-based ``ranks``."""
        cumulative = np.cumsum(self.counts)
        bin_of_rank = np.searchsorted(cumulative, ranks, side="right")
        before = np.where(bin_of_rank > 0, cumulative[np.maximum(bin_of_rank - 1, 0)], 0)
        inside = self.counts[bin_of_rank]
        # spread the bin's values evenly over it: the k-th of c sits at (k + 0.5) / c
        fraction = (ranks - before + 0.5) / inside
        estimate = self.low + (bin_of_rank + fraction) * self.width
        # the smallest and largest values are known exactly
        estimate = np.where(ranks == 0, self.min, estimate)
        return np.where(ranks == self.n - 1, self.max, estimate)

    def share_at_or_above(self, edges: Iterable[float]) -> dict[str, float]:
        """Share of values >= each edge (edges rounded to the nearest bin edge)."""
        shares = {}
        for edge in edges:
            # at most the last bin, which holds the values up to ``high`` itself
            bin_index = int(np.clip(round((float(edge) - self.low) / self.width), 0, self.bins - 1))
            shares[_edge_key(edge)] = float(self.counts[bin_index:].sum() / self.n) if self.n else float("nan")
        return shares

    def compact(self) -> dict:
        """The histogram for plotting: first kept bin's left edge, width, counts without empty ends."""
        nonzero = np.flatnonzero(self.counts)
        if nonzero.size == 0:
            return {"start": self.low, "width": self.width, "counts": []}
        first, last = int(nonzero[0]), int(nonzero[-1])
        return {
            "start": float(self.low + first * self.width),
            "width": float(self.width),
            "counts": self.counts[first:last + 1].tolist(),
        }

    def summary(self, share_edges: Iterable[float] = DEFAULT_SHARE_EDGES) -> dict:
        """JSON-ready dict: n, mean, std, min, max, quantiles, shares above edges, histogram."""
        empty = not self.n
        quantiles = self.quantile([level / 100 for level in QUANTILE_PERCENTS])
        return {
            "n": int(self.n),
            "mean": None if empty else float(self.mean),
            "std": None if empty else float(self.std),
            "min": None if empty else float(self.min),
            "max": None if empty else float(self.max),
            "quantiles": {f"p{level}": (None if empty else float(value))
                          for level, value in zip(QUANTILE_PERCENTS, quantiles)},
            "quantile_resolution": float(self.width),
            # (no values: no shares either, null like the rest; NaN is not JSON)
            "share_at_or_above": {key: (None if empty else share)
                                  for key, share in self.share_at_or_above(share_edges).items()},
            "histogram": self.compact(),
        }


def summarize_values(
    values,
    *,
    share_edges: Iterable[float] = DEFAULT_SHARE_EDGES,
    bins: int = DEFAULT_BINS,
    low: float = -1.0,
    high: float = 1.0,
) -> dict:
    """The same dict as :meth:`Histogram.summary`, for an array small enough to keep.

    Quantiles and shares are exact (numpy), so ``quantile_resolution`` is 0; NaNs
    (e.g. captions with no companion) are dropped and their number reported.
    """
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    missing = int(np.isnan(array).sum())
    array = array[~np.isnan(array)]
    histogram = Histogram(bins=bins, low=low, high=high)
    if array.size:
        histogram.add(array)
    result = histogram.summary(share_edges)
    if array.size:
        result["std"] = float(array.std())
        result["mean"] = float(array.mean())
        quantiles = np.quantile(array, [level / 100 for level in QUANTILE_PERCENTS])
        result["quantiles"] = {f"p{level}": float(value) for level, value in zip(QUANTILE_PERCENTS, quantiles)}
        result["share_at_or_above"] = {_edge_key(edge): float((array >= float(edge)).mean()) for edge in share_edges}
    result["quantile_resolution"] = 0.0
    result["missing"] = missing
    return result


def _edge_key(edge: float) -> str:
    """Dict key for a threshold: '0.8' rather than '0.8000000000000002'."""
    return f"{float(edge):g}"
