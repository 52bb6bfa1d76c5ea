"""capgeo._json_write.dumps against json.dumps(indent=2, ensure_ascii=False, allow_nan=False): the same bytes,
and the same errors."""

from __future__ import annotations

import json
import math
from enum import IntEnum

import numpy as np
import pytest

from capgeo._json_write import dumps


def reference(value, indent: int = 2) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False)


class Level(IntEnum):
    HIGH = 3


def random_value(rng, depth: int = 0):
    kind = rng.integers(0, 9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return bool(rng.integers(0, 2))
    if kind == 2:
        return int(rng.integers(-10**12, 10**12))
    if kind == 3:
        return float(rng.standard_normal() * 10.0 ** rng.integers(-30, 30))
    if kind == 4:
        return "".join(rng.choice(list('ab "\\\n\t\u00e9\u4e2d\U0001f600/\x01'), size=rng.integers(0, 8)))
    if kind == 5:
        return [float(v) for v in rng.standard_normal(rng.integers(0, 6))]
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.integers(0, 5))]
    if kind == 7:
        return tuple(random_value(rng, depth + 1) for _ in range(rng.integers(0, 3)))
    return {f"k{i}\u00e9\"": random_value(rng, depth + 1) for i in range(rng.integers(0, 5))}


def test_random_documents_match_json_byte_for_byte():
    rng = np.random.default_rng(0)
    for _ in range(400):
        value = {"doc": random_value(rng)}
        assert dumps(value) == reference(value)
    assert dumps([], 4) == reference([], 4) and dumps({"a": [1, [2, {}]]}, 4) == reference({"a": [1, [2, {}]]}, 4)


def test_profile_shaped_lists_match_json():
    rng = np.random.default_rng(1)
    value = {"companions": {"caption_id": [f"id{i}" for i in range(300)],
                            "top_ids": [[f"id{j}" for j in rng.integers(0, 300, 10)] + [None] for _ in range(300)],
                            "top_cosines": np.round(rng.random((300, 10)), 6).tolist(),
                            "hardest_cosine": [None, 0.5, 1.0, -0.0, 1e-7, 123456789.0, 1e22],
                            "mixed": [1, 2.0, True, None, "x", False, 0]}}
    assert dumps(value) == reference(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, [1.0, math.nan], {"a": [math.inf]}])
def test_non_finite_floats_raise_what_json_raises(bad):
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dumps({"x": bad})


def test_what_json_converts_or_refuses_is_left_to_json():
    converted = {"level": Level.HIGH, 1: "int key", None: [Level.HIGH], 2.5: True, "flag": np.float64(0.25)}
    assert dumps(converted) == reference(converted)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps({"array": np.zeros(2)})


@pytest.mark.parametrize("rows", [
    [[]], [[], [1, 2]], [(1, 2), (3,)], [[1.5, -0.0], [1e-7]], [["a\n", "\u00e9"], []], [[None, None], [None]],
    [[True], [False, True]], [[1], [2.0]], [[1, True]], [[1, [2]], [3]], [[{"a": 1}]], [[Level.HIGH], [1]],
    [[np.float64(0.5)], [1.0]], [[None, 0.5, -0.0], [0.25, None, 1e-7], [0.0, 1.0, None]],
    [[None, np.float64(0.5)], [0.25, None]]])
@pytest.mark.parametrize("indent", [0, 2, 4])
def test_lists_of_flat_rows_match_json(rows, indent):
    # a profile's N companion lists take the one-pass path; rows it does not know fall back
    value = {"rows": rows}
    assert dumps(value, indent) == reference(value, indent)


def test_a_non_finite_float_in_a_row_raises_what_json_raises():
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dumps({"rows": [[1.0], [2.0, math.nan]]})
    for bad in ([None, 0.0, math.inf], [[None, 0.5], [-math.inf, None]], [[None, math.nan]]):
        # floats beside nulls (an example batch's matrix, its diagonal null) take a path of their own
        with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
            dumps({"rows": bad})
