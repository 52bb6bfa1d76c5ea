"""leak and report's --leak / --truncation / --fill-missing: sets compared at one length, cosines that do
not move with the tile size, skipped rows reported, errors that name the set and come before the work,
and saved profiles completed only from the dataset and encoder they were made from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import caption_set, embeddings, unit, write_jsonl
from capgeo.captions import load_captions
from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.findings.leak import leak_section


def run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"}, **kwargs)


def test_sets_cut_to_different_lengths_are_not_compared():
    """report --max-tokens 32 --leak compared 32-token training vectors with full-length eval vectors:
    0 of 20 leaked where `capgeo leak` found 20."""
    rng = np.random.default_rng(0)
    train, evals = caption_set(["a", "b", "c"]), caption_set(["d", "e"])
    with pytest.raises(CapgeoError, match="embedded at 77 tokens, the training set at 32"):
        leak_section(train, embeddings(rng.normal(size=(3, 8)), max_tokens=32),
                     [(evals, embeddings(rng.normal(size=(2, 8)), max_tokens=77))])


def test_report_leak_cuts_the_evaluation_sets_as_the_training_set(tmp_path):
    from capgeo.pipeline import leak_datasets
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.pipeline import EncodeOptions
    from capgeo.report.build import ReportOptions, report_dataset

    long = ("a long caption about a red bus parked by the kerb on a rainy evening in the old town, with people "
            "under umbrellas walking past shop windows and a cyclist waiting at the lights")
    train = write_jsonl(tmp_path / "train.jsonl", [f"t{i}" for i in range(6)], [f"g{i}" for i in range(6)],
                        [f"{long} number {i}" for i in range(6)])
    evals = write_jsonl(tmp_path / "eval.jsonl", ["e0", "e1"], ["h0", "h1"], [f"{long} variant one", "a cat"])
    cut = report_dataset(str(train), EncodeOptions(max_tokens=8, cache_dir=str(tmp_path / "cache")),
                         ProfileOptions(batch_sizes=(4,), n_batches=4),
                         report=ReportOptions(dupes=False, gamma=False, leak=[str(evals)]),
                         progress=False).profile.leak.to_dict()
    alone = leak_datasets(str(train), [str(evals)], None, max_tokens=8, cache_dir=str(tmp_path / "cache"),
                          progress=False).to_dict()
    assert cut["evals"][0]["n_leaked"] == alone["evals"][0]["n_leaked"] == 1  # the same 8 tokens: a twin
    assert cut["train_ids_to_drop"] == alone["train_ids_to_drop"]


def test_leak_pair_cosines_and_order_do_not_depend_on_the_block_size():
    rng = np.random.default_rng(2)
    train_vectors = unit(rng.normal(size=(40, 16)))
    eval_vectors = train_vectors[[3, 3, 17, 25, 31]].copy()  # exact copies: float32 products round to ~1
    train, evals = caption_set([f"t{i}" for i in range(40)]), caption_set([f"e{i}" for i in range(5)])
    results = [leak_section(train, embeddings(train_vectors), [(evals, embeddings(eval_vectors))], threshold=0.9,
                            top=10, block_size=block).to_dict() for block in (3, 7, 2048)]
    pairs = [[(p["eval_id"], p["train_id"], p["cosine"]) for p in r["evals"][0]["pairs"]] for r in results]
    assert pairs[0] == pairs[1] == pairs[2]
    assert all(cosine <= 1.0 for _, _, cosine in pairs[0])


@pytest.fixture
def sets_with_vectors(tmp_path):
    rng = np.random.default_rng(1)
    train = write_jsonl(tmp_path / "train.jsonl", [f"t{i}" for i in range(8)], [f"g{i}" for i in range(8)],
                        [f"train caption {i}" for i in range(8)])
    rows = [{"id": f"e{i}", "image": f"h{i}", "caption": f"eval caption {i}"} for i in range(4)]
    rows += [{"id": "e-blank", "image": "hb", "caption": "   "}, {"id": "e-zw", "image": "hz", "caption": "\u200b"}]
    evals = tmp_path / "eval.jsonl"
    evals.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    np.savez(tmp_path / "v.npz", vectors=unit(rng.normal(size=(12, 8))),
             ids=np.array([f"t{i}" for i in range(8)] + [f"e{i}" for i in range(4)]))
    return train, evals, f"vectors:{tmp_path / 'v.npz'}"


def test_leak_reports_the_rows_it_skipped(sets_with_vectors):
    train, evals, encoder = sets_with_vectors
    result = run("leak", train, evals, "--encoder", encoder)
    assert result.exit_code == 0, result.output
    assert "Warning: skipped" in result.stderr


def test_a_set_leak_cannot_read_is_named_and_told_the_column_option_it_takes(sets_with_vectors, tmp_path):
    train, _, encoder = sets_with_vectors
    columns = tmp_path / "cols.csv"
    columns.write_text("key,desc\nk1,a photo\nk2,another photo\n")
    result = run("leak", train, columns, "--encoder", encoder)
    assert result.exit_code == 2
    assert result.output.count("Error:") == 1 and "EVAL" in result.output and "--text-column" in result.output
    # compare takes the dataset options too (tests/test_leak_compare_options.py)
    result = run("compare", train, columns, "-o", tmp_path / "c.html")
    assert result.exit_code == 2 and "SOURCE" in result.output and "--text-column" in result.output
    # report's --leak EVAL sets are read by detection only: the advice is replaced, not contradicted
    result = run("report", train, "--leak", columns, "--encoder", encoder, "-o", tmp_path / "r.html")
    assert result.exit_code == 2 and "--leak EVAL" in result.output and "read by detection" in result.output
    assert "--text-column" not in result.output


def test_a_saved_profile_is_known_by_its_content_not_its_name_or_key_order(sets_with_vectors, tmp_path):
    train, _, encoder = sets_with_vectors
    saved = _saved_profile(tmp_path, train, encoder)
    profile = json.loads(saved.read_text())
    renamed = tmp_path / "saved.profile"
    renamed.write_text(saved.read_text())
    resorted = tmp_path / "sorted.json"
    resorted.write_text(json.dumps(profile, sort_keys=True))  # "schema" no longer first
    for source in (renamed, resorted):
        result = run("report", source, "-o", tmp_path / f"{source.stem}.html")
        assert result.exit_code == 0, result.output  # read as a dataset, it failed for want of a caption column
        assert (tmp_path / f"{source.stem}.html").is_file()
    # a dataset command given a profile says what it is, not which caption column is missing
    result = run("gamma", resorted)
    assert result.exit_code == 2
    assert "a capgeo.profile/1 result capgeo wrote, not a dataset" in result.output


def test_report_checks_leak_sets_and_truncation_before_the_profile(sets_with_vectors, tmp_path, monkeypatch):
    import capgeo.geometry.profile

    def must_not_profile(*args, **kwargs):
        raise AssertionError("profiled before the options were checked")

    monkeypatch.setattr(capgeo.geometry.profile, "build_profile", must_not_profile)
    train, _, encoder = sets_with_vectors
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"id": "x", "caption": "   "}) + "\n")
    result = run("report", train, "--encoder", encoder, "--leak", empty, "-o", tmp_path / "r.html")
    assert result.exit_code == 2 and "--leak EVAL" in result.output, result.output
    result = run("report", train, "--encoder", encoder, "--truncation", "-o", tmp_path / "r.html")
    assert result.exit_code == 2 and "no tokenizer" in result.output, result.output
    # vectors aligned by row cannot embed an eval set: refused before the profile too (after it, before)
    np.save(tmp_path / "rows.npy", np.random.default_rng(0).normal(size=(len(load_captions(train)), 8)).astype("f4"))
    result = run("report", train, "--encoder", f"vectors:{tmp_path / 'rows.npy'}", "--leak", train,
                 "-o", tmp_path / "r.html")
    assert result.exit_code == 2 and "vectors aligned by row belong to one set" in result.output, result.output


def _saved_profile(folder: Path, data: Path, encoder: str) -> Path:
    result = run("profile", data, "--encoder", encoder, "--batch-size", "4", "--n-batches", "4", "--no-gamma",
                 "--json", folder / "p.json")
    assert result.exit_code == 0, result.output
    return folder / "p.json"


def test_fill_missing_refuses_an_encoder_whose_file_changed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "d.jsonl", [f"c{i}" for i in range(12)], [f"g{i}" for i in range(12)],
                [f"caption {i}" for i in range(12)])
    np.save(tmp_path / "v.npy", unit(np.random.default_rng(0).normal(size=(12, 8))))
    profile = _saved_profile(tmp_path, Path("d.jsonl"), "vectors:v.npy")
    np.save(tmp_path / "v.npy", unit(np.random.default_rng(1).normal(size=(12, 8))))  # other vectors, same name
    import capgeo.encoders

    def must_not_encode(*args, **kwargs):  # a checkpoint's whole dataset was encoded before the refusal
        raise AssertionError("encoded before the encoder's identity was checked")

    monkeypatch.setattr(capgeo.encoders, "embed", must_not_encode)
    result = run("report", profile, "--fill-missing", "-o", tmp_path / "r.html")
    assert result.exit_code == 2 and "is not the one the profile was made with" in result.output
    assert not (tmp_path / "r.html").exists()


def test_fill_missing_reads_the_dataset_from_where_the_profile_was_made(tmp_path, monkeypatch):
    made, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    made.mkdir(), elsewhere.mkdir()
    write_jsonl(made / "d.jsonl", [f"c{i}" for i in range(12)], [f"g{i}" for i in range(12)],
                [f"caption {i}" for i in range(12)])
    write_jsonl(elsewhere / "d.jsonl", ["x0", "x1"], ["y0", "y1"], ["another", "file"])  # same name, other file
    np.save(made / "v.npy", unit(np.random.default_rng(0).normal(size=(12, 8))))
    monkeypatch.chdir(made)
    profile = _saved_profile(made, Path("d.jsonl"), "vectors:v.npy")
    monkeypatch.chdir(elsewhere)
    result = run("report", profile, "--fill-missing", "--no-dupes", "-o", elsewhere / "r.html")
    assert result.exit_code == 0, result.output


def test_fill_missing_reads_a_pattern_of_shards_from_where_the_profile_was_made(tmp_path, monkeypatch):
    """A profile of a quoted glob of parquet shards is completed from another folder: the pattern is
    the dataset, expanded where the profile's command ran."""
    import polars as pl

    made, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    (made / "shards").mkdir(parents=True), elsewhere.mkdir()
    for part in range(2):
        rows = range(6 * part, 6 * part + 6)
        pl.DataFrame({"id": [f"c{i}" for i in rows], "caption": [f"caption {i}" for i in rows]}).write_parquet(
            made / "shards" / f"part-{part}.parquet")
    np.save(made / "v.npy", unit(np.random.default_rng(0).normal(size=(12, 8))))
    monkeypatch.chdir(made)
    profile = _saved_profile(made, Path("shards/*.parquet"), "vectors:v.npy")
    monkeypatch.chdir(elsewhere)
    result = run("report", profile, "--fill-missing", "--no-dupes", "-o", elsewhere / "r.html")
    assert result.exit_code == 0, result.output
    assert (elsewhere / "r.html").exists()


