"""tf32 / bf16 tile products: companions and threshold pairs stay exact, the histogram's
error is stated, measured and within its bound."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.errors import CapgeoError
from capgeo.geometry.pairwise import scan_pairs


def clustered(n, width, seed, spread=0.5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(n // 25, 2), width))
    vectors = centres[rng.integers(0, len(centres), n)] + spread * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), np.arange(n) // 5


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_reduced_precision_keeps_companions_and_pairs_exact(precision):
    vectors, groups = clustered(900, 48, seed=1)
    exact = scan_pairs(vectors, groups, top_k=5, block_size=128, device="cpu", threshold=0.8)
    fast = scan_pairs(vectors, groups, top_k=5, block_size=128, device="cpu", threshold=0.8, precision=precision)
    np.testing.assert_array_equal(fast.companion_index, exact.companion_index)
    np.testing.assert_allclose(fast.companion_cosine, exact.companion_cosine, atol=1e-6)
    for first, second in zip(fast.extra["pairs"][:2], exact.extra["pairs"][:2]):
        np.testing.assert_array_equal(first, second)
    stated = fast.extra["precision"]
    assert stated["mode"] == precision
    # the measured error (one 900 x 900 tile here) never exceeds the worst-case bound, and the
    # bound holds for the whole distribution: every float32 cosine moved by at most it
    assert 0 <= stated["measured_max_error"] <= stated["cosine_error_bound"] < 0.01
    assert abs(fast.negatives.mean - exact.negatives.mean) <= stated["cosine_error_bound"]
    assert fast.negatives.n == exact.negatives.n
    assert fast.negatives.max <= exact.negatives.max + stated["cosine_error_bound"]
    summary = fast.pairwise_summary()
    assert summary["precision"]["cosine_error_bound"] == stated["cosine_error_bound"]


def test_bf16_error_is_measured_against_float32():
    vectors, groups = clustered(600, 64, seed=2)
    fast = scan_pairs(vectors, groups, top_k=3, device="cpu", precision="bf16")
    import torch
    # independent measure: bf16-rounded inputs, float64 products
    rounded = torch.from_numpy(vectors).to(torch.bfloat16).to(torch.float64).numpy()
    upper = np.triu_indices(len(vectors), 1)
    input_error = np.abs(rounded @ rounded.T - vectors.astype(np.float64) @ vectors.astype(np.float64).T)[upper]
    stated = fast.extra["precision"]
    assert input_error.max() <= stated["cosine_error_bound"]
    # what was measured includes the input rounding (and, on CPU, bf16 output rounding)
    assert stated["measured_max_error"] >= 0.5 * input_error.max()
    assert stated["measured_pairs"] == upper[0].size
    assert 0 < stated["measured_share_of_bins_changed"] < 1


def rescored_all(vectors):
    """Every pair's re-scored cosine, (n, n)."""
    import torch

    from capgeo.geometry.precision import rescored_cosines

    n = len(vectors)
    rows, columns = (index.reshape(-1) for index in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    return rescored_cosines(torch.from_numpy(vectors), torch.from_numpy(rows),
                            torch.from_numpy(columns)).numpy().reshape(n, n)


def rescored_top_k(vectors, groups, k):
    """Oracle: every other-group pair re-scored, each caption's best k by that value, ties by index."""
    n = len(vectors)
    cosine = np.where(groups[:, None] == groups[None, :], -np.inf, rescored_all(vectors))
    order = np.lexsort((np.broadcast_to(np.arange(n), (n, n)), -cosine), axis=1)[:, :k]
    return order, np.take_along_axis(cosine, order, 1)


def near_copies(n=300, width=32, seed=3):
    """Near-copies of one vector: every candidate lies within the bf16 error of the k-th."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=width) + 1e-3 * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), np.arange(n) // 3


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_rows_too_close_to_call_get_the_exact_top_k_of_the_rescored_cosines(precision):
    vectors, groups = near_copies()
    fast = scan_pairs(vectors, groups, top_k=4, block_size=64, device="cpu", precision=precision)
    stated = fast.extra["precision"]
    assert stated["rows_too_close_to_call"] > 0 and stated["pairs_rescored"] > 0
    # cosines near 1, where a bf16 result (this CPU's product) rounds by up to 2**-8: still bounded
    assert stated["measured_max_error"] <= stated["cosine_error_bound"]
    if stated["product"] == "bf16 inputs and output":
        assert stated["cosine_error_bound"] > 2.0 ** -8
    index, cosine = rescored_top_k(vectors, groups, 4)
    np.testing.assert_array_equal(fast.companion_index, index)
    np.testing.assert_array_equal(fast.companion_cosine, cosine)
    # and against float64: the re-scored cosines are float32-accurate
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    exact = np.take_along_axis(unit @ unit.T, index, 1)
    assert np.abs(fast.companion_cosine - exact).max() < 1e-6


def test_rescored_cosines_do_not_depend_on_batching_and_are_within_their_error(monkeypatch):
    import torch

    from capgeo.geometry import precision

    rng = np.random.default_rng(6)
    for width in (1, 37, 768):
        vectors = rng.normal(size=(60, width))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors.astype(np.float32)
        rows, columns = rng.integers(0, 60, 500), rng.integers(0, 60, 500)
        matrix = torch.from_numpy(vectors)
        whole = precision.rescored_cosines(matrix, torch.from_numpy(rows), torch.from_numpy(columns)).numpy()
        float64 = (vectors[rows].astype(np.float64) * vectors[columns].astype(np.float64)).sum(axis=1)
        assert np.abs(whole - float64).max() <= precision.rescore_error(width)
        # one pair per step, and the pairs in another order: the same bits
        monkeypatch.setattr(precision, "RESCORE_ELEMENTS", 1)
        order = rng.permutation(500)
        one_by_one = precision.rescored_cosines(matrix, torch.from_numpy(rows[order]), torch.from_numpy(columns[order]))
        np.testing.assert_array_equal(one_by_one.numpy(), whole[order])
        monkeypatch.undo()


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_tiles_run_apart_and_merged_give_the_local_pass_bit_for_bit(precision):
    # what a Ray task sees: a subset of tiles, so other running k-ths and other picks
    from capgeo.geometry.pairwise import (
        finish_scan,
        make_grid,
        prepare_inputs,
        tile_partial,
    )
    from capgeo.geometry.partials import merge_partials

    for vectors, groups in (near_copies(), clustered(400, 24, seed=8, spread=0.3)):
        options = {"top_k": 5, "bins": 400, "threshold": 0.9, "precision": precision, "count_at_or_above": 0.95}
        local = scan_pairs(vectors, groups, block_size=40, device="cpu", progress=False, **options)
        matrix, codes, device = prepare_inputs(vectors, groups, "cpu")
        grid = make_grid(len(vectors), 40, device, top_k=5)
        tiles = grid.tiles()
        order = np.random.default_rng(9).permutation(len(tiles))
        parts = [tile_partial(matrix, codes, grid, [tiles[i] for i in order[start::3]], **options)
                 for start in range(3)]
        apart = finish_scan(merge_partials(parts), groups, device=device)
        np.testing.assert_array_equal(apart.companion_index, local.companion_index)
        np.testing.assert_array_equal(apart.companion_cosine, local.companion_cosine)
        np.testing.assert_array_equal(apart.negatives.counts, local.negatives.counts)
        for one, other in zip(apart.extra["pairs"], local.extra["pairs"]):
            np.testing.assert_array_equal(one, other)
        assert apart.extra["count_at_or_above"] == local.extra["count_at_or_above"]
        work = ("rows_too_close_to_call", "pairs_rescored")
        assert {key: value for key, value in apart.extra["precision"].items() if key not in work} == \
               {key: value for key, value in local.extra["precision"].items() if key not in work}


def test_unknown_precision_is_an_error():
    vectors, groups = clustered(20, 8, seed=4)
    with pytest.raises(CapgeoError, match="precision must be one of fp32, tf32, bf16"):
        scan_pairs(vectors, groups, device="cpu", precision="fp16")


def test_profile_prints_and_saves_the_error(tmp_path):
    from capgeo.cli import main

    vectors, _ = clustered(200, 16, seed=5)
    np.save(tmp_path / "emb.npy", vectors)
    (tmp_path / "caps.csv").write_text("image,caption\n" + "".join(f"img{i // 5},caption {i}\n" for i in range(200)))
    common = ["profile", str(tmp_path / "caps.csv"), "--encoder", f"vectors:{tmp_path / 'emb.npy'}",
              "--batch-size", "8", "--n-batches", "3", "--no-gamma", "--device", "cpu"]
    shown = CliRunner().invoke(main, [*common, "--precision", "bf16"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "bf16 products: every cosine within +-" in shown.output and "companions exact" in shown.output
    saved = CliRunner().invoke(main, [*common, "--precision", "bf16", "--json"])
    profile = json.loads(saved.stdout)
    assert profile["pairwise"]["exact"] is False
    assert profile["pairwise"]["precision"]["mode"] == "bf16"
    assert profile["options"]["precision"] == "bf16"
    default = json.loads(CliRunner().invoke(main, [*common, "--json"]).stdout)
    assert default["pairwise"]["exact"] is True and "precision" not in default["pairwise"]


def test_a_row_too_close_to_call_rescores_only_the_candidates_within_the_margin(monkeypatch):
    # 13 near-copies of one vector (cosines ~0.9999, all within the bf16 margin of each other)
    # among 100 unrelated vectors: each near-copy's 2k + 1 = 9 finalists leave near-copies out,
    # so its row is too close to call, but only near-copies are within the margin of its k-th
    from capgeo.geometry import pairwise

    rng = np.random.default_rng(12)
    base = rng.normal(size=32)
    near = base + 1e-3 * rng.normal(size=(13, 32))
    vectors = np.concatenate([near, rng.normal(size=(100, 32))])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors.astype(np.float32)
    groups = np.arange(113)
    rescored = []

    def recording(matrix, rows, columns):
        rescored.append((rows.numpy().copy(), columns.numpy().copy()))
        return pairwise.rescored_cosines.__wrapped__(matrix, rows, columns)

    recording.__wrapped__ = pairwise.rescored_cosines
    monkeypatch.setattr(pairwise, "rescored_cosines", recording)
    fast = scan_pairs(vectors, groups, top_k=4, block_size=200, device="cpu", precision="bf16")
    assert fast.extra["precision"]["rows_too_close_to_call"] >= 13
    rows = np.concatenate([pair[0] for pair in rescored])
    columns = np.concatenate([pair[1] for pair in rescored])
    assert len(rows) == fast.extra["precision"]["pairs_rescored"]
    of_near = rows < 13
    assert of_near.sum() > 13 * 9                 # the near-copies' rows went beyond their finalists
    assert (columns[of_near] < 13).all()          # ... to the near-copies only
    index, _ = rescored_top_k(vectors, groups, 4)
    np.testing.assert_array_equal(fast.companion_index, index)


@pytest.mark.parametrize("seed", range(6))
def test_reduced_companions_are_the_top_k_of_the_rescored_cosines_on_random_layouts(seed):
    # sizes, widths, k, tile sizes and group layouts drawn at random, some captions close
    # together (clusters) and some groups larger than a tile: every path and edge at once
    rng = np.random.default_rng(100 + seed)
    n, width, k = int(rng.integers(40, 160)), int(rng.integers(3, 40)), int(rng.integers(1, 9))
    centres = rng.normal(size=(int(rng.integers(2, 8)), width))
    vectors = centres[rng.integers(0, len(centres), n)] + rng.uniform(0.001, 0.5) * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors.astype(np.float32)
    groups = np.sort(rng.integers(0, int(rng.integers(2, n)), n)) if seed % 2 else rng.integers(0, n // 2, n)
    block = int(rng.integers(1, 64))
    index, cosine = rescored_top_k(vectors, groups, k)
    missing = ~np.isfinite(cosine)  # fewer than k other-group captions
    index, cosine = np.where(missing, -1, index), np.where(missing, np.nan, cosine)
    every = rescored_all(vectors)
    expected_rows, expected_columns = np.nonzero(np.triu(groups[:, None] != groups[None, :], 1) & (every >= 0.95))
    for precision in ("tf32", "bf16"):
        fast = scan_pairs(vectors, groups, top_k=k, block_size=block, device="cpu", precision=precision,
                          threshold=0.95)
        np.testing.assert_array_equal(fast.companion_index, index)
        np.testing.assert_array_equal(fast.companion_cosine, cosine)
        rows, columns, values = fast.extra["pairs"]
        np.testing.assert_array_equal(rows, expected_rows)
        np.testing.assert_array_equal(columns, expected_columns)
        np.testing.assert_array_equal(values, every[expected_rows, expected_columns])


def counting_case():
    """Clustered vectors and a threshold in a gap of the float64 cosines (no pair within 1e-5 of it,
    so float32 rounding, tile size and re-scoring cannot move a pair across), and its count."""
    vectors, groups = clustered(240, 32, seed=5, spread=0.3)
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    different = (groups[:, None] != groups[None, :]) & np.triu(np.ones((240, 240), dtype=bool), 1)
    cosines = np.sort((unit @ unit.T)[different])
    start = int(0.9 * cosines.size)
    gap = start + int(np.argmax(np.diff(cosines[start:]) > 2e-5))
    assert cosines[gap + 1] - cosines[gap] > 2e-5
    threshold = float((cosines[gap] + cosines[gap + 1]) / 2)
    return vectors, groups, threshold, int(cosines.size - gap - 1)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("block_size", [7, 64, 1000])
def test_pairs_counted_at_or_above_a_threshold_are_the_exact_count(precision, block_size):
    """The near-duplicate count of a tf32 / bf16 profile: read from its histogram it was 29% low
    (the histogram is within the stated bound, 16 bins, not one); counted in the pass it is exact."""
    vectors, groups, threshold, expected = counting_case()
    assert 0 < expected
    scan = scan_pairs(vectors, groups, top_k=2, block_size=block_size, device="cpu", precision=precision,
                      count_at_or_above=threshold)
    assert scan.extra["count_at_or_above"] == {"threshold": threshold, "pairs": expected}


def test_a_bf16_profile_counts_near_duplicates_exactly():
    """build_profile with --precision bf16 and a top-k too short to count from: the count comes
    from the pass ("counted", exact), not from the bf16 histogram."""
    from pathlib import Path

    import polars as pl

    from capgeo.captions.model import CaptionSet
    from capgeo.encoders.base import EncoderInfo, Embeddings
    from capgeo.geometry.profile import build_profile

    vectors, groups, threshold, expected = counting_case()
    n = len(vectors)
    captions = CaptionSet(pl.DataFrame({"caption_id": [f"c{i}" for i in range(n)],
                                        "group_id": [f"g{g}" for g in groups], "split": [None] * n,
                                        "text": [f"caption {i}" for i in range(n)]},
                                       schema={"caption_id": pl.String, "group_id": pl.String,
                                               "split": pl.String, "text": pl.String}), Path("x"), "test")
    info = EncoderInfo(spec="vectors:x.npy", kind="precomputed", name="x.npy", width=32, context_length=0,
                       logit_scale=None, fingerprint="0" * 64)
    embeddings = Embeddings(vectors=vectors, token_counts=np.full(n, -1), max_tokens=0, info=info,
                            origin="precomputed")
    profile = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, top_k=1, precision="bf16",
                            near_duplicate_threshold=threshold, device="cpu").to_dict()
    near = profile["near_duplicates"]
    assert (near["count_method"], near["exact"], near["n_pairs_cross_group"]) == ("counted", True, expected)
