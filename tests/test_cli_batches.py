"""`capgeo batches` end to end through click's CliRunner, and capgeo.plan_batches."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import write_jsonl
from capgeo.captions.exact_duplicates import normalize_text
from capgeo.cli import main
from capgeo.training.batches_export import read_batches


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def dataset(tmp_path):
    """120 captions of 40 images (3 each), two exact copies across images, a near-duplicate pair."""
    rng = np.random.default_rng(0)
    n = 120
    ids = [f"cap{i}" for i in range(n)]
    groups = [f"img{i // 3}" for i in range(n)]
    texts = [f"caption {i}" for i in range(n)]
    texts[4] = "A red bus."
    texts[50] = "a red  BUS."
    vectors = rng.normal(size=(n, 24))
    vectors[90] = vectors[10] + 0.02 * rng.normal(size=24)
    data = write_jsonl(tmp_path / "data.jsonl", ids, groups, texts)
    np.save(tmp_path / "vectors.npy", vectors.astype(np.float32))
    return data, f"vectors:{tmp_path / 'vectors.npy'}", ids, groups, texts, vectors


def test_writes_batches_free_of_conflicts_and_prints_the_plan(tmp_path, dataset):
    data, encoder, ids, groups, texts, vectors = dataset
    out, summary = tmp_path / "batches.jsonl", tmp_path / "summary.json"
    result = run("batches", data, "--encoder", encoder, "--batch-size", 16, "--epochs", 2, "--seed", 3,
                 "-o", out, "--json", summary)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all(list(line) == ["epoch", "batch", "indices", "ids"] for line in lines)
    assert all(line["ids"] == [ids[i] for i in line["indices"]] for line in lines)
    epochs = read_batches(out)
    assert len(epochs) == 2 and all(len(epoch) == 120 // 16 for epoch in epochs)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    for epoch in epochs:
        placed = [i for batch in epoch for i in batch]
        assert len(set(placed)) == len(placed)
        for batch in epoch:
            assert len(batch) == 16
            assert len({groups[i] for i in batch}) == 16
            assert len({normalize_text(texts[i]) for i in batch}) == 16
            cosine = unit[batch] @ unit[batch].T
            assert np.all(cosine[np.triu_indices(16, k=1)] < 0.95)

    result_json = json.loads(summary.read_text())
    assert result_json["schema"] == "capgeo.batches/1"
    assert result_json["conflict_pairs"] == {"same_image": 40 * 3, "exact_copy": 1, "near_duplicate": 1}
    assert result_json["n_batches"] == 14 and result_json["n_placed"] == 14 * 16
    assert result_json["n_not_placed"] == 2 * (120 % 16)
    assert result_json["share_not_placed"] == pytest.approx(16 / 240)
    assert [entry["epoch"] for entry in result_json["per_epoch"]] == [0, 1]
    assert result_json["output"] == str(out)
    avoided = result_json["conflicts_avoided"]
    assert avoided["same_image"] > 0
    assert f"rearranged batches   {result_json['n_rearranged_batches']}" in result.stdout
    assert f"{avoided['same_image']} same image" in result.stdout
    assert "not placed           16 (6.67%" in result.stdout


def test_json_to_stdout_is_the_same_plan_as_the_library(tmp_path, dataset):
    import capgeo

    data, encoder, *_ = dataset
    result = run("batches", data, "--encoder", encoder, "--batch-size", 8, "--json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    plan = capgeo.plan_batches(data, batch_size=8, encoder=encoder, output=str(tmp_path / "b.jsonl"))
    assert {**plan.to_dict(), "output": None} == printed
    assert read_batches(tmp_path / "b.jsonl") == [[list(batch) for batch in plan.batches[0]]]
    assert plan.n_not_placed == printed["n_not_placed"] and plan.to_polars().height == 15


def test_the_library_and_the_command_share_one_frozen_result(tmp_path, dataset):
    import dataclasses

    import capgeo
    from capgeo.pipeline import EncodeOptions, batches_dataset, loaded_captions
    from capgeo.training.plan import BatchPlan

    data, encoder, *_ = dataset
    plan = capgeo.plan_batches(data, batch_size=8, encoder=encoder)
    assert capgeo.BatchPlan is BatchPlan and isinstance(plan, BatchPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.n_placed = 0
    changed = plan.to_dict()
    changed["conflicts_avoided"]["same_image"] += 1
    changed["per_epoch"][0]["n_placed"] += 1
    assert plan.to_dict() != changed  # a copy: changing it changes no result
    # the CLI's call keeps no batches; everything else is the same result
    command = batches_dataset(loaded_captions(data, {}), EncodeOptions(encoder), batch_size=8)
    assert command.batches is None and command == dataclasses.replace(plan, batches=None)


def test_refuses_to_replace_a_file_capgeo_did_not_write(tmp_path, dataset):
    data, encoder, *_ = dataset
    out = tmp_path / "batches.jsonl"
    out.write_text("my notes\n")
    result = run("batches", data, "--encoder", encoder, "--batch-size", 8, "-o", out)
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == [result.output.strip()]
    assert "capgeo did not write it" in result.output
    assert out.read_text() == "my notes\n"
    result = run("batches", data, "--encoder", encoder, "--batch-size", 8, "-o", out, "--force")
    assert result.exit_code == 0, result.output
    assert len(read_batches(out)) == 1


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "1"], "--batch-size"),
    (["--batch-size", "500"], "batch size: 500 is more than the 120 captions"),
    (["--batch-size", "8", "--threshold", "1.5"], "--threshold"),
    (["--batch-size", "8", "--epochs", "0"], "--epochs"),
    (["--batch-size", "8", "--seed", "-1"], "--seed"),
    (["--batch-size", "8", "-o", "{tmp}/data.jsonl"], "data.jsonl"),
    (["--batch-size", "8", "-o", "{tmp}/data.jsonl/b.jsonl"], "cannot write"),
    ([], "--batch-size"),
])
def test_bad_options_are_one_error_line_and_write_nothing(tmp_path, dataset, args, message):
    data, encoder, *_ = dataset
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    result = run("batches", data, "--encoder", encoder, *args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error:")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_the_command_is_listed():
    result = run("--help")
    assert "batches" in result.output


@pytest.mark.slow
def test_the_embedded_default_encoder_keeps_paraphrases_of_different_images_apart(tmp_path):
    """Under all-MiniLM-L6-v2, near-identical wordings of different images reach cosine >= 0.95."""
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    texts = ["A dog sleeps on a red sofa.", "A dog sleeps on a red sofa!", "Two men play chess in a park.",
             "Two men are playing chess in a park.", "A plate of pasta with basil.", "A bowl of soup.",
             "A train at a station.", "A cat on a windowsill.", "Children fly a kite on the beach.",
             "A bicycle leaning on a wall.", "A lighthouse at sunset.", "A man surfing a big wave."]
    groups = [f"img{i}" for i in range(len(texts))]
    data = write_jsonl(tmp_path / "data.jsonl", [f"c{i}" for i in range(len(texts))], groups, texts)
    out = tmp_path / "batches.jsonl"
    result = run("batches", data, "--batch-size", 4, "--epochs", 3, "-o", out, "--cache-dir", tmp_path / "cache")
    assert result.exit_code == 0, result.output
    vectors = embed(load_captions(data), None, cache_dir=tmp_path / "cache").vectors.astype(np.float64)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] >= 0.95  # the planted pair is a near-duplicate under this encoder
    for epoch in read_batches(out):
        for batch in epoch:
            block = similarity[np.ix_(batch, batch)]
            assert np.all(block[np.triu_indices(len(batch), k=1)] < 0.95)


def test_options_and_data_are_checked_before_any_encoding(tmp_path, monkeypatch):
    import capgeo
    import capgeo.encoders
    from capgeo.errors import CapgeoError
    from capgeo.pipeline import EncodeOptions

    def never(*args, **kwargs):
        raise AssertionError("encoded before the options were checked")

    monkeypatch.setattr(EncodeOptions, "embed", never)
    monkeypatch.setattr(capgeo.encoders, "embed", never)
    data = write_jsonl(tmp_path / "data.jsonl", [f"c{i}" for i in range(6)], [f"i{i // 2}" for i in range(6)],
                       [f"caption {i}" for i in range(6)])
    one_image = write_jsonl(tmp_path / "one.jsonl", ["a", "b"], ["x", "x"], ["one", "two"])
    for args, says in [((data, "--batch-size", 7), "batch size: 7 is more than the 6 captions"),
                       ((one_image, "--batch-size", 2), "all 2 captions belong to one group")]:
        result = run("batches", *args)
        assert result.exit_code == 2 and says in result.output, result.output
    for options, says in [({"seed": -1}, "seed"), ({"epochs": 0}, "epochs"), ({"threshold": 2.0}, "threshold"),
                          ({"batch_size": 1}, "batch size")]:
        with pytest.raises(CapgeoError, match=says):
            capgeo.plan_batches(data, **{"batch_size": 2, **options})
