"""Every command that encodes has its options checked by the library (capgeo.pipeline's
checked_dataset, plan_profile, leak_datasets; capgeo.report.build's plan_report), all of them
before the first encoding: an encoder that is called at all fails these tests."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main
from capgeo.errors import CapgeoError

N_GROUPS, PER_GROUP = 24, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A dataset of 24 images of 2 captions, one of 4 captions of one image, a file where a
    cache folder's parent would be, and random vectors for the dataset (by row)."""
    folder = tmp_path_factory.mktemp("checks")
    records = [{"caption_id": f"c{i}", "image_id": f"img{i // PER_GROUP}", "caption": f"a red bus number {i}"}
               for i in range(N_GROUPS * PER_GROUP)]
    (folder / "data.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (folder / "one.jsonl").write_text("".join(json.dumps({"caption": f"a dog {i}", "image_id": "x"}) + "\n"
                                              for i in range(4)))
    (folder / "small.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records[:8]))
    (folder / "a-file").write_text("not a folder")
    np.save(folder / "v.npy", np.random.default_rng(0).normal(size=(len(records), 8)).astype(np.float32))
    return folder


@pytest.fixture
def no_encoding(monkeypatch):
    """Any encoder loaded or any caption embedded fails the test."""
    import capgeo.encoders
    import capgeo.pipeline as pipeline
    from capgeo.pipeline import EncodeOptions

    def never(*args, **kwargs):
        raise AssertionError("encoded before the options were checked")

    monkeypatch.setattr(EncodeOptions, "embed", never)
    monkeypatch.setattr(capgeo.encoders, "embed", never)
    monkeypatch.setattr(capgeo.encoders, "get_encoder", never)
    monkeypatch.setattr(pipeline, "embed_at_lengths", never)


def refused(*args, says: str) -> None:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


CACHE_ERROR = "cannot write the embedding cache"


@pytest.mark.parametrize("command", ["dupes", "dupes-examples", "dupes-sets"])
def test_dupes_commands_check_before_encoding(files, no_encoding, command):
    data = files / "data.jsonl"
    refused(command, data, "--top-k", 5000, says="--top-k: expected at most 1,000")
    refused(command, files / "one.jsonl", says="all 4 captions belong to one group")
    refused(command, data, "--cache-dir", files / "a-file" / "cache", says=CACHE_ERROR)


def test_negatives_checks_before_encoding(files, no_encoding, tmp_path):
    data, out = files / "data.jsonl", tmp_path / "neg.jsonl"
    refused("negatives", data, "-o", out, "-k", 5000, says="-k/--negatives: expected at most 1,000")
    refused("negatives", data, "-o", out, "--min-cosine", 0.9, "--max-cosine", 0.5,
            says="--min-cosine (0.9) must be below --max-cosine (0.5)")
    refused("negatives", files / "one.jsonl", "-o", out, says="all 4 captions belong to one group")
    refused("negatives", data, "-o", out, "--cache-dir", files / "a-file" / "cache", says=CACHE_ERROR)
    assert not out.exists()


def test_encode_checks_before_encoding(files, no_encoding, tmp_path):
    refused("encode", files / "data.jsonl", "--cache-dir", files / "a-file" / "cache", says=CACHE_ERROR)


def test_leak_checks_its_cache_before_reading_or_encoding(files, no_encoding, tmp_path):
    refused("leak", files / "data.jsonl", files / "small.jsonl", "--cache-dir", files / "a-file" / "cache",
            says=CACHE_ERROR)
    # the cache folder before the sets are read: a missing evaluation set comes second
    refused("leak", files / "data.jsonl", tmp_path / "missing.jsonl", "--cache-dir", files / "a-file" / "cache",
            says=CACHE_ERROR)


def test_report_checks_before_encoding(files, no_encoding, tmp_path):
    data, out = files / "data.jsonl", tmp_path / "r.html"
    refused("report", data, "-o", out, "--n-batches", 10**8, says="--n-batches: expected at most 100,000")
    refused("report", data, "-o", out, "--batch-size", 500,
            says="--batch-size 500: a batch needs captions of B different images")
    refused("report", files / "one.jsonl", "-o", out, says="all 4 captions belong to one group")
    refused("report", data, "-o", out, "--truncation", "--cache-dir", files / "a-file" / "cache", says=CACHE_ERROR)
    assert not out.exists()


def test_compare_checks_every_dataset_before_the_first_encoding(files, no_encoding, tmp_path):
    data, small, out = files / "data.jsonl", files / "small.jsonl", tmp_path / "c.html"
    # the second dataset's batch size was refused only once the first had been encoded and profiled
    refused("compare", data, small, "--batch-size", 12, "-o", out,
            says="--batch-size 12: a batch needs captions of B different images")
    refused("compare", data, files / "one.jsonl", "-o", out, says="all 4 captions belong to one group")
    refused("compare", data, small, "--cache-dir", files / "a-file" / "cache", "-o", out, says=CACHE_ERROR)
    assert not out.exists()


def test_the_library_calls_check_before_encoding(files, no_encoding, tmp_path):
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.pipeline import EncodeOptions, dupes_dataset, encode_dataset, leak_datasets, negatives_dataset
    from capgeo.report.build import ReportOptions, plan_report, write_compare

    data, bad_cache = str(files / "data.jsonl"), EncodeOptions(cache_dir=files / "a-file" / "cache")
    for kind in ("pairs", "examples", "sets"):
        with pytest.raises(CapgeoError, match="--top-k: expected at most 1,000"):
            dupes_dataset(data, kind, top_k=5000)
    with pytest.raises(CapgeoError, match="kind must be one of pairs, examples, sets"):
        dupes_dataset(data, "components")
    with pytest.raises(CapgeoError, match="-k/--negatives: expected at most 1,000"):
        negatives_dataset(data, tmp_path / "n.jsonl", k=5000)
    with pytest.raises(CapgeoError, match="--per-image: expected at least 1"):
        negatives_dataset(data, tmp_path / "n.jsonl", per_image=0)
    for call in (lambda: encode_dataset(data, bad_cache), lambda: dupes_dataset(data, "pairs", bad_cache),
                 lambda: leak_datasets(data, [data], bad_cache),
                 lambda: plan_report(data, bad_cache, report=ReportOptions(truncation=True))):
        with pytest.raises(CapgeoError, match=CACHE_ERROR):
            call()
    with pytest.raises(CapgeoError, match="--batch-size 12: a batch needs"):
        write_compare([data, str(files / "small.jsonl")], tmp_path / "c.html",
                      options=ProfileOptions(batch_sizes=(12,)))


def test_precomputed_vectors_need_no_cache_folder(files, tmp_path):
    """vectors:FILE is never cached, so an unwritable cache folder does not stop the commands."""
    spec, bad = f"vectors:{files / 'v.npy'}", files / "a-file" / "cache"
    for args in (["dupes", files / "data.jsonl", "--top", 2], ["encode", files / "data.jsonl"],
                 ["negatives", files / "data.jsonl", "-o", tmp_path / "n.jsonl"],
                 ["report", files / "data.jsonl", "--no-map", "-o", tmp_path / "r.html"]):
        result = CliRunner().invoke(main, [str(arg) for arg in args] + ["--encoder", spec, "--cache-dir", str(bad)])
        assert result.exit_code == 0, result.output


def test_the_reports_truncation_section_is_capgeo_truncations(files, tmp_path):
    """report --truncation runs the truncation pass of `capgeo truncation` (run_profile with
    TruncationPasses) on the same captions, batches and seed: the same section, timing aside."""
    data, cache = files / "data.jsonl", tmp_path / "cache"
    saved = tmp_path / "r.json"
    made = CliRunner().invoke(main, ["report", str(data), "--truncation", "--no-map", "--no-dupes", "--no-gamma",
                                     "--seed", "3", "--n-batches", "7", "--cache-dir", str(cache),
                                     "--save-profile", str(saved), "-o", str(tmp_path / "r.html")])
    assert made.exit_code == 0, made.output
    alone = CliRunner().invoke(main, ["truncation", str(data), "--seed", "3", "--n-batches", "7",
                                      "--cache-dir", str(cache), "--json"])
    assert alone.exit_code == 0, alone.output

    def section(profile: dict) -> dict:
        return {key: value for key, value in profile["truncation"].items() if key != "elapsed_s"}

    in_report, by_command = section(json.loads(saved.read_text())), section(json.loads(alone.stdout))
    assert in_report["batch_size"] == N_GROUPS and len(in_report["lengths"]) > 1
    assert in_report == by_command
