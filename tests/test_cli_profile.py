"""`capgeo profile`: exit codes, terminal summary, --json output (precomputed vectors, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main
from capgeo.geometry import load_profile

COCO = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco-karpathy-test" / "mscoco_test.json"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """30 real COCO images (150 captions) and random vectors aligned with them by row."""
    if not COCO.is_file():
        pytest.skip(f"COCO captions not found at {COCO} (CI lays shared/ beside the repository)")
    folder = tmp_path_factory.mktemp("coco")
    records = json.loads(COCO.read_text())[:30]
    data = folder / "coco30.json"
    data.write_text(json.dumps(records))
    n = sum(len(record["captions"]) for record in records)
    vectors = np.random.default_rng(0).normal(size=(n, 16)).astype(np.float32)
    np.save(folder / "emb.npy", vectors)
    return data, folder / "emb.npy", n


def run(*args):
    # wide enough that rich does not wrap the lines checked below
    return CliRunner().invoke(main, ["profile", *map(str, args)], env={"COLUMNS": "200"})


def test_summary_and_json_file(dataset, tmp_path):
    data, vectors, n = dataset
    out = tmp_path / "sub" / "profile.json"
    result = run(data, "--encoder", f"vectors:{vectors}", "--batch-size", 8, "--batch-size", 16,
                 "--relative-buckets", "--n-batches", 20, "--seed", 4, "--json", out)
    assert result.exit_code == 0, result.output
    assert f"{n} captions, 30 groups" in result.output
    assert "In-batch negatives by cosine" in result.output
    assert "dataset's own pairwise quantiles" in result.output
    assert "Exact duplicates" in result.output and "Near-duplicates (cosine >= 0.95)" in result.output
    profile = load_profile(out)
    assert profile["options"]["batch_sizes"] == [8, 16]
    assert profile["options"]["seed"] == 4 and profile["options"]["n_batches"] == 20
    assert profile["dataset"]["n_captions"] == n
    assert [entry["batch_size"] for entry in profile["batches"]] == [8, 16]
    assert profile["batches"][0]["relative_buckets"]["kind"] == "relative"
    # the vectors were random: the pairwise mean is the brute-force one of those vectors
    unit = np.load(vectors).astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    groups = np.repeat(np.arange(30), 5)
    similarity = unit @ unit.T
    mask = np.triu(groups[:, None] != groups[None, :], k=1)
    assert profile["pairwise"]["mean"] == pytest.approx(similarity[mask].mean(), abs=1e-6)
    assert not list(out.parent.glob(".*.part"))  # atomic write left no temporary file


def test_json_to_stdout_is_only_json(dataset):
    data, vectors, _ = dataset
    result = run(data, "--encoder", f"vectors:{vectors}", "--batch-size", 4, "--n-batches", 3,
                 "--buckets", "0.1,0.5", "--no-companions", "--json")
    assert result.exit_code == 0, result.output
    profile = json.loads(result.stdout)
    assert profile["schema"] == "capgeo.profile/1"
    assert profile["batches"][0]["buckets"]["labels"] == ["<0.1", "0.1-0.5", ">=0.5"]
    assert "top_ids" not in profile["companions"]


def test_batch_size_above_the_groups_is_exit_2_with_one_line(dataset):
    data, vectors, _ = dataset
    result = run(data, "--encoder", f"vectors:{vectors}", "--batch-size", 31)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == ["Error: --batch-size 31: a batch needs captions of B different images, so B must be between 2 "
                     "and the number of groups (images) in the dataset, 30"]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--buckets", "0.8,x"], "comma-separated numbers"),
    (["--relative-quantiles", "0.9,0.5"], "--relative-quantiles: expected strictly ascending levels"),
    (["--buckets", "0.9,0.8"], "strictly ascending"),
    (["--near-duplicate-threshold", "1.5"], "near-duplicate-threshold"),
    (["--mode", "fast"], "--mode"),
])
def test_bad_options_exit_2(dataset, args, message):
    data, vectors, _ = dataset
    result = run(data, "--encoder", f"vectors:{vectors}", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_vectors_file_is_a_clear_error(dataset, tmp_path):
    data, _, _ = dataset
    result = run(data, "--encoder", f"vectors:{tmp_path / 'none.npy'}")
    assert result.exit_code == 2
    assert result.output.startswith("Error:") and "none.npy" in result.output


def test_relative_quantiles_option_and_library_entry_point(dataset):
    from capgeo.pipeline import profile_dataset

    data, vectors, n = dataset
    result = run(data, "--encoder", f"vectors:{vectors}", "--batch-size", 4, "--n-batches", 5,
                 "--relative-quantiles", "0.25,0.75", "--json")
    assert result.exit_code == 0, result.output
    from_cli = json.loads(result.stdout)
    relative = from_cli["batches"][0]["relative_buckets"]
    assert relative["quantile_levels"] == [0.25, 0.75]
    assert relative["labels"] == ["<p25", "p25-p75", ">=p75"]
    # the library entry point, given a path, gives the same statistics
    from_library = profile_dataset(str(data), f"vectors:{vectors}", batch_sizes=(4,), n_batches=5,
                                   relative_buckets=True, relative_quantiles=(0.25, 0.75), progress=False).to_dict()
    assert from_library["batches"] == from_cli["batches"]
    assert from_library["pairwise"] == from_cli["pairwise"]
    assert from_library["provenance"]["command"] is None


def test_profile_carries_the_gamma_suggestion_of_capgeo_gamma(dataset):
    """The summary's suggested gamma is the `gamma` section computed on the same vectors and batches."""
    from capgeo.findings.gamma import gamma_section

    data, vectors, _ = dataset
    result = run(data, "--encoder", f"vectors:{vectors}", "--batch-size", 8, "--n-batches", 5, "--seed", 3,
                 "--logit-scale", 50, "--json")
    assert result.exit_code == 0, result.output
    profile = json.loads(result.stdout)
    unit = np.load(vectors).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    expected = gamma_section(unit, np.repeat(np.arange(30), 5), logit_scale=50, batch_sizes=(8,), seed=3,
                             n_batches=5).to_dict()
    assert profile["gamma"]["logit_scale"] == 50
    got, want = profile["gamma"]["batches"][0]["suggestion"], expected["batches"][0]["suggestion"]
    assert got["gamma"] == want["gamma"] and got["range"] == want["range"]
    assert got["gamma_exact"] == pytest.approx(want["gamma_exact"], rel=1e-6)

    text = run(data, "--encoder", f"vectors:{vectors}", "--batch-size", 8, "--n-batches", 5, "--seed", 3,
               "--logit-scale", 50)
    assert f"Suggested gamma: {expected['batches'][0]['suggestion']['gamma']:.2f}" in text.output
    assert "Caution:" in text.output and "unknown origin" in text.output   # precomputed vectors
    skipped = run(data, "--encoder", f"vectors:{vectors}", "--batch-size", 8, "--n-batches", 5, "--no-gamma", "--json")
    assert "gamma" not in json.loads(skipped.stdout)


