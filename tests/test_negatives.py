"""`capgeo negatives`: hard negatives in a cosine range, against brute force, written and read back."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from _action_fixtures import unit, write_jsonl
from capgeo.cli import main
from capgeo.findings.negatives import cosine_quantiles, hard_negatives


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})


def clustered(n_groups=30, per_group=2, dim=8, seed=0):
    """Captions in tight clusters across images, so many companions sit above a max cosine."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(6, dim))
    n = n_groups * per_group
    vectors = unit(centres[rng.integers(6, size=n)] + 0.3 * rng.normal(size=(n, dim)))
    return vectors, np.arange(n) // per_group


def brute_negatives(vectors, codes, k, low, high):
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    allowed = (codes[:, None] != codes[None, :]) & (similarity >= low) & (similarity < high)
    similarity[~allowed] = -np.inf
    order = np.argsort(-similarity, axis=1, kind="stable")[:, :k]
    values = np.take_along_axis(similarity, order, axis=1)
    order[~np.isfinite(values)] = -1
    return order, np.where(np.isfinite(values), values, np.nan)


@pytest.mark.parametrize("k, low, high", [(3, -1.0, 0.95), (4, 0.0, 0.8), (2, 0.5, 0.7), (5, 0.97, 1.0)])
def test_hard_negatives_match_brute_force(k, low, high):
    vectors, codes = clustered()
    index, cosine = hard_negatives(vectors, codes, k=k, min_cosine=low, max_cosine=high, block_size=16)
    expected_index, expected_cosine = brute_negatives(vectors, codes, k, low, high)
    # compare away from the range's edges, where float32 and float64 may disagree
    assert np.all(np.abs(np.nan_to_num(expected_cosine, nan=9) - high) > 1e-5)
    np.testing.assert_array_equal(index, expected_index)
    np.testing.assert_allclose(cosine, expected_cosine, atol=1e-6)
    assert not np.any(np.nan_to_num(cosine, nan=-2) >= high)


def test_command_round_trips_rows_and_prints_quantiles(tmp_path):
    vectors, codes = clustered()
    n = len(codes)
    ids = [f"cap{i}" for i in range(n)]
    texts = [f"caption {i}" for i in range(n)]
    data = write_jsonl(tmp_path / "data.jsonl", ids, [f"img{c}" for c in codes], texts)
    np.savez(tmp_path / "vectors.npz", vectors=vectors, ids=np.array(ids))
    encoder = f"vectors:{tmp_path / 'vectors.npz'}"
    expected_index, expected_cosine = brute_negatives(vectors, codes, 3, 0.2, 0.9)
    for suffix in (".jsonl", ".parquet"):
        out = tmp_path / f"negatives{suffix}"
        result = run("negatives", data, "--encoder", encoder, "-o", out, "-k", 3, "--min-cosine", 0.2,
                     "--max-cosine", 0.9, "--json", tmp_path / "summary.json")
        assert result.exit_code == 0, result.output
        rows = (pl.read_parquet(out).to_dicts() if suffix == ".parquet"
                else [json.loads(line) for line in out.read_text().splitlines()])
        assert [row["anchor_id"] for row in rows] == ids
        for i, row in enumerate(rows):
            found = expected_index[i] >= 0
            assert row["negative_ids"] == [ids[j] for j in expected_index[i][found]]
            assert row["negative_texts"] == [texts[j] for j in expected_index[i][found]]
            np.testing.assert_allclose(row["negative_cosines"], expected_cosine[i][found], atol=1e-6)
    summary = json.loads((tmp_path / "summary.json").read_text())
    finite = expected_cosine[np.isfinite(expected_cosine)]
    overall = summary["cosines"][-1]
    assert overall["rank"] == "all" and overall["count"] == finite.size
    assert overall["quantiles"]["p50"] == pytest.approx(np.quantile(finite, 0.5), abs=1e-6)
    assert summary["cosines"][0]["mean"] == pytest.approx(np.nanmean(expected_cosine[:, 0]), abs=1e-6)
    assert f"{np.quantile(finite, 0.5):.3f}" in result.stdout


def test_quantiles_per_rank_skip_missing():
    summary = cosine_quantiles(np.array([[0.9, 0.5], [0.7, np.nan]], dtype=np.float32))
    assert [entry["count"] for entry in summary] == [2, 1, 3]
    assert summary[0]["mean"] == pytest.approx(0.8)


@pytest.mark.parametrize("args, message", [
    (["--min-cosine", "0.9", "--max-cosine", "0.5"], "must be below --max-cosine"),
    (["--max-cosine", "1.5"], "--max-cosine"),
    (["-o", "{tmp}/negatives.csv"], "expected a name ending in .jsonl, .parquet"),
    (["-o", "{tmp}/data.jsonl/negatives.jsonl"], "cannot write"),
])
def test_bad_options_are_one_line_errors_without_output(tmp_path, args, message):
    data = write_jsonl(tmp_path / "data.jsonl", ["a", "b"], ["x", "y"], ["one", "two"])
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "negatives.jsonl")]
    result = run("negatives", data, *args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error:")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]


def test_antipodal_negatives_are_in_range_of_the_default_floor():
    """A float32 product of antipodal unit vectors reaches -1.0000001, below the default floor of -1:
    those captions got no negative at all, and no floor below -1 can be asked for."""
    half = unit(np.random.default_rng(0).normal(size=(20, 8))).astype(np.float32)
    vectors = np.concatenate([half, -half])
    index, cosine = hard_negatives(vectors, np.arange(40), k=1, max_cosine=-0.99, device="cpu")
    assert (index[:, 0] == np.r_[np.arange(20, 40), np.arange(20)]).all()
    assert np.all(cosine >= -1.0) and np.allclose(cosine, -1.0)
