"""`capgeo truncation` end to end through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DOCCI = DATA / "docci-test" / "docci_test.json"
N_CAPTIONS = 60


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def docci_run(tmp_path_factory):
    """60 real DOCCI captions through the embedded default encoder at 32, 64 and 128 tokens (and 256, its context)."""
    if not DOCCI.exists():
        pytest.skip(f"DOCCI test captions not found at {DOCCI}")
    folder = tmp_path_factory.mktemp("docci")
    out = folder / "truncation.json"
    result = run("truncation", DOCCI, "--limit", N_CAPTIONS, "--lengths", "32,64,128", "--n-batches", 20,
                 "--threshold", 0.7, "--top", 3, "--json", out, "--cache-dir", folder / "cache")
    assert result.exit_code == 0, result.output
    return folder, result.output, json.loads(out.read_text(encoding="utf-8"))


def test_real_docci_slice_prints_every_length(docci_run):
    _, output, profile = docci_run
    section = profile["truncation"]
    assert profile["schema"] == "capgeo.profile/1"
    assert profile["dataset"]["n_captions"] == N_CAPTIONS
    assert profile["encoder"]["kind"] == "sentence-transformers" and profile["encoder"]["context_length"] == 256
    assert section["lengths"] == [32, 64, 128, 256]
    assert [entry["max_tokens"] for entry in section["per_length"]] == [32, 64, 128, 256]
    assert profile["options"]["lengths"] == [32, 64, 128, 256] and profile["options"]["n_batches"] == 20
    for table in ("Geometry by maximum token length", "In-batch negatives, B = 60", "How far embeddings move"):
        assert table in output
    first_cells = [line.split()[0] for line in output.splitlines() if line.strip()]
    for length in ("32", "64", "128", "256*"):
        # each of the three tables has a row for every length (256*: the full context)
        assert first_cells.count(length) == 3, length

    # DOCCI captions are long: every one is cut at 32 tokens, fewer at 128, and
    # embeddings move less the more of the caption is seen
    by_length = {entry["max_tokens"]: entry for entry in section["per_length"]}
    assert by_length[32]["share_cut"] == 1.0
    assert by_length[128]["share_cut"] < 1.0
    moved = [by_length[length]["movement"]["all"]["mean"] for length in (32, 64, 128, 256)]
    assert moved == sorted(moved) and moved[-1] == pytest.approx(1.0)


def test_json_matches_the_cached_embeddings(docci_run):
    """The JSON's numbers recomputed independently from the per-length embeddings (read from the cache)."""
    folder, output, profile = docci_run
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    captions = load_captions(DOCCI, limit=N_CAPTIONS)
    full = embed(captions, None, max_tokens=256, cache_dir=folder / "cache")
    codes = np.asarray(captions.group_codes)
    threshold = profile["truncation"]["threshold"]
    listed = profile["truncation"]["truncation_only_pairs"]
    for entry in profile["truncation"]["per_length"]:
        length = entry["max_tokens"]
        vectors = embed(captions, None, max_tokens=length, cache_dir=folder / "cache").vectors.astype(np.float64)
        assert entry["n_cut"] == int(np.sum(full.token_counts > length))
        similarity = vectors @ vectors.T
        upper = np.triu(np.ones_like(similarity, dtype=bool), k=1) & (codes[:, None] != codes[None, :])
        assert entry["pairwise"]["mean"] == pytest.approx(similarity[upper].mean(), abs=1e-6)
        above = upper & (similarity >= threshold)
        more_seen = np.minimum(full.token_counts, 256) > length
        only = above & ((full.vectors.astype(np.float64) @ full.vectors.T.astype(np.float64)) < threshold) \
            & (more_seen[:, None] | more_seen[None, :])
        assert entry["near_duplicates"]["n_pairs"] == int(above.sum())
        assert entry["near_duplicates"]["n_truncation_only"] == int(only.sum())
        shown = [pair for pair in listed if pair["max_tokens"] == length]
        assert len(shown) == min(3, int(only.sum()))
        for pair in shown:
            assert pair["a"]["id"] in output and pair["b"]["id"] in output
            assert pair["cosine_at_length"] >= threshold > pair["cosine_full"]
    # at 0.7 this slice has truncation-only pairs (MiniLM: 2 at 64 tokens, 3 at 128); each listed
    # caption that is cut is printed with one cut mark between what the encoder saw and what it did
    # not (plus one in the legend)
    assert listed
    marks = sum(pair[side]["cut_offset"] < len(pair[side]["text"].rstrip()) for pair in listed for side in "ab")
    assert output.count("‖") == marks + 1 and marks > 0