def test_no_gamma_section_for_batches_the_rule_cannot_answer(tmp_path):
    """3 images: every batch has at most 2 negatives per row, too few for the gamma rule."""
    data = tmp_path / "three.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "image": f"img{i % 3}", "caption": f"caption {i}"}) + "\n"
                            for i in range(9)))
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(9, 8)).astype(np.float32))
    result = run(data, "--encoder", f"vectors:{tmp_path / 'v.npy'}", "--n-batches", 3, "--json")
    assert result.exit_code == 0, result.output
    profile = json.loads(result.stdout)
    assert [entry["batch_size"] for entry in profile["batches"]] == [3]
    assert "gamma" not in profile
    # and it says so, in the JSON and on the terminal (it was silent: no gamma line, no caution)
    # the dataset's limit, not a --batch-size nobody gave
    assert "the dataset has only 3 images, too few for the gamma rule" in profile["gamma_left_out"]
    assert "--batch-size" not in profile["gamma_left_out"]
    result = run(data, "--encoder", f"vectors:{tmp_path / 'v.npy'}", "--n-batches", 3)
    assert result.exit_code == 0, result.output
    assert "Suggested gamma: none. Gamma diagnostics: left out, the dataset has only 3 images" in " ".join(
        result.stdout.split())


def test_a_sampled_near_duplicate_count_states_its_sampling_error(dataset):
    """It said '(to +/- one bin of 0.0005)', a precision a count scaled up from a sample does not have."""
    data, vectors, n = dataset
    result = run(data, "--encoder", f"vectors:{vectors}", "--no-gamma", "--mode", "sampled", "--sampled-pairs", 500,
                 "--near-duplicate-threshold", 0.2, "--top-k", 1, "--json", "-")
    profile = json.loads(result.stdout)
    near, bounds = profile["near_duplicates"], profile["pairwise"]["bounds"]
    assert near["count_method"] == "sampled"
    result = run(data, "--encoder", f"vectors:{vectors}", "--no-gamma", "--mode", "sampled", "--sampled-pairs", 500,
                 "--near-duplicate-threshold", 0.2, "--top-k", 1)
    assert result.exit_code == 0, result.output
    spread = bounds["cdf_epsilon"] * bounds["population"]
    assert f"(estimated from the sampled pairs: +/- {spread:,.0f} pairs, 95%)" in result.stdout
    assert "one bin" not in result.stdout


@pytest.mark.parametrize("args, recorded, note", [
    (["--mode", "sampled", "--sampled-pairs", 500, "--precision", "bf16"], ("precision", "fp32"),
     "Note: --precision bf16 applies to the exact pass"),
    (["--mode", "exact", "--companions", "faiss"], ("companions", "exact"),
     "Note: --companions faiss applies to --mode sampled"),
])
def test_an_option_the_mode_does_not_apply_is_noted_and_not_recorded_as_used(dataset, args, recorded, note):
    data, vectors, n = dataset
    result = run(data, "--encoder", f"vectors:{vectors}", "--no-gamma", *args, "--json", "-")
    assert result.exit_code == 0, result.output
    options = json.loads(result.stdout)["options"]
    assert options[recorded[0]] == recorded[1]
    assert note in result.stderr


def test_options_the_rest_of_the_command_line_leaves_unused_get_a_note(tmp_path):
    from _action_fixtures import vectors_dataset

    data, encoder = vectors_dataset(tmp_path, 40)
    result = CliRunner().invoke(main, ["profile", str(data), "--encoder", encoder, "--batch-size", "8", "--mode", "exact",
                                      "--sampled-pairs", "5", "--no-gamma", "--logit-scale", "50"])
    assert result.exit_code == 0, result.output
    assert "Note: --sampled-pairs applies to the sampled estimate" in result.stderr
    assert "Note: --logit-scale sets the scale of the suggested gamma, which --no-gamma left out" in result.stderr
    plain = CliRunner().invoke(main, ["profile", str(data), "--encoder", encoder, "--batch-size", "8", "--no-gamma"])
    assert "Note: --" not in plain.stderr