def test_fill_missing_says_why_a_profile_made_with_column_options_cannot_be_completed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cols.csv").write_text("key,picture,desc\n" + "".join(f"k{i},p{i},caption {i}\n" for i in range(12)))
    np.save(tmp_path / "v.npy", unit(np.random.default_rng(0).normal(size=(12, 8))))
    result = run("profile", "cols.csv", "--text-column", "desc", "--group-column", "picture", "--id-column", "key",
                 "--encoder", "vectors:v.npy", "--batch-size", "4", "--n-batches", "4", "--no-gamma", "--json", "p.json")
    assert result.exit_code == 0, result.output
    result = run("report", "p.json", "--fill-missing", "-o", "r.html")
    assert result.exit_code == 2 and "does not record column options" in result.output


def test_fill_missing_takes_a_truncation_results_batch_size_for_gamma(tmp_path):
    from capgeo.geometry.typed_profile import Profile
    from capgeo.pipeline import with_gamma

    captions = caption_set([f"g{i}" for i in range(16)])
    vectors = embeddings(np.random.default_rng(0).normal(size=(16, 8))).vectors
    profile = Profile.from_dict({"batches": [], "truncation": {"batch_size": 8},
                                 "options": {"n_batches": 4, "seed": 0}}, check=False)
    filled, note = with_gamma(profile, captions, vectors, logit_scale=100.0)
    assert note is None and profile.gamma is None
    assert filled.gamma.batches[0].batch_size == 8
    bare = Profile.from_dict({"batches": []}, check=False)
    assert "no in-batch section" in with_gamma(bare, captions, vectors, logit_scale=100.0)[1]


