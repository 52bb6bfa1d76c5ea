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
    torch = pytest.importorskip("torch")
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


def test_rows_too_close_to_call_are_recomputed_in_float32():
    # near-copies of one vector: every candidate lies within the bf16 error of the k-th
    rng = np.random.default_rng(3)
    base = rng.normal(size=32)
    vectors = base + 1e-3 * rng.normal(size=(300, 32))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors.astype(np.float32)
    groups = np.arange(300) // 3
    exact = scan_pairs(vectors, groups, top_k=4, block_size=64, device="cpu")
    fast = scan_pairs(vectors, groups, top_k=4, block_size=64, device="cpu", precision="bf16")
    assert fast.extra["precision"]["rows_recomputed_in_fp32"] > 0
    np.testing.assert_array_equal(fast.companion_index, exact.companion_index)


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
