"""`capgeo encoders` and `capgeo encode`: output, exports that load back, errors, start-up cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from capgeo.cli import main

COCO = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco-karpathy-test" / "mscoco_test.json"
needs_coco = pytest.mark.skipif(not COCO.exists(), reason=f"real captions not found at {COCO}")


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """20 COCO captions encoded once with the embedded default and exported as Parquet."""
    if not COCO.exists():
        pytest.skip(f"real captions not found at {COCO}")
    folder = tmp_path_factory.mktemp("encode")
    result = run("encode", str(COCO), "--limit", "20", "--cache-dir", str(folder / "cache"),
                 "-o", str(folder / "vectors.parquet"), "--json")
    assert result.exit_code == 0, result.output
    return folder, json.loads(result.stdout)


@pytest.mark.parametrize("args", [["--help"], ["encoders"], ["encode", "--help"]])
def test_help_and_encoders_do_not_import_torch(args):
    code = ("import sys\nfrom capgeo.cli import main\n"
            f"try:\n    main({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch', 'sentence_transformers', 'open_clip', 'transformers') if m in sys.modules])")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert output.stdout.strip().splitlines()[-1] == "[]"


def test_encoders_lists_every_kind_with_examples():
    result = run("encoders")
    assert result.exit_code == 0
    for text in ("sentence-transformers", "open_clip", "longclip", "precomputed", "ViT-L-14/openai",
                 "longclip-L", "vectors:emb.npy"):
        assert text in result.output
    listed = json.loads(run("encoders", "--json").output)["encoders"]
    assert [row["kind"] for row in listed] == ["sentence-transformers", "open_clip", "longclip", "precomputed"]


@needs_coco
def test_encode_summary_json(exported):
    _, summary = exported
    assert summary["captions"] == 20 and summary["groups"] == 4 and summary["width"] == 384
    assert summary["encoder"]["name"] == "all-MiniLM-L6-v2" and summary["encoder"]["context_length"] == 256
    assert summary["origin"] == "encoded" and summary["max_tokens"] == 256
    assert 5 < summary["tokens"]["mean"] < 30 and summary["tokens"]["truncated"] == 0
    assert summary["output"]["aligned_by"] == "id"


@needs_coco
def test_exported_parquet_matches_the_library_and_loads_back(exported):
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    folder, _ = exported
    table = pl.read_parquet(folder / "vectors.parquet")
    captions = load_captions(str(COCO), limit=20)
    assert table["caption_id"].to_list() == captions.ids and table["group_id"].to_list() == captions.groups
    library = embed(captions, None, cache_dir=folder / "cache")
    assert library.origin == "cache"  # the CLI run filled the cache
    np.testing.assert_array_equal(np.stack(table["vector"].to_numpy()), library.vectors)

    # load back as an encoder and re-export to each format: identical vectors every time
    for suffix in (".npy", ".npz", ".parquet"):
        target = folder / f"again{suffix}"
        result = run("encode", str(COCO), "--limit", "20", "--encoder", f"vectors:{folder / 'vectors.parquet'}",
                     "-o", str(target))
        assert result.exit_code == 0, result.output
        assert "read from the vector file" in result.output and "unknown (precomputed vectors)" in result.output
        again = embed(captions, str(target))
        np.testing.assert_array_equal(again.vectors, library.vectors)
    assert "rows in caption order" in run("encode", str(COCO), "--limit", "20", "--encoder",
                                          str(folder / "again.npz"), "-o", str(folder / "x.npy")).output


@needs_coco
def test_second_encode_reports_a_cache_hit(exported):
    folder, _ = exported
    result = run("encode", str(COCO), "--limit", "20", "--cache-dir", str(folder / "cache"))
    assert result.exit_code == 0, result.output
    assert "cache hit (nothing encoded)" in result.output
    assert "all-MiniLM-L6-v2" in result.output and "20 in 4 groups" in result.output


@needs_coco
def test_precomputed_with_extra_ids_is_reported(exported):
    folder, _ = exported
    result = run("encode", str(COCO), "--limit", "10", "--encoder", str(folder / "vectors.parquet"), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["captions"] == 10 and summary["tokens"] is None
    assert summary["notes"] == ["10 vectors in vectors.parquet match no caption and were ignored"]


@needs_coco
@pytest.mark.parametrize("extra, message", [
    (["-o", "out.csv"], "--output out.csv: must end in .npy, .npz or .parquet"),
    (["--encoder", "bert-base-uncased"], "unknown encoder spec 'bert-base-uncased'"),
    (["--encoder", "vectors:absent.npy"], "vector file not found: absent.npy"),
    (["--encoder", "vectors:"], "vectors: names no file; give vectors:FILE"),
    (["--encoder", "vectors:wrong.npy"], "wrong.npy: 3 vectors for 20 captions"),
    (["--encoder", "vectors:wrong.npy", "--max-tokens", "10"], "wrong.npy: precomputed vectors cannot be re-cut to 10"),
])
def test_user_mistakes_exit_2_with_one_line(tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "wrong.npy", np.ones((3, 4)))
    result = CliRunner().invoke(main, ["encode", str(COCO), "--limit", "20", *extra])
    assert result.exit_code == 2, result.output
    error = result.stderr.strip()
    assert error.startswith(f"Error: {message}") and "\n" not in error, error
    assert "Traceback" not in result.output
    assert not (tmp_path / "out.csv").exists()


def test_the_library_summary_is_a_frozen_result_whose_dict_is_the_json(tmp_path, monkeypatch):
    import dataclasses

    from capgeo.encoders.embed import EncodeSummary
    from capgeo.pipeline import EncodeOptions, encode_dataset, loaded_captions

    monkeypatch.chdir(tmp_path)
    rows = [{"id": f"c{i}", "image": f"i{i // 2}", "caption": f"caption number {i}"} for i in range(6)]
    Path("d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    vectors = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    np.save("v.npy", vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    captions = loaded_captions("d.jsonl", {})
    alone = encode_dataset(captions, EncodeOptions("vectors:v.npy"))
    written = encode_dataset(captions, EncodeOptions("vectors:v.npy"), output="out.npy")
    assert isinstance(alone, EncodeSummary) and alone.output is None
    assert written.output == {"path": "out.npy", "aligned_by": "row"} and Path("out.npy").exists()
    with pytest.raises(dataclasses.FrozenInstanceError):
        alone.width = 3
    printed = json.loads(run("encode", "d.jsonl", "--encoder", "vectors:v.npy", "--json", "-").output)
    # "output" only when the vectors were written, the keys in the command's order
    assert list(alone.to_dict()) == list(printed) and "output" not in printed
    assert {**alone.to_dict(), "seconds": 0} == {**printed, "seconds": 0}
    assert list(written.to_dict())[-1] == "output" and alone.captions == 6 and alone.groups == 3
