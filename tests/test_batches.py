"""Training-style batches: B captions of B different groups, whatever the group labels are."""

from __future__ import annotations

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.geometry.batches import sample_batches


@pytest.mark.parametrize("codes", [
    [0, 0, 0, 1, 1, 1, 2, 2, 2, 3],
    [0, 0, 0, 5, 5, 5, 9, 9, 9, 40],      # labels with gaps, as library callers may pass
    [7, 3, 7, 3, 12, 12, 7, 25, 3, 25],   # unsorted
])
def test_every_batch_holds_distinct_groups_and_every_caption_can_be_drawn(codes):
    codes = np.asarray(codes)
    batches = sample_batches(codes, 4, 400, seed=1)
    assert batches.shape == (400, 4)
    for batch in batches:
        assert len(set(codes[batch])) == 4
    assert set(batches.ravel()) == set(range(len(codes)))  # each caption of each group turns up


def test_batch_size_is_checked_against_the_groups_that_exist():
    codes = np.array([0, 0, 5, 5, 9, 9])  # three groups, labels up to 9
    with pytest.raises(CapgeoError, match="number of groups .* 3"):
        sample_batches(codes, 4, 1)


def test_seed_fixes_the_draw():
    codes = np.repeat(np.arange(50), 2)
    assert (sample_batches(codes, 8, 20, seed=3) == sample_batches(codes, 8, 20, seed=3)).all()
    assert (sample_batches(codes, 8, 20, seed=3) != sample_batches(codes, 8, 20, seed=4)).any()


def test_a_repeated_draw_is_the_same_draw_and_its_own_array():
    """The in-batch statistics and the gamma section each draw their batches: the same codes, size,
    count and seed give the same draw again, a fresh array that no caller's change reaches."""
    codes = np.repeat(np.arange(60), 3)
    first = sample_batches(codes, 8, 30, seed=5)
    first[:] = -1   # a caller's changes stay its own
    again = sample_batches(codes, 8, 30, seed=5)
    assert np.array_equal(again, sample_batches(codes, 8, 30, seed=5))
    assert (again >= 0).all()
    assert not np.array_equal(again, sample_batches(codes[::-1].copy(), 8, 30, seed=5))
    assert not np.array_equal(again, sample_batches(codes, 8, 30, seed=6))
