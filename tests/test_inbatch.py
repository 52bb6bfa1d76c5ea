"""In-batch statistics against a brute-force recomputation from the sampled batch indices."""

from __future__ import annotations

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.geometry import inbatch
from capgeo.geometry.batches import sample_batches
from capgeo.geometry.inbatch import bucket_labels, check_edges, inbatch_statistics, quantile_key


def _normalise(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def random_vectors(n: int, width: int, seed: int) -> np.ndarray:
    return _normalise(np.random.default_rng(seed).normal(size=(n, width)))


def clip_like_vectors(n_groups: int, per_group: int, width: int, seed: int) -> np.ndarray:
    """Anisotropic embeddings like a CLIP text tower: a shared direction puts typical
    cosines near 0.8, captions of one group sit closer, a few groups nearly collide."""
    rng = np.random.default_rng(seed)
    common = rng.normal(size=width)
    common /= np.linalg.norm(common)
    centres = 2.2 * common + rng.normal(size=(n_groups, width)) / np.sqrt(width)
    centres[1] = centres[0] + 0.02 * rng.normal(size=width) / np.sqrt(width)  # a near-duplicate group
    vectors = np.repeat(centres, per_group, axis=0) + 0.3 * rng.normal(size=(n_groups * per_group, width)) / np.sqrt(width)
    return _normalise(vectors)


def brute_force(vectors, batches, edges, threshold):
    """Plain float64 loops over each batch: the independent reference."""
    n_batches, B = batches.shape
    above = np.zeros(len(edges))
    hardest = []
    near_pairs = []
    for batch in batches:
        x = vectors[batch].astype(np.float64)
        s = x @ x.T
        pairs_above_threshold = 0
        for i in range(B):
            row = [s[i, j] for j in range(B) if j != i]
            hardest.append(max(row))
            for e, edge in enumerate(edges):
                above[e] += sum(value >= edge for value in row)
            for j in range(i + 1, B):
                pairs_above_threshold += s[i, j] >= threshold
        near_pairs.append(pairs_above_threshold)
    total = n_batches * B * (B - 1)
    share_above = above / total
    bounds = np.concatenate([[1.0], share_above, [0.0]])
    return {
        "share_above": share_above,
        "shares": bounds[:-1] - bounds[1:],
        "expected": above / (n_batches * B),
        "hardest": np.array(hardest),
        "near_pairs": np.array(near_pairs),
    }


@pytest.mark.parametrize(
    "make, edges, threshold, batch_size",
    [
        (lambda: (random_vectors(120, 12, 1), np.arange(120) // 2), (0.2, 0.4, 0.6), 0.7, 8),
        (lambda: (clip_like_vectors(50, 3, 64, 2), np.arange(150) // 3), (0.7, 0.8, 0.9), 0.95, 16),
        # one caption per group, B equal to the number of groups
        (lambda: (random_vectors(12, 6, 3), np.arange(12)), (-0.2, 0.0, 0.5), 0.8, 12),
    ],
)
def test_statistics_match_brute_force(make, edges, threshold, batch_size):
    vectors, groups = make()
    result = inbatch_statistics(vectors, groups, batch_size, n_batches=30, seed=5, edges=edges,
                                near_duplicate_threshold=threshold)
    batches = sample_batches(groups, batch_size, 30, 5)
    reference = brute_force(vectors, batches, edges, threshold)

    buckets = result["buckets"]
    assert buckets["edges"] == list(edges)
    np.testing.assert_allclose(buckets["share_above"], reference["share_above"], atol=1e-12)
    np.testing.assert_allclose(buckets["shares"], reference["shares"], atol=1e-12)
    assert sum(buckets["shares"]) == pytest.approx(1.0)
    np.testing.assert_allclose(buckets["expected_above_per_row"], reference["expected"], atol=1e-12)
    np.testing.assert_allclose(buckets["expected_above_per_row"],
                               np.array(buckets["share_above"]) * (batch_size - 1), rtol=1e-9)

    hardest = result["hardest_in_batch"]
    assert hardest["count"] == 30 * batch_size
    assert hardest["mean"] == pytest.approx(reference["hardest"].mean(), abs=1e-6)
    assert hardest["std"] == pytest.approx(reference["hardest"].std(), abs=1e-6)
    assert hardest["max"] == pytest.approx(reference["hardest"].max(), abs=1e-6)
    assert hardest["min"] == pytest.approx(reference["hardest"].min(), abs=1e-6)
    assert hardest["quantiles"]["p50"] == pytest.approx(np.median(reference["hardest"]), abs=1e-6)
    assert hardest["quantiles"]["p90"] == pytest.approx(np.quantile(reference["hardest"], 0.9), abs=1e-6)

    near = result["near_duplicate"]
    assert near["share_batches"] == pytest.approx(np.mean(reference["near_pairs"] > 0))
    assert near["mean_pairs_per_batch"] == pytest.approx(reference["near_pairs"].mean())


def test_clip_like_batches_are_hard_and_hold_near_duplicates():
    """The synthetic CLIP-like set is built so the statistics are not trivially zero."""
    vectors, groups = clip_like_vectors(50, 3, 64, 2), np.arange(150) // 3
    result = inbatch_statistics(vectors, groups, 48, n_batches=40, seed=0)
    shares = result["buckets"]["shares"]
    assert shares[2] + shares[3] > 0.5          # most negatives at >= 0.8
    assert 0 < result["near_duplicate"]["share_batches"] < 1   # groups 0 and 1 collide only sometimes


def test_seed_fixes_results_and_other_seeds_change_them():
    vectors, groups = random_vectors(200, 10, 7), np.arange(200) // 4
    first = inbatch_statistics(vectors, groups, 10, n_batches=20, seed=3, edges=(0.1, 0.3))
    again = inbatch_statistics(vectors, groups, 10, n_batches=20, seed=3, edges=(0.1, 0.3))
    other = inbatch_statistics(vectors, groups, 10, n_batches=20, seed=4, edges=(0.1, 0.3))
    assert first == again
    assert first["buckets"]["shares"] != other["buckets"]["shares"]
    assert first["example"]["caption_ids"] != other["example"]["caption_ids"]


def test_chunking_does_not_change_results(monkeypatch):
    vectors, groups = random_vectors(90, 8, 11), np.arange(90) // 3
    whole = inbatch_statistics(vectors, groups, 9, n_batches=25, seed=1, edges=(0.0, 0.5))
    monkeypatch.setattr(inbatch, "_CHUNK_ENTRIES", 2 * 9 * 9)  # two batches per chunk
    chunked = inbatch_statistics(vectors, groups, 9, n_batches=25, seed=1, edges=(0.0, 0.5))
    assert chunked == whole


def test_example_matrix_is_a_real_batch_with_masked_diagonal():
    vectors = random_vectors(40, 6, 2)
    groups = np.arange(40) // 2
    ids = [f"c{i}" for i in range(40)]
    group_ids = [f"g{g}" for g in groups]
    result = inbatch_statistics(vectors, groups, 6, n_batches=3, seed=9, caption_ids=ids, group_ids=group_ids)
    first_batch = sample_batches(groups, 6, 3, 9)[0]
    example = result["example"]
    assert example["caption_ids"] == [ids[i] for i in first_batch]
    assert example["group_ids"] == [group_ids[i] for i in first_batch]
    assert len(set(example["group_ids"])) == 6
    matrix = example["cosine"]
    reference = vectors[first_batch].astype(np.float64) @ vectors[first_batch].T.astype(np.float64)
    for i in range(6):
        assert matrix[i][i] is None
        for j in range(6):
            if i != j:
                assert matrix[i][j] == pytest.approx(reference[i, j], abs=6e-5)
                assert matrix[i][j] == matrix[j][i]


def test_example_matrix_is_capped_at_128_rows():
    vectors, groups = random_vectors(150, 4, 0), np.arange(150)
    example = inbatch_statistics(vectors, groups, 140, n_batches=1, seed=0)["example"]
    assert len(example["cosine"]) == 128 and all(len(row) == 128 for row in example["cosine"])
    assert len(example["caption_ids"]) == 128


def test_relative_edges_give_a_second_composition():
    vectors, groups = random_vectors(100, 8, 4), np.arange(100) // 2
    result = inbatch_statistics(vectors, groups, 10, n_batches=15, seed=2, edges=(0.1, 0.5),
                                relative_edges=[0.0, 0.3], relative_levels=[0.5, 0.9])
    absolute_same_edges = inbatch_statistics(vectors, groups, 10, n_batches=15, seed=2, edges=(0.0, 0.3))
    relative = result["relative_buckets"]
    assert relative["kind"] == "relative"
    assert relative["quantile_levels"] == [0.5, 0.9]
    assert relative["labels"] == ["<p50", "p50-p90", ">=p90"]
    assert relative["shares"] == absolute_same_edges["buckets"]["shares"]
    assert result["buckets"]["edges"] == [0.1, 0.5]


def test_batch_larger_than_groups_is_a_clear_error():
    vectors, groups = random_vectors(30, 4, 0), np.arange(30) // 3
    with pytest.raises(CapgeoError, match="batch size 11 is larger than the number of groups"):
        inbatch_statistics(vectors, groups, 11, n_batches=2)


@pytest.mark.parametrize("edges", [(), (0.8, 0.7), (0.5, 0.5), (0.5, 1.5)])
def test_bad_edges_are_rejected(edges):
    with pytest.raises(CapgeoError, match="edge"):
        check_edges(edges)


def test_labels_and_quantile_keys():
    assert bucket_labels((0.7, 0.8, 0.9)) == ["<0.7", "0.7-0.8", "0.8-0.9", ">=0.9"]
    assert bucket_labels((0.85,)) == ["<0.85", ">=0.85"]
    assert [quantile_key(q) for q in (0.01, 0.05, 0.5, 0.9, 0.99, 0.999)] == ["p1", "p5", "p50", "p90", "p99", "p99.9"]


def test_values_on_an_edge_count_in_the_bucket_above():
    """One-hot vectors: every cosine is exactly 0 or 1, so each sits on an edge (ties)."""
    vectors = np.eye(3, dtype=np.float32)[np.arange(12) % 3]
    groups = np.arange(12)
    result = inbatch_statistics(vectors, groups, 6, n_batches=20, seed=0, edges=(0.0, 1.0),
                                near_duplicate_threshold=1.0)
    batches = sample_batches(groups, 6, 20, 0)
    reference = brute_force(vectors, batches, (0.0, 1.0), 1.0)
    np.testing.assert_allclose(result["buckets"]["shares"], reference["shares"], atol=1e-12)
    assert result["buckets"]["shares"][0] == 0.0            # nothing below 0
    assert result["buckets"]["share_above"][0] == 1.0       # every negative is >= 0
    assert result["near_duplicate"]["mean_pairs_per_batch"] == pytest.approx(reference["near_pairs"].mean())
    assert result["near_duplicate"]["share_batches"] == 1.0  # 6 captions over 3 directions always collide
    assert result["hardest_in_batch"]["mean"] == pytest.approx(reference["hardest"].mean())
    assert set(np.unique(reference["hardest"])) <= {0.0, 1.0}


@pytest.mark.parametrize("width, batch_size", [(384, 16), (384, 128), (768, 256)])
def test_batch_products_are_numpy_products_as_close_as_torch_bmm(width, batch_size):
    """The in-batch cosines are numpy's float32 products on one BLAS thread (within float32 rounding
    of torch.bmm's), and the statistics are read from them."""
    import torch

    from capgeo.blas import one_blas_thread

    vectors = clip_like_vectors(300, 2, width, seed=3)
    batches = sample_batches(np.repeat(np.arange(300), 2), batch_size, 6, seed=5)
    members = vectors[batches]
    from_torch = torch.bmm(torch.from_numpy(members), torch.from_numpy(members).transpose(1, 2)).numpy()
    with one_blas_thread():
        expected = np.matmul(members, members.transpose(0, 2, 1))
    np.testing.assert_allclose(expected, from_torch, rtol=0, atol=1e-5)  # float32 sums of up to 768 terms
    result = inbatch_statistics(vectors, np.repeat(np.arange(300), 2), batch_size, n_batches=6, seed=5)
    diagonal = np.arange(batch_size)
    expected[:, diagonal, diagonal] = -np.inf
    assert result["hardest_in_batch"]["max"] == float(expected.max())
    assert result["hardest_in_batch"]["mean"] == float(expected.max(axis=2).astype(np.float64).mean())


def test_one_blas_thread_runs_one_thread_and_restores_blas():
    """The in-batch products run on one BLAS thread (capgeo.blas), so their bits do not follow the
    core count; OpenBLAS's threaded kernels may round differently (they do on AMD EPYC), within
    float32 rounding. Outside, BLAS keeps its own thread count."""
    import threadpoolctl

    from capgeo.blas import one_blas_thread

    def blas_threads():
        return {entry["num_threads"] for entry in threadpoolctl.threadpool_info() if entry["user_api"] == "blas"}

    vectors = clip_like_vectors(400, 2, 384, seed=4)
    members = vectors[sample_batches(np.repeat(np.arange(400), 2), 256, 4, seed=1)]
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        several = np.matmul(members, members.transpose(0, 2, 1))
        with one_blas_thread():
            assert blas_threads() == {1}
            one = np.matmul(members, members.transpose(0, 2, 1))
            again = np.matmul(members, members.transpose(0, 2, 1))
        assert blas_threads() == {2}
    assert np.array_equal(one, again)
    np.testing.assert_allclose(one, several, rtol=0, atol=1e-6)


def test_hardest_in_batch_histogram_counts_each_row_once_against_brute_force():
    """The histogram the report draws: one count per batch row, in the bin of that row's hardest
    negative (numpy float64 loops, binned by floor((cosine + 1) / width)), on the profile's bin grid."""
    vectors, groups = clip_like_vectors(60, 3, 64, 5), np.arange(180) // 3
    batch_size, n_batches = 24, 25
    result = inbatch_statistics(vectors, groups, batch_size, n_batches=n_batches, seed=4)
    reference = brute_force(vectors, sample_batches(groups, batch_size, n_batches, 4), (0.8,), 0.95)["hardest"]
    histogram = result["hardest_in_batch"]["histogram"]
    width = histogram["width"]
    assert width == pytest.approx(2 / 4000) and result["hardest_in_batch"]["bin_width"] == width
    assert sum(histogram["counts"]) == n_batches * batch_size
    assert len(histogram["edges"]) == len(histogram["counts"]) + 1
    bins = np.floor((reference + 1.0) / width + 1e-9).astype(int)   # no reference value sits within 1e-9 of an edge
    first = int(round((histogram["start"] + 1.0) / width))
    expected = np.bincount(bins - first, minlength=len(histogram["counts"]))
    np.testing.assert_array_equal(histogram["counts"], expected)
    assert histogram["edges"][0] == pytest.approx(histogram["start"])
    assert histogram["edges"][0] <= reference.min() < histogram["edges"][1]
    assert histogram["edges"][-2] <= reference.max() < histogram["edges"][-1]


def test_threads_do_not_change_results(monkeypatch):
    """Chunks of batches run side by side on a pool, each product on one BLAS thread: any thread
    count gives the one-thread statistics."""
    from capgeo.geometry import cpu_pass

    vectors, groups = clip_like_vectors(80, 3, 48, 2), np.arange(240) // 3
    monkeypatch.setattr(inbatch, "_CHUNK_ENTRIES", 3 * 16 * 48)  # three batches per chunk
    results = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(cpu_pass, "default_threads", lambda threads=threads: threads)
        results.append(inbatch_statistics(vectors, groups, 16, n_batches=40, seed=2, edges=(0.7, 0.9),
                                          relative_edges=[0.75, 0.85], relative_levels=[0.5, 0.9]))
    assert results[0] == results[1] == results[2]
