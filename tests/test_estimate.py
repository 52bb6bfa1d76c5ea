"""Estimate mode: sampled distributions within their stated bounds, faiss companions with measured recall."""

import math

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.geometry.estimate import (
    all_same_group_pairs,
    estimate_pairs,
    sample_different_group_pairs,
    scan_or_estimate,
)
from capgeo.geometry.pairwise import query_companions, scan_pairs


def clustered(n, width, n_groups, seed, spread=0.5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, width))
    vectors = centres[rng.integers(0, 20, n)] + spread * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), rng.integers(0, n_groups, n)


@pytest.fixture(scope="module")
def three_thousand():
    vectors, groups = clustered(3000, 32, 600, seed=11)
    exact = scan_pairs(vectors, groups, top_k=3, block_size=1024, device="cpu")
    return vectors, groups, exact


def test_sampled_mean_and_cdf_within_stated_bounds(three_thousand):
    vectors, groups, exact = three_thousand
    sampled = estimate_pairs(vectors, groups, n_pairs=200_000, seed=3, top_k=3, block_size=1024, device="cpu")
    assert sampled.mode == "sampled" and sampled.companion_mode == "exact"
    bounds = sampled.bounds
    assert sampled.negatives.n == 200_000 == bounds["sample_size"]
    assert bounds["population"] == exact.negatives.n == sampled.negative_pairs_total
    # stated bound: standard error of the mean, 95% interval
    assert bounds["mean_standard_error"] == pytest.approx(sampled.negatives.std / math.sqrt(200_000 - 1))  # sample std
    low, high = bounds["mean_interval"]
    assert low <= exact.negatives.mean <= high
    assert high - low < 0.01
    # DKW: the sampled CDF is within eps of the exact CDF at every bin edge
    epsilon = bounds["cdf_epsilon"]
    assert epsilon == pytest.approx(math.sqrt(math.log(2 / 0.05) / (2 * 200_000)))
    sampled_cdf = np.cumsum(sampled.negatives.counts) / sampled.negatives.n
    exact_cdf = np.cumsum(exact.negatives.counts) / exact.negatives.n
    assert np.abs(sampled_cdf - exact_cdf).max() <= epsilon
    # quantile intervals contain the exact quantiles
    for key, (low, high) in bounds["quantile_intervals"].items():
        level = int(key[1:]) / 100
        assert low <= exact.negatives.quantile(level) <= high, key
    summary = sampled.pairwise_summary()
    assert summary["mode"] == "sampled" and summary["bounds"]["cdf_epsilon"] == epsilon
    # same-group pairs are few: computed exactly
    np.testing.assert_array_equal(sampled.same_group.counts, exact.same_group.counts)
    assert sampled.extra["same_group_bounds"]["sampled"] is False
    # hardest companions stay exact
    np.testing.assert_array_equal(sampled.companion_index, exact.companion_index)
    np.testing.assert_array_equal(sampled.companion_cosine, exact.companion_cosine)


def test_sampling_is_seeded_and_only_different_groups():
    groups = np.repeat(np.arange(50), 4)
    rng_one, rng_two = np.random.default_rng(5), np.random.default_rng(5)
    first, second = sample_different_group_pairs(groups, 40_000, rng_one)
    again = sample_different_group_pairs(groups, 40_000, rng_two)
    np.testing.assert_array_equal(first, again[0])
    assert np.all(groups[first] != groups[second])
    # uniform over ordered pairs of different groups: each caption appears about equally often
    appearances = np.bincount(np.concatenate([first, second]), minlength=200)
    assert appearances.min() > 0.75 * appearances.mean() and appearances.max() < 1.25 * appearances.mean()


def test_all_same_group_pairs_enumerates_each_pair_once():
    groups = np.array([3, 1, 3, 3, 1, 7, 3])
    first, second = all_same_group_pairs(groups)
    pairs = {tuple(sorted(pair)) for pair in zip(first.tolist(), second.tolist())}
    expected = {(i, j) for i in range(7) for j in range(i + 1, 7) if groups[i] == groups[j]}
    assert pairs == expected and len(first) == len(expected)


def test_large_same_group_is_sampled_with_bounds():
    vectors, _ = clustered(400, 16, 2, seed=4)
    groups = np.repeat([0, 1], 200)  # 2 x 19,900 same-group pairs > n_pairs
    sampled = estimate_pairs(vectors, groups, n_pairs=5000, seed=1, top_k=0, device="cpu")
    assert sampled.same_group.n == 5000
    assert sampled.extra["same_group_bounds"]["sampled"] is True
    assert sampled.same_group_summary()["bounds"]["sample_size"] == 5000
    exact = scan_pairs(vectors, groups, top_k=0, device="cpu")
    low, high = sampled.extra["same_group_bounds"]["mean_interval"]
    assert low <= exact.same_group.mean <= high


def test_scan_or_estimate_switches_at_threshold():
    vectors, groups = clustered(300, 8, 60, seed=2)
    assert scan_or_estimate(vectors, groups, estimate_threshold=300, top_k=2, device="cpu").mode == "exact"
    assert scan_or_estimate(vectors, groups, estimate_threshold=299, n_pairs=1000, top_k=2,
                            device="cpu").mode == "sampled"
    assert scan_or_estimate(vectors, groups, mode="sampled", n_pairs=1000, top_k=2, device="cpu").mode == "sampled"
    with pytest.raises(CapgeoError, match="auto, exact or sampled"):
        scan_or_estimate(vectors, groups, mode="fast")
    with pytest.raises(CapgeoError, match="companions must be"):
        estimate_pairs(vectors, groups, companions="annoy")


