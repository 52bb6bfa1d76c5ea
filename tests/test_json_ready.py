"""capgeo.geometry.profile.to_json_ready against the plain recursive conversion it shortcuts: the same
values of the same types, NaN and inf as None."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capgeo.geometry.profile import to_json_ready


def reference(value):
    if isinstance(value, dict):
        return {str(key): reference(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [reference(item) for item in value]
    if isinstance(value, np.ndarray):
        return reference(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def typed(value):
    """The value with every leaf's type beside it: 1 and True and 1.0 compare equal."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return ["list", [typed(item) for item in value]]
    return [type(value).__name__, value]


@pytest.mark.parametrize("value", [
    [], (), [1, 2], ("a", None, True), [1.0, math.nan], (0.5, -math.inf), [[1.0, 2.0], [math.inf]], [[], [1]],
    [(1, "a"), (None, True)], [None, 1.0, None], [None, math.nan], [[None, 0.5], [2.0]], [[None], [math.inf]],
    [np.float32(1.5), 2.0], [[np.int64(3)], [4]], {"a": [[1.0]], 1: (2,)},
    [[1, [2]]], [[1.0], [2]], [np.array([1.0, np.nan])], [[np.bool_(True)]], [[0.25] * 10 for _ in range(50)]])
def test_matches_the_recursive_conversion(value):
    assert typed(to_json_ready(value)) == typed(reference(value))


def test_lists_come_back_new_and_mutable():
    rows = [[1.0, 2.0], [3.0]]
    ready = to_json_ready({"rows": rows, "ids": ("a", "b")})
    assert ready == {"rows": [[1.0, 2.0], [3.0]], "ids": ["a", "b"]}
    assert ready["rows"] is not rows and ready["rows"][0] is not rows[0]
