"""`capgeo gamma --sweep` end to end with precomputed vectors: the caption-caption proxy and image vectors."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from capgeo.cli import main


def _dataset(tmp_path, n_images=60, per_image=3, width=16):
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((n_images, width))
    codes = np.repeat(np.arange(n_images), per_image)
    vectors = centres[codes] + 0.9 * rng.standard_normal((len(codes), width))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    ids = [f"c{i}" for i in range(len(codes))]
    pl.DataFrame({"caption_id": ids, "image_id": [f"g{c}" for c in codes], "text": [f"caption {i}" for i in ids]}
                 ).write_ndjson(tmp_path / "captions.jsonl")
    np.savez(tmp_path / "vectors.npz", ids=np.array(ids), vectors=vectors)
    np.save(tmp_path / "images.npy", (centres + 0.9 * rng.standard_normal(centres.shape)).astype(np.float32))
    return ["gamma", str(tmp_path / "captions.jsonl"), "--encoder", f"vectors:{tmp_path / 'vectors.npz'}",
            "--no-cache", "--n-batches", "4", "--batch-size", "8", "--sweep", "--sweep-steps", "5",
            "--sweep-seeds", "2", "--sweep-gammas", "0,0.5"]


@pytest.mark.slow   # torch's first import in the process: 10-15 s on 2 shared cores
def test_sweep_without_images_is_the_labelled_caption_proxy(tmp_path):
    args = _dataset(tmp_path)
    result = CliRunner().invoke(main, args + ["--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    section = json.loads(result.output)["gamma"]
    sweep = section["sweep"]
    assert sweep["mode"] == "caption-caption proxy"
    assert sweep["rule_gamma"] == section["suggested_gamma"]
    assert sorted(sweep["gammas"]) == sorted({0.0, 0.5, section["suggested_gamma"]})
    assert sweep["measured_gamma"] in sweep["gammas"] and sweep["measured_gamma"] in sweep["plateau"]
    assert sweep["steps"] == 5 and sweep["seeds"] == [0, 1] and sweep["batch_size"] == 8
    shown = CliRunner().invoke(main, args, catch_exceptions=False)
    assert "caption-caption proxy, not image-text retrieval" in shown.output
    assert "saturation at steps" in shown.output


def test_sweep_with_image_vectors_and_a_bad_option(tmp_path):
    args = _dataset(tmp_path)
    result = CliRunner().invoke(main, args + ["--image-embeddings", str(tmp_path / "images.npy"), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["gamma"]["sweep"]["mode"] == "image-text"
    bad = CliRunner().invoke(main, args[:-1] + ["0,-1"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