def test_truncation_with_top_0_says_pairs_were_counted_not_that_there_are_none():
    from rich.console import Console

    from capgeo.terminal.truncation import _render_pairs
    from capgeo.geometry.typed_profile import Truncation

    console = Console(record=True, width=200)
    section = {"truncation_only_pairs": [], "threshold": 0.9, "max_listed": 0,
               "per_length": [{"near_duplicates": {"n_truncation_only": 14}}, {"near_duplicates": {}}]}
    _render_pairs(Truncation.from_dict(section), console)
    assert "14 truncation-only near-duplicate pairs are counted above; none listed" in console.export_text()


def test_leak_terminal_names_the_drop_list_it_wrote_and_says_nothing_of_dropping_for_no_leak(sets_with_vectors,
                                                                                            tmp_path):
    train, evals, encoder = sets_with_vectors
    out = tmp_path / "drop.txt"
    with_file = run("leak", train, evals, "--encoder", encoder, "--threshold", "0.999", "-o", out)
    assert with_file.exit_code == 0, with_file.output
    assert f"their ids are in {out}" in " ".join(with_file.stdout.split()) and "-o FILE" not in with_file.stdout
    assert "removes it" not in with_file.stdout  # nothing leaked at 0.999: nothing to remove
    without = run("leak", train, evals, "--encoder", encoder)
    assert "-o FILE writes their ids" in without.stdout


