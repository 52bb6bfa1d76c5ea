"""Figure layout: tick labels that would overlap are merged, labels at the top of a line sit above the data."""

from __future__ import annotations

import numpy as np

from capgeo.geometry.typed_profile import Distribution, Lengths
from capgeo.report.figures import (
    HEADROOM,
    MIN_TICK_DECADES,
    caption_length_figure,
    cosine_distribution_figure,
    log_axis_ticks,
)


def test_close_log_ticks_share_one_label_and_every_value_is_labelled():
    values = [32, 64, 77, 128, 248, 256]
    positions, labels = log_axis_ticks(values)
    assert labels == ["32", "64", "77", "128", "248/256"]
    assert positions[-1] == np.sqrt(248 * 256)  # the middle of the two on a log axis
    gaps = np.diff(np.log10(positions))
    assert gaps.min() >= MIN_TICK_DECADES
    assert sorted(int(part) for label in labels for part in label.split("/")) == values


def test_far_apart_ticks_are_kept_as_they_are():
    positions, labels = log_axis_ticks([16, 77, 248])
    assert positions == [16, 77, 248] and labels == ["16", "77", "248"]


def test_mean_labels_and_context_label_sit_above_the_tallest_value():
    edges = np.linspace(0.0, 1.0, 2001)
    counts = np.zeros(2000, dtype=int)
    counts[700:900] = np.arange(200)
    summary = {"histogram": {"low": 0.0, "high": 1.0, "bins": 2000, "counts": counts.tolist(),
                             "edges": edges.tolist()}, "mean": 0.4}
    summary = Distribution.from_dict(summary)
    figure = cosine_distribution_figure([("x", summary, summary)])
    tallest = max(max(trace.y) for trace in figure.data)
    assert figure.layout.yaxis.range[1] >= HEADROOM * tallest - 1e-9
    lengths = {"histogram": {"edges": [0, 10, 20, 30], "counts": [5, 40, 3]}, "max_tokens": 20, "share_truncated": 0.1}
    figure = caption_length_figure(Lengths.from_dict(lengths))
    assert figure.layout.yaxis.range[1] == HEADROOM * 40
