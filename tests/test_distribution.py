"""Histogram and small-array summaries against numpy."""

import numpy as np
import pytest

from capgeo.geometry.distribution import QUANTILE_PERCENTS, Histogram, summarize_values


def _values(seed=0, n=50_000):
    rng = np.random.default_rng(seed)
    # a skewed, clustered mix like real cosines, inside [-1, 1]
    return np.clip(np.concatenate([rng.normal(0.2, 0.1, n), rng.beta(8, 2, n // 5)]), -1, 1)


def test_counts_match_numpy_histogram():
    values = _values()
    histogram = Histogram(bins=4000).add(values)
    reference, _ = np.histogram(values, bins=4000, range=(-1, 1))
    np.testing.assert_array_equal(histogram.counts, reference)
    assert histogram.width == pytest.approx(0.0005)


def test_moments_min_max_match_numpy():
    values = _values(1)
    histogram = Histogram().add(values)
    assert histogram.n == values.size
    assert histogram.mean == pytest.approx(values.mean(), abs=1e-12)
    assert histogram.std == pytest.approx(values.std(), rel=1e-9)
    assert histogram.min == values.min() and histogram.max == values.max()


@pytest.mark.parametrize("bins", [4000, 200, 37])
def test_quantiles_within_one_bin_width(bins):
    values = _values(2)
    histogram = Histogram(bins=bins).add(values)
    levels = np.array(QUANTILE_PERCENTS) / 100
    estimated = histogram.quantile(levels)
    exact = np.quantile(values, levels)
    assert np.all(np.abs(estimated - exact) <= histogram.width + 1e-12)
    summary = histogram.summary()
    assert summary["quantile_resolution"] == pytest.approx(2 / bins)
    for level, value in zip(QUANTILE_PERCENTS, exact):
        assert abs(summary["quantiles"][f"p{level}"] - value) <= histogram.width + 1e-12


def test_extreme_quantiles_are_exact_min_max():
    values = _values(3)
    histogram = Histogram().add(values)
    assert histogram.quantile(0.0) == values.min()
    assert histogram.quantile(1.0) == values.max()


def test_boundaries_one_goes_to_last_bin_minus_one_to_first():
    histogram = Histogram(bins=10).add(np.array([1.0, 1.0, -1.0, 0.0, 0.2]))
    assert histogram.counts[-1] == 2
    assert histogram.counts[0] == 1
    assert histogram.counts[5] == 1  # 0.0 is the left edge of bin 5
    assert histogram.counts[6] == 1  # 0.2 is the left edge of bin 6
    assert histogram.counts.sum() == 5


def test_float32_torch_tensor_input():
    import torch
    values = _values(4).astype(np.float32)
    histogram = Histogram().add(torch.from_numpy(values))
    reference, _ = np.histogram(values.astype(np.float64), bins=4000, range=(-1, 1))
    # float32 arithmetic may move a value lying within float32 rounding (~1.2e-7) of an edge
    # by one bin: only those may differ from numpy's float64 binning
    position = (values.astype(np.float64) + 1) * 2000
    near_edge = np.abs(position - np.round(position)) < 1e-3
    differences = np.abs(histogram.counts - reference).sum()
    assert differences <= 2 * near_edge.sum()
    assert near_edge.sum() < values.size * 0.01
    assert histogram.n == values.size


def test_merge_equals_adding_all():
    values = _values(5)
    whole = Histogram().add(values)
    parts = Histogram().add(values[:1000]).merge(Histogram().add(values[1000:]))
    np.testing.assert_array_equal(parts.counts, whole.counts)
    assert parts.n == whole.n
    assert parts.mean == pytest.approx(whole.mean, abs=1e-12)
    assert parts.std == pytest.approx(whole.std, rel=1e-9)
    assert (parts.min, parts.max) == (whole.min, whole.max)
    with pytest.raises(ValueError, match="different bins"):
        whole.merge(Histogram(bins=10))


def test_share_at_or_above_and_compact_histogram():
    values = _values(6)
    histogram = Histogram().add(values)
    summary = histogram.summary(share_edges=(0.5, 0.8, 0.9))
    for edge in (0.5, 0.8, 0.9):
        assert summary["share_at_or_above"][f"{edge:g}"] == pytest.approx((values >= edge).mean(), abs=1e-12)
    compact = summary["histogram"]
    counts = np.array(compact["counts"])
    assert counts[0] > 0 and counts[-1] > 0 and counts.sum() == values.size
    first = int(round((compact["start"] + 1) / compact["width"]))
    np.testing.assert_array_equal(histogram.counts[first:first + counts.size], counts)
    assert histogram.counts[:first].sum() == 0


def test_non_finite_values_rejected():
    with pytest.raises(ValueError, match="finite"):
        Histogram().add(np.array([0.1, np.nan]))


def test_empty_summary():
    summary = Histogram().summary()
    assert summary["n"] == 0 and summary["mean"] is None and summary["quantiles"]["p50"] is None
    assert summary["histogram"]["counts"] == []


def test_summarize_values_exact_quantiles_and_missing():
    values = _values(7, n=2000)
    with_missing = np.concatenate([values, [np.nan, np.nan]])
    summary = summarize_values(with_missing, share_edges=(0.3,))
    assert summary["n"] == values.size and summary["missing"] == 2
    assert summary["quantile_resolution"] == 0.0
    for level in QUANTILE_PERCENTS:
        assert summary["quantiles"][f"p{level}"] == pytest.approx(np.quantile(values, level / 100), abs=1e-12)
    assert summary["mean"] == pytest.approx(values.mean())
    assert summary["std"] == pytest.approx(values.std())
    assert summary["share_at_or_above"]["0.3"] == pytest.approx((values >= 0.3).mean())
    assert sum(summary["histogram"]["counts"]) == values.size


@pytest.mark.parametrize("values", [[], [float("nan"), float("nan")]])
def test_a_summary_of_no_values_is_strict_json(values):
    """Its shares were NaN, which json.dumps(allow_nan=False) refuses: null, like its mean."""
    import json

    from capgeo.geometry.distribution import summarize_values

    summary = summarize_values(np.array(values))
    assert all(share is None for share in summary["share_at_or_above"].values())
    json.dumps(summary, allow_nan=False)


def test_numpy_values_bin_as_torch_values_and_as_the_cpu_pass():
    """Histogram.add bins a numpy array without torch, by the rule the CPU pass uses (value * scale,
    then + offset, in the values' float type), with moments equal to float64 numpy's; a value off
    the bin edges lands in the bin a tensor of it lands in (torch fuses the two steps, which can
    move a value within one rounding of an edge)."""
    import numpy as np
    import torch

    from capgeo.geometry.distribution import Histogram, bin_scale_offset

    rng = np.random.default_rng(3)
    values = np.concatenate([rng.uniform(-1, 1, 50_000), np.linspace(-1, 1, 4001)]).astype(np.float32)
    from_numpy, from_torch = Histogram().add(values), Histogram().add(torch.from_numpy(values))
    scale, offset = bin_scale_offset(from_numpy.bins)
    rule = np.clip(values * np.float32(scale) + np.float32(offset), 0, from_numpy.bins - 1).astype(np.int64)
    assert np.array_equal(from_numpy.counts, np.bincount(rule, minlength=from_numpy.bins))
    off_edges = rng.uniform(-1, 1, 50_000).astype(np.float32)
    assert np.array_equal(Histogram().add(off_edges[np.abs(off_edges * 2000 - np.round(off_edges * 2000)) > 1e-3]).counts,
                          Histogram().add(torch.from_numpy(off_edges[np.abs(off_edges * 2000 - np.round(off_edges * 2000)) > 1e-3])).counts)
    assert from_torch.n == from_numpy.n
    assert from_numpy.n == values.size and from_numpy.min == float(values.min()) and from_numpy.max == float(values.max())
    assert abs(from_numpy.total - float(values.astype(np.float64).sum())) < 1e-9
    assert abs(from_numpy.total_squares - float((values.astype(np.float64) ** 2).sum())) < 1e-9
