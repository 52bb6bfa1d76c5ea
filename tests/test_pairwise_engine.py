"""The all-pairs engine's pieces: tile sizing, per-tile partials and their merge, the
threshold consumer, and results that do not depend on the tile size."""

import random
from fractions import Fraction

import numpy as np
import pytest

from capgeo.geometry.partials import (
    exact_units,
    from_exact_units,
    merge_partials,
)
from capgeo.geometry.pairwise import finish_scan, make_grid, prepare_inputs, scan_pairs, tile_partial
from capgeo.geometry.tile_size import BYTES_PER_CELL, CPU_BLOCK_SIZE, MAX_DEVICE_BLOCK_SIZE, choose_block_size


def grouped_vectors(n, width, seed, per_group=5):
    """Clustered unit vectors (so some pairs are close) in adjacent groups of ``per_group``."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(n // 20, 2), width))
    vectors = centres[rng.integers(0, len(centres), n)] + 0.4 * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), np.arange(n) // per_group


def representable(n, seed):
    """Entries +-0.25 in width 16: every cosine is a multiple of 1/8, exact in any summation order."""
    rng = np.random.default_rng(seed)
    return rng.choice([-0.25, 0.25], size=(n, 16)).astype(np.float32), rng.integers(0, n // 3, n)


def float64_pairs(vectors, groups):
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    cosine = unit @ unit.T
    rows, columns = np.triu_indices(len(unit), 1)
    different = groups[rows] != groups[columns]
    return rows[different], columns[different], cosine[rows, columns][different]


def assert_scans_identical(first, second):
    """Bit-identical histograms (counts and float64 moments), companions and threshold pairs."""
    for one, other in ((first.negatives, second.negatives), (first.same_group, second.same_group)):
        np.testing.assert_array_equal(one.counts, other.counts)
        assert (one.n, one.total, one.total_squares) == (other.n, other.total, other.total_squares)
        assert (one.min, one.max) == (other.min, other.max)
    np.testing.assert_array_equal(first.companion_index, second.companion_index)
    np.testing.assert_array_equal(first.companion_cosine, second.companion_cosine)
    for one, other in zip(first.extra["pairs"], second.extra["pairs"]):
        np.testing.assert_array_equal(one, other)


def test_tiny_and_huge_tiles_give_identical_results_on_exact_cosines():
    vectors, groups = representable(150, seed=1)
    tiny = scan_pairs(vectors, groups, top_k=6, block_size=1, device="cpu", threshold=0.5)
    huge = scan_pairs(vectors, groups, top_k=6, block_size=10_000, device="cpu", threshold=0.5)
    assert (tiny.block_size, huge.block_size) == (1, 150)
    assert_scans_identical(tiny, huge)
    # and both equal numpy's float64 mean exactly (every cosine is a multiple of 1/8)
    _, _, values = float64_pairs(vectors, groups)
    assert tiny.negatives.mean == values.mean()


def test_mean_and_std_agree_across_tile_sizes_to_1e9():
    # float32 products can differ by an ulp between tile shapes; the float64 sums must not add more
    vectors, groups = grouped_vectors(700, 48, seed=2)
    scans = [scan_pairs(vectors, groups, top_k=4, block_size=size, device="cpu") for size in (61, 256, 700)]
    _, _, values = float64_pairs(vectors, groups)
    for scan in scans:
        assert scan.negatives.n == values.size
        assert abs(scan.negatives.mean - scans[0].negatives.mean) < 1e-9
        assert abs(scan.negatives.std - scans[0].negatives.std) < 1e-9
        # and they are the float64 statistics of the float32 cosines (within float32 rounding of each)
        assert abs(scan.negatives.mean - values.mean()) < 1e-8
        assert abs(scan.negatives.std - values.std()) < 1e-8
        np.testing.assert_array_equal(scan.companion_index[:, 0], scans[0].companion_index[:, 0])


def test_partials_merge_in_any_grouping_and_order_bit_for_bit():
    vectors, groups = grouped_vectors(230, 12, seed=3)
    whole = scan_pairs(vectors, groups, top_k=5, block_size=32, device="cpu", threshold=0.6)
    matrix, codes, device = prepare_inputs(vectors, groups, "cpu")
    grid = make_grid(len(vectors), 32, device)
    tiles = grid.tiles()
    rng = random.Random(4)
    for _ in range(3):
        rng.shuffle(tiles)
        cuts = sorted(rng.sample(range(1, len(tiles)), 5))
        chunks = [tiles[start:end] for start, end in zip([0] + cuts, cuts + [len(tiles)])]
        partials = [tile_partial(matrix, codes, grid, chunk, top_k=5, threshold=0.6) for chunk in chunks]
        rng.shuffle(partials)
        merged = finish_scan(merge_partials(partials), groups)
        assert_scans_identical(merged, whole)  # float64 moments too: bit for bit, not merely close
        assert merged.extra["tiles"] == len(tiles)


def test_threshold_pairs_are_every_different_group_pair_above_it():
    vectors, groups = grouped_vectors(300, 10, seed=5)
    scan = scan_pairs(vectors, groups, top_k=3, block_size=37, device="cpu", threshold=0.7, histograms=False)
    rows, columns, values = float64_pairs(vectors, groups)
    # pairs within float32 rounding of the threshold may fall either way
    sure = values >= 0.7 + 1e-6
    maybe = np.abs(values - 0.7) < 1e-6
    found_rows, found_columns, found_cosines = scan.extra["pairs"]
    found = set(zip(found_rows.tolist(), found_columns.tolist()))
    assert set(zip(rows[sure].tolist(), columns[sure].tolist())) <= found
    assert found <= set(zip(rows[sure | maybe].tolist(), columns[sure | maybe].tolist()))
    assert len(found) == len(found_rows) and np.all(found_rows < found_columns)
    assert np.all(groups[found_rows] != groups[found_columns])
    lookup = dict(zip(zip(rows.tolist(), columns.tolist()), values))
    np.testing.assert_allclose(found_cosines, [lookup[pair] for pair in zip(found_rows.tolist(), found_columns.tolist())],
                               atol=2e-6)


def test_exact_units_add_without_rounding():
    values = [0.1, 0.2, -0.3, 1e-300, 1e300, -1e300]
    total = sum(exact_units(value) for value in values)
    # float addition loses the small terms; exact units keep them until the one final rounding
    assert sum(values) != float(sum(Fraction(value) for value in values))
    assert from_exact_units(total) == float(sum(Fraction(value) for value in values))
    assert from_exact_units(sum(exact_units(value) for value in reversed(values))) == from_exact_units(total)


def test_block_size_chosen_from_device_and_n():
    import torch
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert choose_block_size(100_000, cpu) == CPU_BLOCK_SIZE
    assert choose_block_size(500, cpu) == 500
    # the tile buffers must fit the stated share of free memory
    gib = 1 << 30
    for free in (1 * gib, 8 * gib, 40 * gib):
        side = choose_block_size(10_000_000, cuda, free_bytes=free, memory_share=0.5)
        assert side % 1024 == 0
        assert side * side * BYTES_PER_CELL <= 0.5 * free or side == 1024
        assert (side + 1024) ** 2 * BYTES_PER_CELL > 0.5 * free or side == MAX_DEVICE_BLOCK_SIZE
    assert choose_block_size(10_000_000, cuda, free_bytes=140 * gib) == MAX_DEVICE_BLOCK_SIZE
    assert choose_block_size(5_000, cuda, free_bytes=140 * gib) == 5_000
    # the pass sizes its tiles itself when no block size is given
    vectors, groups = grouped_vectors(40, 8, seed=6)
    assert scan_pairs(vectors, groups, top_k=2, device="cpu").block_size == 40


def test_report_runs_one_pass_and_dupes_reuse_it(monkeypatch, tmp_path):
    """The report's profile and its dupes section share one all-pairs pass, with the same answer."""
    from pathlib import Path

    import polars as pl

    import capgeo.geometry.pairwise as pairwise
    from capgeo.captions.model import CaptionSet
    from capgeo.encoders import embed
    from capgeo.findings.dupes_options import ExampleOptions, PairListOptions
    from capgeo.findings.duplicates import dupes_section
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.geometry.scan_options import ScanOptions
    from capgeo.report.build import ReportOptions, report_dataset

    vectors, groups = grouped_vectors(120, 16, seed=7, per_group=4)
    vectors[50] = vectors[10]  # one near-duplicate pair of different images
    table = pl.DataFrame({"caption_id": [f"c{i}" for i in range(120)], "group_id": [f"g{g}" for g in groups],
                          "split": [None] * 120, "text": [f"caption {i}" for i in range(120)]})
    captions = CaptionSet(table, Path("synthetic"), "test")
    np.save(tmp_path / "emb.npy", vectors)
    embeddings = embed(captions, f"vectors:{tmp_path / 'emb.npy'}", use_cache=False)
    expected = dupes_section(captions, embeddings, pairs=PairListOptions(limit=20),
                             examples=ExampleOptions(quantiles=(0.5, 0.9, 0.99), per_quantile=1,
                                                     neighbours=3)).to_dict()
    calls = []
    real_scan = pairwise.tile_partial
    # each call's options (a ScanOptions, its fields as keywords replacing them)
    monkeypatch.setattr(pairwise, "tile_partial", lambda *a, **k: calls.append(
        {**vars(ScanOptions.of(a[4] if len(a) > 4 else k.get("options"))),
         **{name: value for name, value in k.items() if name != "options"}}) or real_scan(*a, **k))
    report = report_dataset(captions, None, ProfileOptions(batch_sizes=[8], n_batches=5),
                            report=ReportOptions(gamma=False, caption_map=False), embeddings=embeddings)
    assert len(calls) == 1 and calls[0]["histograms"]
    assert report.profile.to_dict()["dupes"]["pairs"] == expected["pairs"]
    assert report.profile.dupes.pairs[0].cosine == pytest.approx(1.0, abs=1e-6)
    # the map's neighbour graph wants longer lists than the profile's top 10: one more pass, its own,
    # with no histograms; the dupes section still reuses the profile's
    calls.clear()
    mapped = report_dataset(captions, None, ProfileOptions(batch_sizes=[8], n_batches=5),
                            report=ReportOptions(gamma=False), embeddings=embeddings)
    assert len(calls) == 2 and calls[0]["histograms"] and not calls[1]["histograms"]
    assert mapped.profile.to_dict()["dupes"] == report.profile.to_dict()["dupes"]


