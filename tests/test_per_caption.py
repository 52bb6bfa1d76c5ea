"""`capgeo profile --per-caption`: the rows, written in each format, read back and checked
against brute force on a small dataset."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from _action_fixtures import brute_components, caption_set, embeddings, unit, write_jsonl
from capgeo.cli import main
from capgeo.findings.per_caption import hardness_quantiles, per_caption_rows

N_GROUPS, PER_GROUP, DIM, THRESHOLD = 30, 2, 12, 0.9


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("per-caption")
    rng = np.random.default_rng(3)
    n = N_GROUPS * PER_GROUP
    vectors = unit(rng.normal(size=(n, DIM)))
    # near-duplicate sets across images: rows 0, 2, 4 (a chain) and rows 10, 21
    for row, base in ((2, 0), (4, 2), (21, 10)):
        vectors[row] = unit((vectors[base] + 0.08 * rng.normal(size=DIM))[None])[0]
    ids = [f"cap{i}" for i in range(n)]
    groups = [f"img{i // PER_GROUP}" for i in range(n)]
    texts = [f"caption number {i}" for i in range(n)]
    texts[7] = texts[31] = texts[50] = "A Dog on a bench."
    texts[50] = "a dog  on a BENCH."  # the same after normalisation
    data = write_jsonl(folder / "data.jsonl", ids, groups, texts)
    np.savez(folder / "vectors.npz", vectors=vectors, ids=np.array(ids))
    return data, f"vectors:{folder / 'vectors.npz'}", vectors, ids, groups


def brute_force(vectors, groups, top_k):
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    codes = np.array(groups)
    similarity[codes[:, None] == codes[None, :]] = -np.inf
    order = np.argsort(-similarity, axis=1, kind="stable")[:, :top_k]
    return order, np.take_along_axis(similarity, order, axis=1), similarity


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_per_caption_rows_round_trip_against_brute_force(dataset, tmp_path, suffix):
    data, encoder, vectors, ids, groups = dataset
    out = tmp_path / f"rows{suffix}"
    result = run("profile", data, "--encoder", encoder, "--no-gamma", "--top-k", 4, "--per-caption", out,
                 "--near-duplicate-threshold", THRESHOLD, "--n-batches", 2)
    assert result.exit_code == 0, result.output
    if suffix == ".parquet":
        frame = pl.read_parquet(out)
        assert frame.schema["top_ids"] == pl.List(pl.String)
        rows = frame.to_dicts()
    elif suffix == ".csv":
        rows = pl.read_csv(out, infer_schema_length=None).to_dicts()
        for row in rows:
            row["top_ids"], row["top_cosines"] = json.loads(row["top_ids"]), json.loads(row["top_cosines"])
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    order, cosine, similarity = brute_force(vectors, groups, 4)
    assert [row["caption_id"] for row in rows] == ids
    assert [row["group_id"] for row in rows] == groups
    for i, row in enumerate(rows):
        assert row["top_ids"] == [ids[j] for j in order[i]]
        np.testing.assert_allclose(row["top_cosines"], cosine[i], atol=2e-6)
        assert row["hardest_id"] == ids[order[i, 0]]
        assert row["token_count"] is None and row["truncated"] is None  # vectors: no tokenizer
    hardest = cosine[:, 0]
    np.testing.assert_allclose([row["hardness_quantile"] for row in rows],
                               [(hardest <= h + 1e-6).mean() for h in hardest])
    duplicate_of = {row["caption_id"]: row["exact_duplicate_of"] for row in rows}
    assert {key: value for key, value in duplicate_of.items() if value} == {"cap31": "cap7", "cap50": "cap7"}
    sets = {}
    for i, row in enumerate(rows):
        if row["near_duplicate_set"] is not None:
            sets.setdefault(row["near_duplicate_set"], set()).add(i)
    assert {frozenset(s) for s in sets.values()} == brute_components(similarity, THRESHOLD)
    assert {frozenset(s) for s in sets.values()} == {frozenset({0, 2, 4}), frozenset({10, 21})}
    assert sets[1] == {0, 2, 4}  # numbered as dupes-sets: largest first


def test_token_counts_and_truncation_come_from_the_encoder():
    captions = caption_set(["a", "b", "c"])
    emb = embeddings(np.eye(3) + 0.1, token_counts=[5, 80, 77], max_tokens=77)
    companions = {"top_ids": [["c0001"], ["c0000"], ["c0000"]], "top_cosines": [[0.2], [0.2], [0.1]]}
    rows = per_caption_rows(captions, emb, companions, 0.95)
    assert [(r["token_count"], r["truncated"]) for r in rows] == [(5, False), (80, True), (77, False)]
    assert [r["near_duplicate_set"] for r in rows] == [None, None, None]


def test_hardness_quantile_is_the_share_at_or_below():
    values = np.array([0.5, 0.9, 0.5, np.nan, 0.1])
    np.testing.assert_allclose(hardness_quantiles(values), [0.75, 1.0, 0.75, np.nan, 0.25])


@pytest.mark.parametrize("name, message", [("rows.txt", "unknown file type"),
                                           ("file/rows.parquet", "cannot write")])
def test_bad_per_caption_file_is_an_error_before_any_work(dataset, tmp_path, name, message):
    data, encoder, *_ = dataset
    (tmp_path / "file").write_text("")  # a folder that is a file
    out = tmp_path / name
    result = run("profile", data, "--encoder", encoder, "--per-caption", out)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_captions_with_fewer_companions_than_k_list_only_those_they_have():
    """Missing companions (None in the profile's lists) are left out of a row's lists, row by row, whether
    the other rows are complete or not; the fields keep their Python types (what the writers see)."""
    captions = caption_set(["a", "b", "c", "d"])
    emb = embeddings(np.eye(4) + 0.1, token_counts=[3, 4, 5, 90], max_tokens=77)
    companions = {"top_ids": [["c0001", "c0002"], ["c0000", None], [None, None], ["c0000", "c0001"]],
                  "top_cosines": [[0.5, 0.25], [0.5, None], [None, None], [0.125, 0.0625]]}
    rows = per_caption_rows(captions, emb, companions, 0.95)
    assert [r["top_ids"] for r in rows] == [["c0001", "c0002"], ["c0000"], [], ["c0000", "c0001"]]
    assert [r["top_cosines"] for r in rows] == [[0.5, 0.25], [0.5], [], [0.125, 0.0625]]
    assert [(r["hardest_id"], r["hardest_cosine"]) for r in rows] == [("c0001", 0.5), ("c0000", 0.5), (None, None),
                                                                      ("c0000", 0.125)]
    assert [r["hardness_quantile"] for r in rows] == [1.0, 1.0, None, 1 / 3]
    assert [(type(r["token_count"]), type(r["truncated"])) for r in rows] == [(int, bool)] * 4
    assert all(type(c) is float for r in rows for c in r["top_cosines"])
