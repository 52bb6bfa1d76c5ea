"""`capgeo gamma` end to end through click's CliRunner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from capgeo.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gamma_oracle import check_suggestion  # noqa: E402
from test_gamma import common_direction_vectors  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DOCCI = DATA / "docci-test" / "docci_test.json"
N_CAPTIONS = 100


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def docci_run(tmp_path_factory):
    """150 real DOCCI captions through the embedded default encoder (all-MiniLM-L6-v2)."""
    if not DOCCI.exists():
        pytest.skip(f"DOCCI test captions not found at {DOCCI}")
    folder = tmp_path_factory.mktemp("docci")
    out = folder / "gamma.json"
    result = run("gamma", DOCCI, "--limit", N_CAPTIONS, "--batch-size", 64, "--batch-size", 32,
                 "--n-batches", 8, "--json", out, "--cache-dir", folder / "cache")
    assert result.exit_code == 0, result.output
    return folder, result.output, json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_default_encoder_on_real_docci_prints_a_suggestion(docci_run):
    folder, output, profile = docci_run
    section = profile["gamma"]
    assert profile["schema"] == "capgeo.profile/1"
    assert profile["dataset"]["n_captions"] == N_CAPTIONS
    assert profile["encoder"]["kind"] == "sentence-transformers"
    assert section["logit_scale"] == 100.0 and section["logit_scale_source"].startswith("default")
    assert [entry["batch_size"] for entry in section["batches"]] == [64, 32]
    for entry in section["batches"]:
        suggestion = entry["suggestion"]
        low, high = suggestion["range"]
        assert low <= suggestion["gamma"] <= high
        assert f"suggested gamma {suggestion['gamma']:.2f}" in output
        assert len(entry["grid"]) == 9
    assert "logit scale s = 100" in output and "within-row spread" in output and "why:" in output
    # the first --batch-size is the headline
    assert section["headline_batch_size"] == 64 and section["suggested_gamma"] == section["batches"][0]["suggestion"]["gamma"]
    assert "B = 64 (headline)" in output and "B = 32 (extra row)" in output
    # the default encoder is not the tower training fine-tunes: said on screen and in the JSON
    assert "all-MiniLM-L6-v2" in section["encoder_caution"] and "--encoder longclip-L" in section["encoder_caution"]
    assert "Caution:" in output and "MODEL@your-checkpoint.pt" in output

    # the suggestions recomputed by brute force (numpy/scipy) from the cached embeddings
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    captions = load_captions(DOCCI, limit=N_CAPTIONS)
    embeddings = embed(captions, None, cache_dir=folder / "cache")
    check_suggestion(section, embeddings.vectors, captions.group_codes)


def test_image_embeddings_add_the_initial_loss(docci_run):
    folder, _, profile = docci_run
    width = profile["encoder"]["width"]
    images = np.random.default_rng(0).normal(size=(N_CAPTIONS, width)).astype(np.float32)
    np.save(folder / "images.npy", images)
    result = run("gamma", DOCCI, "--limit", N_CAPTIONS, "--batch-size", 64, "--n-batches", 4, "--grid", "0,0.5,1",
                 "--image-embeddings", folder / "images.npy", "--json", "--cache-dir", folder / "cache")
    assert result.exit_code == 0, result.output
    image = json.loads(result.output)["gamma"]["batches"][0]["image"]
    assert [row["gamma"] for row in image["boosted"]] == [0.0, 0.5, 1.0]
    # random image vectors: nothing is solved at initialisation, and gamma 0 is plain InfoNCE
    assert image["plain"]["share_batches_below"] == 0.0
    assert image["boosted"][0]["mean_loss"] == pytest.approx(image["plain"]["mean_loss"])


def test_image_embeddings_of_the_wrong_count_are_a_clear_error(docci_run):
    folder, _, profile = docci_run
    np.save(folder / "short.npy", np.ones((N_CAPTIONS - 1, profile["encoder"]["width"]), dtype=np.float32))
    result = run("gamma", DOCCI, "--limit", N_CAPTIONS, "--batch-size", 64,
                 "--image-embeddings", folder / "short.npy", "--cache-dir", folder / "cache")
    assert result.exit_code == 2
    assert "short.npy" in result.output and f"{N_CAPTIONS - 1} image vectors" in result.output
    assert "Traceback" not in result.output


def test_batch_size_above_the_number_of_groups_exits_2(tmp_path):
    if not DOCCI.exists():
        pytest.skip(f"DOCCI test captions not found at {DOCCI}")
    result = run("gamma", DOCCI, "--limit", 40, "--batch-size", 64, "--cache-dir", tmp_path)
    assert result.exit_code == 2
    assert "Error: --batch-size 64: a batch needs captions of B different images" in result.output
    assert "in the dataset, 40" in result.output
    assert "Traceback" not in result.output


def test_precomputed_paper_like_vectors_get_the_paper_default(tmp_path):
    """Vectors with the paper's DOCCI-like geometry, given as --encoder vectors:FILE."""
    n = 1500
    vectors = common_direction_vectors(n, 40, rho_sd=0.03, seed=2)
    ids = [f"c{i}" for i in range(n)]
    pl.DataFrame({"caption_id": ids, "group_id": [f"g{i}" for i in range(n)], "text": [f"caption {i}" for i in range(n)]}
                 ).write_ndjson(tmp_path / "captions.jsonl")
    np.savez(tmp_path / "vectors.npz", ids=np.array(ids), vectors=vectors)
    result = run("gamma", tmp_path / "captions.jsonl", "--encoder", f"vectors:{tmp_path / 'vectors.npz'}",
                 "--n-batches", 16, "--json", "--no-cache")
    assert result.exit_code == 0, result.output
    section = json.loads(result.output)["gamma"]
    assert section["suggested_gamma"] == pytest.approx(0.5, abs=0.08)   # paper-like geometry, 1,500 captions
    assert "unknown origin" in section["encoder_caution"]
    halved = run("gamma", tmp_path / "captions.jsonl", "--encoder", f"vectors:{tmp_path / 'vectors.npz'}",
                 "--n-batches", 16, "--json", "--no-cache", "--logit-scale", 200)
    section_200 = json.loads(halved.output)["gamma"]
    assert section_200["logit_scale_source"] == "--logit-scale"
    assert section_200["batches"][0]["suggestion"]["gamma_exact"] == pytest.approx(
        section["batches"][0]["suggestion"]["gamma_exact"] / 2, rel=1e-4)


def test_a_dataset_of_three_images_is_named_as_the_reason(tmp_path):
    """It blamed `--batch-size 3`, never given (the default 128 was cut to the 3 images), and advised
    a batch size of 4, which 3 images cannot make."""
    data = tmp_path / "three.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "image": f"img{i % 3}", "caption": f"caption {i}"}) + "\n"
                            for i in range(9)))
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(9, 8)).astype(np.float32))
    result = CliRunner().invoke(main, ["gamma", str(data), "--encoder", f"vectors:{tmp_path / 'v.npy'}", "--no-cache"])
    assert result.exit_code == 2
    assert result.output.startswith("Error: the dataset has only 3 images, too few for the gamma rule")
    assert "--batch-size" not in result.output and result.output.count("\n") == 1
