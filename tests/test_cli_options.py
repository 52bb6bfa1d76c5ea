"""The options every command shares: comma-separated numbers and the reproduce command."""

from __future__ import annotations

import json
import shlex

import click
import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main
from capgeo.cli.options import comma_separated_floats


def test_comma_separated_floats_parses_and_rejects():
    assert comma_separated_floats(None, None, "0.7, 0.8,0.9") == (0.7, 0.8, 0.9)
    assert comma_separated_floats(None, None, None) is None
    with pytest.raises(click.BadParameter, match="comma-separated numbers"):
        comma_separated_floats(None, None, "0.7,high")


def test_the_recorded_command_reproduces_the_run(repo_data, tmp_path):
    """provenance.command, parsed again, gives the same profile (defaults left out, parsed values rewritten)."""
    vectors = np.random.default_rng(1).normal(size=(300, 8)).astype(np.float32)
    np.save(tmp_path / "v.npy", vectors)
    args = ["profile", str(repo_data / "coco_sample.json"), "--encoder", f"vectors:{tmp_path / 'v.npy'}",
            "--batch-size", "8", "--batch-size", "16", "--buckets", "0.1,0.3", "--seed", "5", "--no-gamma",
            "--n-batches", "4", "--json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    profile = json.loads(first.stdout)
    command = profile["provenance"]["command"]
    assert command.startswith("capgeo profile ") and "--seed 5" in command and "--buckets 0.1,0.3" in command
    assert "--top-k" not in command  # a default is not repeated
    again = CliRunner().invoke(main, shlex.split(command)[1:])
    assert again.exit_code == 0, again.output
    replay = json.loads(again.stdout)
    assert replay["batches"] == profile["batches"] and replay["pairwise"] == profile["pairwise"]


def test_an_output_that_cannot_be_written_fails_before_any_work(tmp_path, repo_data):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for args in (["encode", str(repo_data / "coco_sample.json"), "-o", str(blocker / "v.npy")],
                 ["profile", str(repo_data / "coco_sample.json"), "--json", str(blocker / "p.json")],
                 ["report", str(repo_data / "coco_sample.json"), "-o", str(tmp_path)]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert ("cannot write" in result.output or "is a directory" in result.output), result.output
        assert "Traceback" not in result.output
    assert blocker.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_atomic_write_into_an_impossible_place_is_a_capgeo_error(tmp_path):
    from capgeo._atomic import atomic_open
    from capgeo.errors import CapgeoError

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(CapgeoError, match="cannot write .*a-file/out.json"):
        with atomic_open(blocker / "out.json") as handle:
            handle.write("{}")


def test_an_output_folder_that_refuses_files_is_found_before_the_work(tmp_path, monkeypatch):
    """Permissions do not tell it all (root passes os.access on a read-only mount or /sys): the
    check creates and removes a file there, and leaves nothing behind when it can."""
    import errno
    import tempfile

    from capgeo import _atomic
    from capgeo.errors import CapgeoError

    _atomic.check_writable(tmp_path / "out.json")
    assert list(tmp_path.iterdir()) == []

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(CapgeoError, match="cannot write .*out.json: Read-only file system; that file system is "
                                          "read-only"):
        _atomic.check_writable(tmp_path / "out.json")


def test_an_unwritable_cache_names_the_folder_and_the_way_out(tmp_path, repo_data):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    from capgeo.encoders.cache import CacheEntry
    from capgeo.errors import CapgeoError

    entry = CacheEntry(blocker, "key", 300, 4)
    with pytest.raises(CapgeoError, match="cannot write the embedding cache .*--cache-dir FOLDER or --no-cache"):
        entry.save_token_counts(np.arange(300))


def test_report_rejects_an_impossible_batch_size_before_encoding(repo_data, monkeypatch):
    import capgeo.encoders

    def no_encoding(*args, **kwargs):
        raise AssertionError("encoded before checking --batch-size")

    monkeypatch.setattr(capgeo.encoders, "embed", no_encoding)
    result = CliRunner().invoke(main, ["report", str(repo_data / "coco_sample.json"), "--batch-size", "500",
                                       "-o", "unused.html"])
    assert result.exit_code == 2 and "--batch-size 500: a batch needs captions of B different images" in result.output


def test_gamma_default_batch_fits_a_small_dataset(repo_data, tmp_path):
    vectors = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    np.save(tmp_path / "v.npy", vectors)
    result = CliRunner().invoke(main, ["gamma", str(repo_data / "coco_sample.json"), "--encoder",
                                       f"vectors:{tmp_path / 'v.npy'}", "--n-batches", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert [entry["batch_size"] for entry in json.loads(result.stdout)["gamma"]["batches"]] == [60]
    assert "the dataset has only 60 images" in result.stderr


@pytest.mark.parametrize("command", ["info", "profile", "dupes", "gamma", "report", "compare"])
def test_every_command_warns_about_rows_it_skipped(tmp_path, command):
    data = tmp_path / "captions.jsonl"
    data.write_text("".join(json.dumps({"caption": text}) + "\n" for text in ["a dog", "  ", "a cat", "a cow", "a pig"]))
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32))
    encoder = ["--encoder", f"vectors:{tmp_path / 'v.npy'}"]
    arguments = {
        "info": [str(data)],
        "profile": [str(data), *encoder, "--n-batches", "2", "--json", str(tmp_path / "p.json")],
        "dupes": [str(data), *encoder],
        "gamma": [str(data), *encoder, "--n-batches", "2"],
        "report": [str(data), *encoder, "--n-batches", "2", "-o", str(tmp_path / "r.html")],
        "compare": [str(data), *encoder, *encoder, "--n-batches", "2", "-o", str(tmp_path / "c.html")],
    }[command]
    result = CliRunner().invoke(main, [command, *arguments])
    assert result.exit_code == 0, result.output
    # once: compare reads a dataset once for all its --encoder
    assert result.stderr.count("Warning: skipped 1 row(s): empty or whitespace-only caption (at line 2)") == 1
    if command == "profile":
        assert json.loads((tmp_path / "p.json").read_text())["dataset"]["n_captions"] == 4


def test_dot_dot_after_a_missing_folder_is_resolved_by_name(tmp_path, monkeypatch):
    """`--json missing/../out.json` created the folder `missing` on the way (the file system resolves
    `missing/..` only once it exists); a path up past the root reached a folder no check had seen."""
    from capgeo._atomic import atomic_open, check_writable

    monkeypatch.chdir(tmp_path)
    check_writable("missing/../out.json")
    with atomic_open("missing/../out.json") as handle:
        handle.write("{}")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.json"]
