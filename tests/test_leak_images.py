"""`capgeo leak` names the images behind the leaked captions, and --normalize chooses the exact rule."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import caption_set, embeddings, unit, write_jsonl
from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.findings.leak import leak_section


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})


def test_image_counts_match_a_count_over_the_leaked_captions():
    rng = np.random.default_rng(3)
    train_vectors = unit(rng.normal(size=(120, 16)))
    eval_vectors = unit(rng.normal(size=(40, 16)))
    eval_groups = [f"e{i // 4}" for i in range(40)]  # 10 images of 4 captions
    twins = {0: 5, 1: 9, 2: 9, 3: 50, 8: 51, 21: 100, 39: 119, 38: 118, 37: 117, 36: 116}
    for e, t in twins.items():
        eval_vectors[e] = unit((train_vectors[t] + 0.01 * rng.normal(size=16))[None])[0]
    train = caption_set([f"t{i // 5}" for i in range(120)], ids=[f"train{i}" for i in range(120)])
    evals = caption_set(eval_groups, ids=[f"eval{i}" for i in range(40)])
    result = leak_section(train, embeddings(train_vectors), [(evals, embeddings(eval_vectors))], threshold=0.95).to_dict()
    entry = result["evals"][0]
    leaked_rows = [int(i[4:]) for i in entry["leaked_ids"]]
    assert sorted(leaked_rows) == sorted(twins)  # the planted twins, nothing else
    images = sorted({eval_groups[row] for row in leaked_rows}, key=lambda g: int(g[1:]))
    complete = [g for g in images if all(row in twins for row in range(40) if eval_groups[row] == g)]
    assert entry["leaked_groups"] == images == ["e0", "e2", "e5", "e9"]
    assert entry["all_leaked_groups"] == complete == ["e0", "e9"]
    assert (entry["n_groups"], entry["n_groups_leaked"], entry["n_groups_all_leaked"]) == (10, 4, 2)
    train_images = {f"t{t // 5}" for t in twins.values()}
    assert entry["n_train_groups_twinned"] == len(train_images)


@pytest.mark.parametrize("normalize, twins", [
    ("none", {"a dog runs."}),
    ("whitespace", {"a dog runs.", "a  dog\truns."}),
    ("case", {"a dog runs.", "a  dog\truns.", "A DOG RUNS."}),
    ("period", {"a dog runs.", "a  dog\truns.", "A DOG RUNS.", "a dog runs", "A dog runs ."}),
])
def test_normalize_chooses_what_exact_twins_may_differ_by(tmp_path, normalize, twins):
    variants = ["a dog runs.", "a  dog\truns.", "A DOG RUNS.", "a dog runs", "A dog runs .", "a cat runs."]
    write_jsonl(tmp_path / "train.jsonl", ["t0"], ["ti"], ["a dog runs."])
    write_jsonl(tmp_path / "eval.jsonl", [f"e{i}" for i in range(6)], [f"img{i // 2}" for i in range(6)], variants)
    # vectors far apart: only the exact rule makes twins
    vectors = np.eye(8, dtype=np.float32)[:7]
    np.savez(tmp_path / "v.npz", vectors=vectors, ids=np.array(["t0", *[f"e{i}" for i in range(6)]]))
    result = run("leak", tmp_path / "train.jsonl", tmp_path / "eval.jsonl", "--encoder",
                 f"vectors:{tmp_path / 'v.npz'}", "--normalize", normalize, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    entry = payload["evals"][0]
    assert payload["normalize"] == normalize
    assert {variants[int(i[1:])] for i in entry["leaked_ids"]} == twins
    assert entry["n_exact"] == len(twins) and all(pair["exact_duplicate"] for pair in entry["pairs"])
    images = {f"img{int(i[1:]) // 2}" for i in entry["leaked_ids"]}
    assert set(entry["leaked_groups"]) == images


def test_the_terminal_names_the_images_and_the_rule(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", ["t0", "t1"], ["a", "b"], ["one caption", "another caption"])
    write_jsonl(tmp_path / "eval.jsonl", ["e0", "e1", "e2"], ["x", "x", "y"],
                ["One caption", "another caption.", "something else"])
    np.savez(tmp_path / "v.npz", vectors=np.eye(8, dtype=np.float32)[:5],
             ids=np.array(["t0", "t1", "e0", "e1", "e2"]))
    result = run("leak", tmp_path / "train.jsonl", tmp_path / "eval.jsonl", "--encoder",
                 f"vectors:{tmp_path / 'v.npz'}", "--normalize", "period")
    assert result.exit_code == 0, result.output
    assert "images: 1 of 2 eval images have a caption twinned in training, 1 every caption; the twins sit in 2 " \
           "training images" in result.stdout
    assert "(exact: --normalize period)" in result.stdout


def test_an_unknown_rule_is_refused():
    train = caption_set(["a"])
    with pytest.raises(CapgeoError, match="--normalize: expected one of none, whitespace, case, period"):
        leak_section(train, embeddings(np.eye(2)[:1]), [(train, embeddings(np.eye(2)[:1]))], normalize="lower")


def test_the_report_section_names_the_images():
    from capgeo.geometry.typed_profile import Leak
    from capgeo.report.leak import leak_html

    entry = {"source": "eval.json", "n_leaked": 3, "n_captions": 10, "share_leaked": 0.3, "n_exact": 2,
             "n_groups": 4, "n_groups_leaked": 2, "n_groups_all_leaked": 1, "n_train_groups_twinned": 3, "pairs": []}
    page = leak_html(Leak.from_dict({"threshold": 0.95, "train_ids_to_drop": ["a", "b"], "evals": [entry]}))
    assert "2 of 4 evaluation images have a caption twinned in training, 1 every caption; the twins sit in 3 " \
           "training images" in page
    del entry["n_groups_leaked"]  # a profile saved without the counts still draws
    assert "evaluation images" not in leak_html(Leak.from_dict({"threshold": 0.95, "train_ids_to_drop": [], "evals": [entry]}))