def test_query_companions_match_full_scan(three_thousand):
    vectors, groups, exact = three_thousand
    queries = np.array([0, 17, 2999, 1500])
    index, cosine = query_companions(vectors, groups, queries, top_k=3, block_size=700, device="cpu")
    np.testing.assert_array_equal(index, exact.companion_index[queries])
    np.testing.assert_allclose(cosine, exact.companion_cosine[queries], atol=1e-6)


def test_faiss_companions_recall_on_easy_set():
    vectors, groups = clustered(2000, 24, 400, seed=8, spread=0.3)
    approx = estimate_pairs(vectors, groups, n_pairs=20_000, seed=0, top_k=5, companions="faiss",
                            recall_queries=500, device="cpu")
    assert approx.companion_mode == "faiss"
    recall = approx.companion_recall
    assert recall["queries"] == 500
    assert recall["recall_at_1"] >= 0.9
    # recall is measured, not assumed: recompute it against the exact pass
    exact = scan_pairs(vectors, groups, top_k=5, device="cpu")
    true_recall = np.mean(approx.companion_cosine[:, 0] >= exact.companion_cosine[:, 0] - 1e-5)
    assert abs(true_recall - recall["recall_at_1"]) < 0.05
    assert np.all(groups[approx.companion_index[:, 0]] != groups)
    summary = approx.hardest_companion_summary()
    assert summary["mode"] == "faiss" and summary["recall"]["recall_at_1"] == recall["recall_at_1"]
    assert summary["n_captions"] == 2000


def test_faiss_captions_of_a_group_larger_than_its_search_get_exact_companions():
    """200 near-identical captions of one image: faiss's first 64 + k neighbours are all of that
    image, so they got no companion at all (and left the hardest-companion statistics)."""
    vectors, groups = clustered(1500, 16, 300, seed=4, spread=0.3)
    rng = np.random.default_rng(5)
    big = np.arange(200)
    vectors[big] = vectors[0] + 1e-3 * rng.normal(size=(200, 16)).astype(np.float32)
    vectors[big] /= np.linalg.norm(vectors[big], axis=1, keepdims=True)
    groups = groups.copy()
    groups[big] = -1  # one group of 200
    approx = estimate_pairs(vectors, groups, n_pairs=5000, seed=0, top_k=3, companions="faiss",
                            recall_queries=100, device="cpu")
    exact_index, exact_cosine = query_companions(vectors, groups, big, top_k=3, device="cpu")
    np.testing.assert_array_equal(approx.companion_index[big], exact_index)
    np.testing.assert_array_equal(approx.companion_cosine[big], exact_cosine)
    assert approx.hardest_companion_summary()["n_captions"] == 1500


def test_sampled_summaries_are_strict_json():
    import json

    vectors, groups = clustered(200, 8, 40, seed=9)
    sampled = estimate_pairs(vectors, groups, n_pairs=3000, seed=2, top_k=2, device="cpu")
    for summary in (sampled.pairwise_summary(), sampled.same_group_summary(), sampled.hardest_companion_summary()):
        json.dumps(summary, allow_nan=False)
    assert sampled.pairwise_summary()["bounds"]["sample_size"] == 3000


def test_small_samples_quantile_intervals_cover_the_tails():
    """With few sampled pairs the DKW band reaches past level 0 (or 1) for the tail quantiles: the
    sample's smallest (largest) value bounds nothing there, so the interval must open to -1 (1)."""
    vectors, groups = clustered(400, 16, 80, seed=2)
    exact = scan_pairs(vectors, groups, top_k=1, block_size=512, device="cpu")
    misses = 0
    for seed in range(40):
        sampled = estimate_pairs(vectors, groups, n_pairs=200, seed=seed, top_k=0, progress=False)
        intervals = sampled.bounds["quantile_intervals"]
        epsilon = sampled.bounds["cdf_epsilon"]
        assert epsilon > 0.05  # the regime this test is about
        assert intervals["p1"][0] == -1.0 and intervals["p99"][1] == 1.0
        for key, (low, high) in intervals.items():
            assert -1.0 <= low <= high <= 1.0
            misses += not low <= exact.negatives.quantile(int(key[1:]) / 100) <= high
    assert misses <= 0.05 * 40 * len(intervals)


def test_the_mean_error_uses_the_sample_standard_deviation_and_needs_two_draws():
    """One sampled pair gave a mean '+-0.0000 (95%)': the spread of the draws, not of the sample."""
    vectors, groups = clustered(60, 8, 20, seed=4)
    sampled = estimate_pairs(vectors, groups, n_pairs=2, seed=0, top_k=0, progress=False)
    bounds = sampled.bounds
    values = sampled.negatives
    assert bounds["mean_standard_error"] == pytest.approx(values.std / math.sqrt(1))
    with pytest.raises(CapgeoError, match="--sampled-pairs: expected at least 2"):
        estimate_pairs(vectors, groups, n_pairs=1, seed=0, top_k=0, progress=False)
