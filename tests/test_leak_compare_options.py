"""`leak` and `compare` take the dataset options the other commands take (--format, --text-column,
--captions-column, --id-column, --group-column, --split, --limit), applied to each dataset they read."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from capgeo.cli import main


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _sets(tmp_path):
    """A training and an evaluation set whose caption key is IIW and id key uid (no usual names),
    in files named .data (no extension that says the format), and vectors keyed by those ids."""
    rng = np.random.default_rng(0)
    train_vectors = rng.normal(size=(10, 8))
    eval_vectors = rng.normal(size=(4, 8))
    eval_vectors[1] = train_vectors[7] + 0.01 * rng.normal(size=8)  # eval u-e1 is a near twin of train u-t7
    train = _write(tmp_path / "train.data", [{"uid": f"u-t{i}", "photo": f"p{i}", "IIW": f"training caption {i}",
                                              "split": "train" if i < 8 else "val"} for i in range(10)])
    evals = _write(tmp_path / "eval.data", [{"uid": f"u-e{i}", "photo": f"q{i}", "IIW": f"eval caption {i}",
                                             "split": "test"} for i in range(4)])
    vectors = tmp_path / "v.npz"
    np.savez(vectors, vectors=np.concatenate([train_vectors, eval_vectors]).astype(np.float32),
             ids=np.array([f"u-t{i}" for i in range(10)] + [f"u-e{i}" for i in range(4)]))
    return train, evals, vectors, train_vectors, eval_vectors


def _run(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args], env={"COLUMNS": "200"})


def test_leak_reads_both_sets_with_the_options_given(tmp_path):
    train, evals, vectors, train_vectors, eval_vectors = _sets(tmp_path)
    # without the options the sets cannot be read: the caption key has no usual name
    refused = _run("leak", train, evals, "--encoder", f"vectors:{vectors}")
    assert refused.exit_code == 2 and "name it with --text-column" in refused.output
    result = _run("leak", train, evals, "--format", "jsonl", "--text-column", "iiw", "--id-column", "uid",
                  "--group-column", "photo", "--encoder", f"vectors:{vectors}", "--threshold", 0.9,
                  "--json", tmp_path / "leak.json")
    assert result.exit_code == 0, result.output
    assert "Note: --text-column 'iiw': using key 'IIW'" in result.stderr
    unit = lambda rows: rows / np.linalg.norm(rows, axis=1, keepdims=True)  # noqa: E731
    cosines = unit(eval_vectors) @ unit(train_vectors).T
    expected = [f"u-e{row}" for row in np.nonzero((cosines >= 0.9).any(axis=1))[0]]
    (entry,) = json.loads((tmp_path / "leak.json").read_text())["evals"]
    assert entry["leaked_ids"] == expected == ["u-e1"]
    # --split and --limit apply to each set too: the twin (u-t7) is beyond the first 5 training captions
    limited = _run("leak", train, evals, "--format", "jsonl", "--text-column", "IIW", "--id-column", "uid",
                   "--limit", 5, "--encoder", f"vectors:{vectors}", "--threshold", 0.9, "--json", tmp_path / "l.json")
    assert limited.exit_code == 0, limited.output
    (entry,) = json.loads((tmp_path / "l.json").read_text())["evals"]
    assert entry["n_captions"] == 4 and entry["leaked_ids"] == []
    split = _run("leak", train, evals, "--format", "jsonl", "--text-column", "IIW", "--id-column", "uid",
                 "--split", "train", "--encoder", f"vectors:{vectors}")
    assert split.exit_code == 2 and "EVAL" in split.output and "split" in split.output


def test_leak_errors_keep_the_column_advice_it_can_now_follow(tmp_path):
    train, evals, vectors, *_ = _sets(tmp_path)
    result = _run("leak", train, evals, "--format", "jsonl", "--encoder", f"vectors:{vectors}")
    assert result.exit_code == 2
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert error.startswith("Error: TRAIN ") and "name it with --text-column or --captions-column" in error


def test_compare_reads_each_dataset_with_the_options_given(tmp_path):
    train, evals, vectors, *_ = _sets(tmp_path)
    rng = np.random.default_rng(1)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(10, 8)).astype(np.float32))
    result = _run("compare", train, "--format", "jsonl", "--text-column", "IIW", "--id-column", "uid",
                  "--encoder", f"vectors:{tmp_path / 'a.npy'}", "--encoder", f"vectors:{tmp_path / 'b.npy'}",
                  "--batch-size", 4, "--n-batches", 3, "-o", tmp_path / "c.html")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "c.html").is_file()
    refused = _run("compare", train, "--encoder", f"vectors:{tmp_path / 'a.npy'}",
                   "--encoder", f"vectors:{tmp_path / 'b.npy'}", "-o", tmp_path / "d.html")
    assert refused.exit_code == 2 and not (tmp_path / "d.html").exists()


def test_compare_names_dataset_options_a_saved_profile_ignores(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"caption": f"a photo number {i}", "image": f"i{i // 2}"} for i in range(12)])
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32))
    for name in ("p1", "p2"):
        made = _run("profile", data, "--encoder", f"vectors:{tmp_path / 'v.npy'}", "--batch-size", 4,
                    "--n-batches", 3, "--json", tmp_path / f"{name}.json")
        assert made.exit_code == 0, made.output
    result = _run("compare", tmp_path / "p1.json", tmp_path / "p2.json", "--text-column", "IIW", "--limit", 3,
                  "-o", tmp_path / "c.html")
    assert result.exit_code == 0, result.output
    assert "ignored: --text-column, --limit" in result.stderr
