"""The torch engine (what cuda, mps, tf32 and bf16 run) gives the same bytes for any tile size:
every cosine comes from an arithmetic block product of one shape, the float64 sums are taken
per arithmetic block, so histograms, moments, companions, threshold pairs and counts do not
follow --block-size, nor does the whole profile. Run here on the CPU, where the torch engine
runs at tf32 / bf16 and, with the numpy engine switched off, at fp32."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from capgeo.defaults import ARITHMETIC_BLOCKS
from capgeo.geometry import pairwise
from capgeo.geometry.cross import CrossOptions, _scan_cross_torch, scan_cross
from capgeo.geometry.pairwise import _tile_topk, scan_pairs
from tests.test_tile_independence import clustered, fingerprint



@pytest.fixture
def torch_engine(monkeypatch):
    """The torch engine on the CPU at fp32 too (there the numpy pass runs otherwise)."""
    monkeypatch.setattr(pairwise, "runs_on_numpy", lambda device, precision="fp32": False)


@pytest.fixture
def small_blocks(monkeypatch):
    """Arithmetic blocks of 8 rows, so a few dozen captions cross many of them."""
    monkeypatch.setitem(ARITHMETIC_BLOCKS, "cpu", 8)


def scan(vectors, groups, block_size, **options):
    return scan_pairs(vectors, groups, top_k=6, block_size=block_size, device="cpu", threshold=0.55,
                      count_at_or_above=0.5, **options)


def test_the_torch_engine_runs_and_gives_the_same_bytes_for_odd_and_huge_tiles(torch_engine):
    vectors, groups = clustered(700, 40, seed=21)
    vectors[300:340] = vectors[10:50]  # equal cosines: ties go to the lower caption index
    calls = []
    real = pairwise._ScanState.add_tile
    pairwise._ScanState.add_tile = lambda self, *a: calls.append(1) or real(self, *a)
    try:
        reference = fingerprint(scan(vectors, groups, None))
    finally:
        pairwise._ScanState.add_tile = real
    assert calls  # the torch engine, not numpy's
    for block_size in (61, 255, 256, 300, 10_000):
        assert fingerprint(scan(vectors, groups, block_size)) == reference, block_size


def test_tiles_of_one_and_seven_captions_cut_through_blocks(torch_engine, small_blocks):
    vectors, groups = clustered(70, 12, seed=22)
    reference = fingerprint(scan(vectors, groups, 70))
    for block_size in (1, 7, 8, 16, 61):
        assert fingerprint(scan(vectors, groups, block_size)) == reference, block_size


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_reduced_precisions_give_the_same_bytes_for_any_tile(small_blocks, precision):
    # tf32 / bf16 histograms come from their approximate block products; companions re-scored
    vectors, groups = clustered(120, 16, seed=23)
    reference = fingerprint(scan(vectors, groups, 120, precision=precision))
    for block_size in (1, 7, 61):
        assert fingerprint(scan(vectors, groups, block_size, precision=precision)) == reference, block_size


def test_companions_and_moments_match_a_float64_brute_force(torch_engine):
    vectors, groups = clustered(500, 24, seed=24)
    result = scan(vectors, groups, 61)
    unit = vectors.astype(np.float64)
    cosine = unit @ unit.T
    cosine[groups[:, None] == groups[None, :]] = -np.inf
    best = -np.sort(-cosine, axis=1)[:, :6]
    # the companions are the k best by float64 (to float32 rounding), in order, by their float64 cosines too
    np.testing.assert_allclose(result.companion_cosine, best, atol=2e-6)
    found = np.take_along_axis(cosine, result.companion_index, 1)
    np.testing.assert_allclose(found, best, atol=2e-6)
    rows, columns = np.triu_indices(len(vectors), 1)
    values = (unit @ unit.T)[rows, columns][groups[rows] != groups[columns]]
    assert result.negatives.n == values.size
    assert result.negatives.mean == pytest.approx(values.mean(), abs=1e-7)
    assert result.negatives.std == pytest.approx(values.std(), abs=1e-7)
    assert (result.negatives.min, result.negatives.max) == pytest.approx((values.min(), values.max()), abs=2e-6)


def cross(queries, references, block_size):
    found = _scan_cross_torch(queries, references, torch.device("cpu"),
                              CrossOptions(threshold=0.5, top_k=5, block_size=block_size, max_pairs=10**6,
                                           progress=False, asked_threshold=None))
    return [found.pair_query.tobytes(), found.pair_reference.tobytes(), found.pair_cosine.tobytes(),
            found.top_index.tobytes(), found.top_cosine.tobytes()]


def test_the_torch_train_x_eval_pass_gives_the_same_bytes_for_any_tile(small_blocks):
    vectors, _ = clustered(130, 12, seed=25)
    queries, references = vectors[:50], vectors[50:]
    reference = cross(queries, references, 80)
    for block_size in (1, 7, 61, 10_000):
        assert cross(queries, references, block_size) == reference, block_size
    # and its pairs are numpy's float64 ones (to float32 rounding)
    numpy_pass = scan_cross(queries, references, threshold=0.5, top_k=5, device="cpu")
    np.testing.assert_array_equal(np.frombuffer(reference[0], np.int64), numpy_pass.pair_query)
    np.testing.assert_array_equal(np.frombuffer(reference[1], np.int64), numpy_pass.pair_reference)
    exact = np.einsum("ij,ij->i", queries[numpy_pass.pair_query].astype(np.float64),
                      references[numpy_pass.pair_reference].astype(np.float64))
    np.testing.assert_allclose(np.frombuffer(reference[2], np.float32), exact, atol=2e-6)


@pytest.fixture
def captions_and_vectors(tmp_path):
    vectors, groups = clustered(300, 24, seed=26, per_group=5)
    vectors[200] = vectors[3]  # a near-duplicate pair of different images
    data = tmp_path / "captions.jsonl"
    data.write_text("".join(json.dumps({"text": f"caption {i} of image {g}", "image": f"img{g}"}) + "\n"
                            for i, g in enumerate(groups)), encoding="utf-8")
    np.save(tmp_path / "emb.npy", vectors)
    return data, tmp_path / "emb.npy"


#: what a profile states about the run rather than about the data: when, where, how long, the tile
#: used, and the tf32 / bf16 work counters (re-scoring done, which follows what each tile met)
RUN_FIELDS = ("created", "elapsed_s", "working_directory", "command", "block_size", "block_size_used",
              "seconds", "rows_too_close_to_call", "pairs_rescored")


def _without_run_fields(value):
    if isinstance(value, dict):
        return {key: _without_run_fields(item) for key, item in value.items() if key not in RUN_FIELDS}
    if isinstance(value, list):
        return [_without_run_fields(item) for item in value]
    return value


def profile_bytes(data, vectors, out, block_size, *extra):
    from capgeo.cli import main

    arguments = ["profile", str(data), "--encoder", f"vectors:{vectors}", "--device", "cpu", "--batch-size", "16",
                 "--n-batches", "5", "--json", str(out), *extra]
    if block_size is not None:
        arguments += ["--block-size", str(block_size)]
    result = CliRunner().invoke(main, arguments, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return json.dumps(_without_run_fields(json.loads(out.read_text())), sort_keys=True).encode()


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_the_whole_profile_is_the_same_bytes_for_any_tile(torch_engine, small_blocks, captions_and_vectors,
                                                          tmp_path, precision):
    data, vectors = captions_and_vectors
    extra = ["--precision", precision]
    reference = profile_bytes(data, vectors, tmp_path / "auto.json", None, *extra)
    for block_size in (7, 61, 10_000):
        assert profile_bytes(data, vectors, tmp_path / f"{block_size}.json", block_size, *extra) == reference, \
            block_size


def test_gpu_tiles_are_whole_numbers_of_arithmetic_blocks():
    from capgeo.geometry.tile_size import choose_block_size

    gib = 1 << 30
    for free in (1 * gib, 8 * gib, 40 * gib, 140 * gib):
        assert choose_block_size(10_000_000, "cuda", free_bytes=free) % ARITHMETIC_BLOCKS["cuda"] == 0


def test_the_pass_leaves_torch_threads_as_it_found_them(torch_engine):
    vectors, groups = clustered(300, 8, seed=27)
    before = torch.get_num_threads()
    scan(vectors, groups, 100)
    assert torch.get_num_threads() == before


def test_the_torch_companions_of_some_captions_do_not_follow_the_tile(torch_engine, small_blocks, monkeypatch):
    from tests.test_tile_independence import companions_of

    vectors, groups = clustered(130, 12, seed=26)
    queries = np.arange(3, 130, 4)
    multiplied = []
    monkeypatch.setattr(pairwise, "_tile_topk", lambda tile, ids, k: multiplied.append(tile.shape) or
                        _tile_topk(tile, ids, k))
    reference = companions_of(queries, vectors, groups, 80)
    assert multiplied  # the torch engine ran
    for block_size in (1, 7, 61, 10_000):
        assert companions_of(queries, vectors, groups, block_size) == reference, block_size
    # and they are the numpy engine's companions
    monkeypatch.undo()
    numpy_index, _ = pairwise.query_companions(vectors, groups, queries, top_k=6, device="cpu")
    np.testing.assert_array_equal(np.frombuffer(reference[0], np.int64).reshape(numpy_index.shape), numpy_index)