def brute_force_companions(vectors, groups, k):
    """Each caption's k best other-group cosines (float64), cosine descending then index ascending."""
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    cosine = unit @ unit.T
    cosine[groups[:, None] == groups[None, :]] = -np.inf
    index = np.full((len(unit), k), -1)
    for row in range(len(unit)):
        order = np.lexsort((np.arange(len(unit)), -cosine[row]))[:k]
        finite = np.isfinite(cosine[row, order])
        index[row, : finite.sum()] = order[finite]
    return index


def torch_engine_scan(vectors, groups, *, block_size, **options):
    """The torch engine's scan on the CPU (at fp32 the CPU pass is numpy's; cuda runs this one)."""
    matrix, codes, device = prepare_inputs(vectors, groups, "cpu", precision="tf32")  # torch tensors
    grid = make_grid(len(vectors), block_size, device, top_k=options["top_k"])
    return finish_scan(tile_partial(matrix, codes, grid, grid.tiles(), **options), groups)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_companions_merged_from_cells_above_the_kth_equal_the_dense_top_k(monkeypatch, precision):
    # ties everywhere (cosines are multiples of 1/8), groups scattered over the tiles, k larger
    # than some captions' count of other-group candidates in their first tiles. The entries
    # are exact in bf16 too, so there every cosine sits within the error margin of the k-th
    from capgeo.geometry import pairwise

    vectors, groups = representable(240, seed=7)
    paths = {}

    def picked(self, *args):
        merged = pairwise._ScanState._merge_cells_above_kth.__wrapped__(self, *args)
        paths["picked"] = paths.get("picked", 0) + merged
        return merged

    def dense(self, *args):
        paths["dense"] = paths.get("dense", 0) + 1
        return pairwise._ScanState._merge_dense.__wrapped__(self, *args)

    picked.__wrapped__ = pairwise._ScanState._merge_cells_above_kth
    dense.__wrapped__ = pairwise._ScanState._merge_dense
    monkeypatch.setattr(pairwise._ScanState, "_merge_cells_above_kth", picked)
    monkeypatch.setattr(pairwise._ScanState, "_merge_dense", dense)
    default_limit = pairwise._ScanState._most_picks
    scans = {}
    for path, limit in (("dense", lambda *args: -1), ("picked", lambda *args: float("inf")),
                        ("default", default_limit)):
        monkeypatch.setattr(pairwise._ScanState, "_most_picks", limit)
        paths.clear()
        scans[path] = torch_engine_scan(vectors, groups, top_k=7, block_size=24, threshold=0.5,
                                        precision=precision)
        scans[path].paths = dict(paths)
    assert scans["dense"].paths.get("picked", 0) == 0 and scans["dense"].paths["dense"] > 0
    # forced picking: the dense path only where one caption's candidates would outgrow its table
    # (often with tf32 / bf16: their margin lets every tied cosine through)
    assert scans["picked"].paths["picked"] > 0 and scans["picked"].paths.get("dense", 0) > 0
    if precision == "fp32":
        assert scans["picked"].paths["picked"] >= scans["picked"].paths["dense"]
    assert scans["default"].paths.get("picked") and scans["default"].paths.get("dense")
    assert_scans_identical(scans["dense"], scans["picked"])
    assert_scans_identical(scans["dense"], scans["default"])
    np.testing.assert_array_equal(scans["picked"].companion_index, brute_force_companions(vectors, groups, 7))
    if precision != "fp32":
        # exact cosines (multiples of 1/8) re-scored are the fp32 pass's, bit for bit
        exact = scan_pairs(vectors, groups, top_k=7, block_size=24, device="cpu", threshold=0.5)
        np.testing.assert_array_equal(scans["default"].companion_cosine, exact.companion_cosine)
        for one, other in zip(scans["default"].extra["pairs"], exact.extra["pairs"]):
            np.testing.assert_array_equal(one, other)