def test_length_above_the_context_exits_2(tmp_path):
    data = tmp_path / "captions.txt"
    data.write_text("a dog on a sofa\na cat on a mat\n", encoding="utf-8")
    result = run("truncation", data, "--lengths", "32,300")
    assert result.exit_code == 2
    assert "Error: --lengths: 300 is above the context length of encoder 'default' (all-MiniLM-L6-v2): 256 tokens" \
        in result.output
    assert "Traceback" not in result.output


def test_bad_lengths_exit_2(tmp_path):
    data = tmp_path / "captions.txt"
    data.write_text("a dog on a sofa\na cat on a mat\n", encoding="utf-8")
    result = run("truncation", data, "--lengths", "32,many")
    assert result.exit_code == 2 and "'many'" in result.output


def test_precomputed_vectors_exit_2(tmp_path):
    from capgeo.encoders.precomputed import write_vector_file

    data = tmp_path / "captions.txt"
    data.write_text("a dog on a sofa\na cat on a mat\n", encoding="utf-8")
    vectors = tmp_path / "vectors.npy"
    write_vector_file(vectors, np.eye(2, 4, dtype=np.float32), ["0", "1"])
    result = run("truncation", data, "--encoder", f"vectors:{vectors}")
    assert result.exit_code == 2
    assert "precomputed vectors have no tokenizer" in result.output and "Traceback" not in result.output


def test_seen_part_normal_unseen_part_dim():
    import dataclasses

    from capgeo.geometry.typed_profile import CutCaption
    from capgeo.terminal.truncation import UNSEEN_STYLE, _caption_text

    text = "a red bus in the rain next to a clock tower"
    caption = CutCaption(id="c1", group="g1", tokens=14, text=text, cut_offset=len("a red bus in the rain"))
    rendered = _caption_text(caption).renderable
    plain = rendered.plain
    body_start = plain.index(text[:5])
    seen_end = body_start + caption.cut_offset
    dim_spans = [span for span in rendered.spans if span.style == UNSEEN_STYLE and span.start >= body_start]
    assert len(dim_spans) == 1
    assert plain[dim_spans[0].start:dim_spans[0].end] == "next to a clock tower"
    assert not any(body_start <= span.start < seen_end and span.style == UNSEEN_STYLE for span in rendered.spans)
    assert plain[body_start:seen_end] == "a red bus in the rain"
    assert "‖" in plain[seen_end:dim_spans[0].start]
    # a caption that was not cut has no mark and nothing dim
    whole = _caption_text(dataclasses.replace(caption, cut_offset=len(text))).renderable
    assert "‖" not in whole.plain
    assert not any(span.style == UNSEEN_STYLE and span.start >= body_start for span in whole.spans)


def test_batch_size_above_the_groups_exits_2_before_encoding(tmp_path):
    data = tmp_path / "captions.txt"
    data.write_text("a dog on a sofa\na cat on a mat\n", encoding="utf-8")
    result = run("truncation", data, "--batch-size", 5, "--encoder", "no-such-encoder/none")
    # the options are checked first: the (unknown) encoder is never loaded
    assert result.exit_code == 2
    assert ("--batch-size 5: a batch needs captions of B different images, so B must be between 2 and the number of "
            "groups (images) in the dataset, 2") in result.output


def test_the_bucket_table_of_many_edges_keeps_its_numbers_whole(tmp_path):
    """It cut its headers and cells ("0.5-0…", "9.2…") at 80 columns, as profile's tables did."""
    data = Path(__file__).resolve().parents[1] / "data" / "docci_sample.jsonlines"
    result = CliRunner().invoke(main, ["truncation", str(data), "--limit", "16", "--lengths", "32",
                                       "--batch-size", "8", "--n-batches", "4", "--cache-dir", str(tmp_path),
                                       "--buckets", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    table = result.stdout.split("In-batch negatives, B = 8", 1)[1].split("How far embeddings move", 1)[0]
    assert "…" not in table and "0.8-0.9" in table and " hardest " in table