def test_a_saved_profile_with_a_byte_order_mark_or_on_one_line_without_a_suffix(sets_with_vectors, tmp_path):
    train, _, encoder = sets_with_vectors
    profile = json.loads(_saved_profile(tmp_path, train, encoder).read_text())
    with_bom = tmp_path / "bom.json"
    with_bom.write_text(json.dumps(profile), encoding="utf-8-sig")  # as some editors save
    result = run("report", with_bom, "-o", tmp_path / "bom.html")
    assert result.exit_code == 0, result.output
    one_line = tmp_path / "profile_copy"
    one_line.write_text(json.dumps(profile))
    result = run("info", one_line)  # read as JSON lines: its one record is the profile
    assert result.exit_code == 2 and "a capgeo.profile/1 result capgeo wrote, not a dataset" in result.output


def test_report_of_a_saved_profile_leaves_out_the_sections_asked_to(sets_with_vectors, tmp_path):
    """--no-gamma and --no-dupes were ignored for a saved profile, and a note advised adding the
    section just excluded."""
    train, _, encoder = sets_with_vectors
    saved = tmp_path / "full.json"
    result = run("gamma", train, "--encoder", encoder, "--batch-size", "4", "--json", saved)
    assert result.exit_code == 0, result.output
    result = run("report", saved, "-o", tmp_path / "r.html", "--no-gamma", "--no-dupes")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    assert 'id="gamma"' not in page
    assert "left out (--no-gamma)" in result.output and "left out (--no-dupes)" in result.output
    assert "has no gamma section" not in result.output + page and "has no dupes section" not in result.output + page


def test_report_checks_its_default_output_before_any_work(sets_with_vectors, tmp_path, monkeypatch):
    train, _, encoder = sets_with_vectors
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.html").mkdir()  # where the default output would go
    import capgeo.pipeline

    monkeypatch.setattr(capgeo.pipeline, "profile_dataset", lambda *a, **k: pytest.fail("worked before refusing"))
    result = run("report", train, "--encoder", encoder)
    assert result.exit_code == 2 and "cannot write train.html: it is a folder (the default output" in result.output


def test_fill_missing_never_writes_over_the_dataset_or_the_encoder_files_its_profile_names(tmp_path, monkeypatch):
    """Only the profile file was checked: `-o d.jsonl` replaced the dataset with HTML, and
    `--save-profile v.npy` the vectors with JSON, exit 0."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "d.jsonl", [f"c{i}" for i in range(12)], [f"g{i}" for i in range(12)],
                [f"caption {i}" for i in range(12)])
    np.save(tmp_path / "v.npy", unit(np.random.default_rng(0).normal(size=(12, 8))))
    profile = _saved_profile(tmp_path, Path("d.jsonl"), "vectors:v.npy")
    before = {name: (tmp_path / name).read_bytes() for name in ("d.jsonl", "v.npy")}
    for outputs, says in ((["-o", "d.jsonl"], "would overwrite the input DATA"),
                          (["-o", "r.html", "--save-profile", "v.npy"], "would overwrite the input --encoder")):
        result = run("report", profile, "--fill-missing", *outputs)
        assert result.exit_code == 2 and says in result.output, result.output
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert not (tmp_path / "r.html").exists()
