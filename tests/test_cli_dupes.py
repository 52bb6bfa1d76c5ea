"""`capgeo dupes` end to end through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from capgeo.captions import load_captions
from capgeo.cli import main
from capgeo.findings.highlight import normalize_word

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
COCO = DATA / "coco-karpathy-test" / "mscoco_test.json"
needs_data = pytest.mark.skipif(not COCO.exists(), reason=f"COCO Karpathy test captions not found at {COCO}")


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result


@pytest.fixture(scope="module")
def coco_run(tmp_path_factory):
    """60 real COCO captions (12 images) through the embedded default encoder, rows as jsonl."""
    if not COCO.exists():
        pytest.skip(f"COCO Karpathy test captions not found at {COCO}")
    folder = tmp_path_factory.mktemp("coco")
    out = folder / "pairs.jsonl"
    result = run("dupes", COCO, "--limit", 60, "--top", 25, "--output-format", "jsonl", "-o", out,
                 "--cache-dir", folder / "cache")
    assert result.exit_code == 0, result.output
    return folder, [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


@needs_data
def test_default_encoder_on_real_coco_lists_pairs_of_different_images_in_order(coco_run):
    folder, rows = coco_run
    from capgeo.encoders import embed

    captions = load_captions(COCO, limit=60)
    vectors = embed(captions, None, cache_dir=folder / "cache").vectors.astype(np.float64)
    codes = captions.group_codes
    similarity = vectors @ vectors.T
    a, b = np.triu_indices(len(vectors), k=1)
    keep = codes[a] != codes[b]
    expected = sorted(zip(-similarity[a[keep], b[keep]], a[keep], b[keep]))[:25]

    assert len(rows) == 25
    assert [(r["index_a"], r["index_b"]) for r in rows] == [(int(i), int(j)) for _, i, j in expected]
    assert np.allclose([r["cosine"] for r in rows], [-c for c, _, _ in expected], atol=1e-5)
    ids, groups, texts = captions.ids, captions.groups, captions.texts
    for rank, row in enumerate(rows, start=1):
        assert row["rank"] == rank
        assert row["group_a"] != row["group_b"]
        assert (row["id_a"], row["group_a"], row["text_a"]) == (ids[row["index_a"]], groups[row["index_a"]],
                                                                texts[row["index_a"]])
        for side in ("a", "b"):
            for span in row[f"spans_{side}"]:
                assert normalize_word(row[f"text_{side}"][span["start"]:span["end"]]) == span["word"]


@needs_data
def test_text_rendering_of_real_captions(coco_run):
    folder, rows = coco_run
    result = run("dupes", COCO, "--limit", 60, "--top", 3, "--cache-dir", folder / "cache")
    assert result.exit_code == 0, result.output
    assert "3 most similar pairs of different images" in result.output  # below 0.95: not near-duplicates
    for row in rows[:3]:
        assert f"cosine {row['cosine']:.4f}" in result.output
        assert f"jaccard {row['jaccard']:.2f}" in result.output
        assert row["text_b"].split()[0] in result.output


# --------------------------------------------------------------------------- precomputed vectors


@pytest.fixture()
def small_dataset(tmp_path):
    """Six captions of five images with an exact duplicate across images, and vectors for them."""
    captions = [
        ("A red double-decker bus parked by the café.", "img1"),
        ("a red double-decker  BUS parked by the café.", "img2"),   # exact duplicate of img1's caption
        ("Two red buses parked near a cafe.", "img3"),
        ("Berries and a bowl of cherries on a table.", "img4"),
        ("A bowl of berries on the table.", "img5"),
        ("The berries sit in a white bowl.", "img5"),
    ]
    data = tmp_path / "captions.jsonl"
    data.write_text("".join(json.dumps({"text": t, "image": g}) + "\n" for t, g in captions), encoding="utf-8")
    rng = np.random.default_rng(0)
    topic = rng.normal(size=(2, 8))
    vectors = np.vstack([topic[0] + 0.1 * rng.normal(size=(3, 8)), topic[1] + 0.3 * rng.normal(size=(3, 8))])
    vectors[1] = vectors[0]  # an encoder embeds the exact duplicate (same text up to case/space) alike
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vector_file = tmp_path / "vectors.npy"
    np.save(vector_file, vectors.astype(np.float32))
    return data, f"vectors:{vector_file}", vectors, captions


def test_every_row_format_round_trips(small_dataset, tmp_path):
    data, encoder, vectors, captions = small_dataset
    rows = {}
    for fmt in ("jsonl", "csv", "parquet"):
        out = tmp_path / f"pairs.{fmt}"
        result = run("dupes", data, "--encoder", encoder, "--no-cache", "--top", 0, "--threshold", -1,
                     "--output-format", fmt, "-o", out)
        assert result.exit_code == 0, result.output
        if fmt == "jsonl":
            rows[fmt] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        elif fmt == "parquet":
            rows[fmt] = pl.read_parquet(out).to_dicts()
        else:
            frame = pl.read_csv(out, schema_overrides={"id_a": pl.String, "id_b": pl.String,
                                                       "group_a": pl.String, "group_b": pl.String})
            rows[fmt] = [{key: json.loads(value) if key.startswith(("spans_", "shared_", "only_")) else value
                          for key, value in row.items()} for row in frame.to_dicts()]
    assert rows["jsonl"] == rows["parquet"] == rows["csv"]
    # every pair of different images once: 6 captions, one same-image pair (img5) left out
    assert len(rows["jsonl"]) == 6 * 5 // 2 - 1
    cosines = [r["cosine"] for r in rows["jsonl"]]
    assert cosines == sorted(cosines, reverse=True)
    duplicate = next(r for r in rows["jsonl"] if {r["group_a"], r["group_b"]} == {"img1", "img2"})
    assert duplicate["exact_duplicate"] and duplicate["jaccard"] == 1.0
    assert duplicate["cosine"] == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-5)
    plural = next(r for r in rows["jsonl"] if {r["group_a"], r["group_b"]} == {"img1", "img3"})
    assert {"red", "double", "decker", "parked"} <= set(plural["shared_words"]) | set(plural["only_a_words"])
    assert "bus" in plural["shared_words"] and "café" in plural["only_a_words"] and "cafe" in plural["only_b_words"]


def test_jsonl_and_csv_go_to_stdout_without_a_file(small_dataset):
    data, encoder, _, _ = small_dataset
    result = run("dupes", data, "--encoder", encoder, "--no-cache", "--top", 2, "--output-format", "jsonl")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["rank"] for row in lines] == [1, 2]
    result = run("dupes", data, "--encoder", encoder, "--no-cache", "--top", 2, "--output-format", "csv")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].startswith("rank,index_a,index_b,id_a")


def test_text_output_flags_exact_duplicates_and_wraps(small_dataset, tmp_path):
    data, encoder, _, _ = small_dataset
    out = tmp_path / "pairs.txt"
    result = run("dupes", data, "--encoder", encoder, "--no-cache", "--top", 1, "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    # a file has no colour: shared words are marked [like this]
    assert "EXACT DUPLICATE" in text and "[double]-[decker]" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_examples_and_components(small_dataset, tmp_path):
    data, encoder, vectors, _ = small_dataset
    out = tmp_path / "examples.jsonl"
    result = run("dupes-examples", data, "--encoder", encoder, "--no-cache", "--quantile", 0.5,
                 "--quantile", 1.0, "--per-quantile", 1, "--neighbours", 2, "--output-format", "jsonl", "-o", out)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["quantile"], r["neighbour_rank"]) for r in rows] == [(0.5, 1), (0.5, 2), (1.0, 1), (1.0, 2)]
    top = rows[2]
    similarity = vectors @ vectors.T
    assert top["query_hardest_cosine"] == pytest.approx(top["cosine"])
    assert top["cosine"] == pytest.approx(float(similarity[top["index_a"], top["index_b"]]), abs=1e-5)

    threshold = float(similarity[0, 2]) - 1e-3  # links img1-img2-img3 (the bus captions)
    out = tmp_path / "components.jsonl"
    result = run("dupes-sets", data, "--encoder", encoder, "--no-cache", "--threshold", threshold, "-o", out)
    assert result.exit_code == 0, result.output
    components = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert components[0]["groups"][:3] == ["img1", "img2", "img3"] and components[0]["size"] >= 3
    # the chaining warning exactly when a component holds two members below the threshold
    chains = any(c["size"] > 2 and (c["min_member_cosine"] is None or c["min_member_cosine"] < threshold)
                 for c in components)
    assert ("Warning: components chain" in result.stderr) == chains

    result = run("dupes-sets", data, "--encoder", encoder, "--no-cache", "--threshold", threshold)
    assert result.exit_code == 0
    assert "near-duplicate sets" in result.stdout and "weakest" in result.stdout and "min pair" in result.stdout


def test_no_command_refuses_a_combination_of_its_options():
    """Each mode is its own command: no path of the shell refuses, notes or explains options given together."""
    import inspect

    import capgeo.cli.dupes as module
    from capgeo.cli import COMMANDS

    source = inspect.getsource(module)
    for word in ("unused_option_notes", "given(", "choose one of", "add --"):
        assert word not in source, word
    for command in ("dupes", "dupes-examples", "dupes-sets"):
        assert COMMANDS[command].startswith("capgeo.cli.dupes:")


def test_every_pair_without_a_threshold(small_dataset):
    """--top 0 lists every pair at or above --threshold; without one, every pair of different images."""
    data, encoder, vectors, captions = small_dataset
    groups = [group for _, group in captions]
    result = run("dupes", data, "--encoder", encoder, "--no-cache", "--top", 0, "--json")
    assert result.exit_code == 0, result.output
    section = json.loads(result.stdout)
    n = len(vectors)
    expected = sum(groups[i] != groups[j] for i in range(n) for j in range(i + 1, n))
    assert len(section["pairs"]) == expected and section["threshold"] is None and section["limit"] is None


def test_parquet_rows_go_to_a_redirected_stdout_and_never_to_a_terminal(small_dataset, tmp_path):
    import io

    data, encoder, _, _ = small_dataset
    result = run("dupes", data, "--encoder", encoder, "--no-cache", "--top", 3, "--output-format", "parquet")
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(io.BytesIO(result.stdout_bytes)).height == 3
    from capgeo.cli import dupes as module

    original = module._is_terminal
    try:
        module._is_terminal = lambda stream: True
        result = CliRunner().invoke(main, ["dupes", str(data), "--encoder", encoder, "--output-format", "parquet"])
    finally:
        module._is_terminal = original
    assert result.exit_code == 2 and result.stderr.startswith("Error: parquet is binary")


def test_json_section(small_dataset, tmp_path):
    data, encoder, _, _ = small_dataset
    out = tmp_path / "section.json"
    result = run("dupes", data, "--encoder", encoder, "--no-cache", "--top", 3, "--json", out)
    assert result.exit_code == 0, result.output
    section = json.loads(out.read_text(encoding="utf-8"))
    assert section["schema"] == "capgeo.dupes/1" and len(section["pairs"]) == 3
    assert section["encoder"]["kind"] == "precomputed"


def test_highlighted_text_styles_exactly_the_spans():
    from capgeo.terminal.dupes import DIFFERING_STYLE, SHARED_STYLE, highlighted
    from capgeo.findings.highlight import highlight_pair

    text_a, text_b = "Deux cafés près du lac, 日本語 dogs", "Un café près des dogs"
    pair = highlight_pair(text_a, text_b)
    rendered = highlighted(text_a, pair.spans_a)
    assert rendered.plain == text_a
    styled = [(span.start, span.end, str(span.style)) for span in rendered.spans]
    assert styled == [(s.start, s.end, SHARED_STYLE if s.kind == "shared" else DIFFERING_STYLE) for s in pair.spans_a]
    assert {text_a[s.start:s.end] for s in pair.spans_a if s.kind == "shared"} == {"cafés", "près", "dogs"}


def test_no_pairs_still_gives_files_with_their_header(tmp_path, monkeypatch):
    """A threshold nobody reaches: csv and parquet keep the pair columns, so downstream tools still read them."""
    import polars as pl

    from capgeo.findings.duplicates import PAIR_COLUMNS, write_rows

    write_rows([], "csv", str(tmp_path / "z.csv"), columns=PAIR_COLUMNS)
    write_rows([], "parquet", str(tmp_path / "z.parquet"), columns=PAIR_COLUMNS)
    assert (tmp_path / "z.csv").read_text().strip().split(",") == list(PAIR_COLUMNS)
    frame = pl.read_parquet(tmp_path / "z.parquet")
    assert frame.columns == list(PAIR_COLUMNS) and frame.height == 0


def test_json_to_stdout_still_writes_the_rows_file(small_dataset, tmp_path):
    import polars as pl

    data, encoder, _, _ = small_dataset
    out = tmp_path / "rows.parquet"
    result = run("dupes", data, "--encoder", encoder, "--output-format", "parquet", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    section = json.loads(result.stdout)
    assert pl.read_parquet(out).height == len(section["pairs"]) > 0


@pytest.mark.parametrize("command", [["dupes", "--threshold", "0.99999"], ["profile", "--threshold", "1"],
                                     ["truncation", "--threshold", "0.99995"]])
def test_a_pair_threshold_above_what_float32_can_reach_is_refused_before_encoding(tmp_path, command, monkeypatch):
    import capgeo.encoders

    monkeypatch.setattr(capgeo.encoders, "embed", lambda *a, **k: pytest.fail("encoded before refusing"))
    data = tmp_path / "d.txt"
    data.write_text("a dog runs\na cat sits\n")
    result = CliRunner().invoke(main, [command[0], str(data), *command[1:]])
    assert result.exit_code == 2 and "float32 products" in result.output


def test_dupes_output_suffix_picks_the_row_format_unless_output_format_names_one(tmp_path):
    from _action_fixtures import vectors_dataset

    data, encoder = vectors_dataset(tmp_path, 20)
    result = CliRunner().invoke(main, ["dupes", str(data), "--encoder", encoder, "-o", str(tmp_path / "x.parquet")])
    assert result.exit_code == 0, result.output
    assert len(pl.read_parquet(tmp_path / "x.parquet")) == 50  # rows, not terminal text
    result = CliRunner().invoke(main, ["dupes", str(data), "--encoder", encoder, "--output-format", "parquet",
                                       "-o", str(tmp_path / "x.csv")])
    assert result.exit_code == 0, result.output
    assert len(pl.read_parquet(tmp_path / "x.csv")) == 50  # the format asked for, whatever the name


def test_the_modes_record_no_pair_threshold_or_limit(small_dataset, tmp_path):
    """dupes-sets and dupes-examples list no pairs: their JSON records no pair threshold or limit."""
    data, encoder, _, _ = small_dataset
    report = tmp_path / "d.json"
    result = CliRunner().invoke(main, ["dupes-sets", str(data), "--encoder", encoder, "--threshold", "0.6",
                                       "--json", str(report)])
    assert result.exit_code == 0, result.output
    section = json.loads(report.read_text())
    assert section["limit"] is None and section["threshold"] is None and section["components_threshold"] == 0.6
    result = CliRunner().invoke(main, ["dupes-examples", str(data), "--encoder", encoder, "--json", str(report)])
    assert result.exit_code == 0, result.output
    section = json.loads(report.read_text())
    assert section["limit"] is None and section["threshold"] is None and section["examples"]
