"""capgeo's numpy logsumexp against scipy.special.logsumexp, bit for bit: the gamma grid and the
HN-CLIP losses are the numbers scipy gave, without importing scipy."""

from __future__ import annotations

import numpy as np
import pytest

from capgeo.findings.hnclip_loss import logsumexp

from scipy import special


def _same(mine, theirs) -> bool:
    mine, theirs = np.asarray(mine), np.asarray(theirs)
    return mine.shape == theirs.shape and mine.dtype == theirs.dtype and np.array_equal(mine, theirs, equal_nan=True)


@pytest.mark.parametrize("shape, axis", [((40, 127), 1), ((40, 127), -1), ((3, 16, 16), -1), ((3, 16, 16), -2),
                                         ((5,), 0), ((7, 9), 0)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_random_values_match_scipy_bit_for_bit(shape, axis, keepdims):
    rng = np.random.default_rng(len(shape) * 100 + axis)
    for scale in (0.0, 1e-3, 1.0, 87.5, 1e4):
        values = scale * rng.standard_normal(shape)
        assert _same(logsumexp(values, axis=axis, keepdims=keepdims),
                     special.logsumexp(values, axis=axis, keepdims=keepdims)), scale


def test_ties_at_the_maximum_match_scipy():
    """Every term equal (a gamma of 0: all logits 0), and rows with several terms at their maximum."""
    rows = np.zeros((4, 127))
    rows[1, :5] = 3.0
    rows[2] = np.round(np.random.default_rng(1).standard_normal(127), 1)
    rows[3, ::2] = -2.0
    assert _same(logsumexp(rows, axis=1), special.logsumexp(rows, axis=1))
    assert logsumexp(np.zeros((1, 127)), axis=1)[0] == pytest.approx(np.log(127), rel=1e-15)


def test_infinite_nan_and_empty_inputs_match_scipy():
    values = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0], [np.nan, 0.0, 1.0]])
    with np.errstate(invalid="ignore"):
        assert _same(logsumexp(values, axis=1), special.logsumexp(values, axis=1))
    assert _same(logsumexp(np.zeros((0, 3)), axis=1), special.logsumexp(np.zeros((0, 3)), axis=1))
    assert _same(logsumexp(np.float32([[1, 2, 3]]), axis=1), special.logsumexp(np.float32([[1, 2, 3]]), axis=1))
    assert _same(logsumexp([1, 2, 3], axis=0), special.logsumexp([1, 2, 3], axis=0))
