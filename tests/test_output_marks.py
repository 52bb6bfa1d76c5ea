"""Outputs never replace a file capgeo did not write: each format's mark (docs/errors.md), --force,
the stale temporary files of killed writes, and --fill-missing's check of the groups."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import unit, write_jsonl
from capgeo._atomic import atomic_open, remove_stale_parts
from capgeo.cli import main
from capgeo.paths import written_by_capgeo


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """12 captions of 6 images and their vectors, in the current folder."""
    monkeypatch.chdir(tmp_path)
    ids = [f"c{i}" for i in range(12)]
    write_jsonl(tmp_path / "d.jsonl", ids, [f"g{i // 2}" for i in range(12)], [f"caption {i}" for i in range(12)])
    np.savez(tmp_path / "v.npz", vectors=unit(np.random.default_rng(0).normal(size=(12, 8))), ids=np.array(ids))
    return tmp_path


def refused(result, path: Path, before: bytes, *words) -> None:
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert "--force" in errors[0] and all(word in errors[0] for word in words), errors[0]
    assert path.read_bytes() == before  # the user's file, untouched


USER_FILES = {
    "page.html": b"<!DOCTYPE html>\n<html><head><title>my notes</title></head><body>mine</body></html>\n",
    # JSON lines whose first row names a capgeo schema: only a whole-document parse tells them apart
    "rows.json": b'{"schema": "capgeo.x", "a": 1}\n{"schema": "capgeo.x", "a": 2}\n',
    "drop.txt": b"my ids\n",
    "vectors.npy": b"\x93NUMPY not really\n",
    "rows.jsonl": b'{"mine": 1}\n',
}


@pytest.mark.parametrize("command, output", [
    (["report", "d.jsonl", "--encoder", "vectors:v.npz", "--no-gamma", "--batch-size", "4", "-o"], "page.html"),
    (["info", "d.jsonl", "--json"], "rows.json"),
    (["leak", "d.jsonl", "d.jsonl", "--encoder", "vectors:v.npz", "-o"], "drop.txt"),
    (["encode", "d.jsonl", "--encoder", "vectors:v.npz", "-o"], "vectors.npy"),
    (["negatives", "d.jsonl", "--encoder", "vectors:v.npz", "-o"], "rows.jsonl"),
    (["dupes-sets", "d.jsonl", "--encoder", "vectors:v.npz", "--drop-list"], "drop.txt"),
])
def test_a_users_file_is_refused_and_replaced_only_with_force(workspace, command, output):
    path = workspace / output
    path.write_bytes(USER_FILES[output])
    refused(run(*command, output), path, USER_FILES[output], output)
    result = run(*command, output, "--force")
    assert result.exit_code == 0, result.output
    assert path.read_bytes() != USER_FILES[output]


@pytest.mark.parametrize("command, default", [
    (["report", "d.jsonl", "--encoder", "vectors:v.npz", "--no-gamma", "--batch-size", "4"], "d.html"),
    (["compare", "d.jsonl", "d.jsonl", "--encoder", "vectors:v.npz", "--batch-size", "4"], "compare.html"),
])
def test_a_default_output_name_never_replaces_a_users_file(workspace, command, default):
    path = workspace / default
    path.write_bytes(USER_FILES["page.html"])
    refused(run(*command), path, USER_FILES["page.html"], default, "default output")
    assert run(*command, "--force").exit_code == 0
    assert written_by_capgeo(path)
    result = run(*command)  # capgeo's own page now: a rerun replaces it
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_vector_exports_carry_the_mark_and_a_rerun_replaces_them(workspace, suffix):
    output = workspace / f"out{suffix}"
    for _ in range(2):
        result = run("encode", "d.jsonl", "--encoder", "vectors:v.npz", "-o", output)
        assert result.exit_code == 0, result.output
        assert written_by_capgeo(output)
    # the mark does not hide the vectors: they load back
    result = run("encode", "d.jsonl", "--encoder", f"vectors:{output}", "--json")
    assert result.exit_code == 0, result.output


def test_row_exports_in_parquet_carry_the_mark(workspace):
    for command in (["negatives", "d.jsonl", "--encoder", "vectors:v.npz", "-o", "n.parquet"],
                    ["profile", "d.jsonl", "--encoder", "vectors:v.npz", "--no-gamma", "--batch-size", "4",
                     "--per-caption", "p.parquet"]):
        for _ in range(2):
            result = run(*command)
            assert result.exit_code == 0, result.output
    assert written_by_capgeo(workspace / "n.parquet") and written_by_capgeo(workspace / "p.parquet")


def test_what_counts_as_a_capgeo_output(tmp_path):
    import polars as pl

    def file(name, data):
        path = tmp_path / name
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
        return path

    # JSON: a whole document naming a capgeo schema, wherever its key sits
    assert written_by_capgeo(file("a.json", json.dumps({"schema": "capgeo.dupes/1", "x": [1]})))
    assert written_by_capgeo(file("b.json", json.dumps({"x": [1], "schema": "capgeo.leak/1"})))
    assert not written_by_capgeo(file("c.json", USER_FILES["rows.json"]))
    assert not written_by_capgeo(file("d.json", json.dumps({"schema": "other/1"})))
    assert not written_by_capgeo(file("e.json", json.dumps([{"schema": "capgeo.profile/1"}])))
    # the whole file is parsed, numbers included: two results run together (`cat`, `jq -c`), a cut one
    # or a bad number anywhere is a user's file
    result = json.dumps({"schema": "capgeo.profile/1", "cosines": [0.5, 1e-3, -2], "n": 0}, indent=2)
    result = result.replace('"n": 0', '"n": 1' + "0" * 5000)  # past Python's integer string limit: still JSON
    assert written_by_capgeo(file("e1.json", result))
    assert not written_by_capgeo(file("e2.json", result + "\n" + result))
    assert not written_by_capgeo(file("e3.json", result[:-20]))
    assert not written_by_capgeo(file("e4.json", result.replace("0.001", "0.0.1")))
    assert not written_by_capgeo(file("e5.json", result.replace("-2", "-")))
    # HTML: the generator element in the head, not the word capgeo in the body
    assert not written_by_capgeo(file("f.html", "<!DOCTYPE html><html><body>Made with capgeo</body></html>"))
    from capgeo._atomic import html_page_start

    assert written_by_capgeo(file("g.html", html_page_start("capgeo 0.0.9") + "</head></html>"))
    # Parquet: the key-value metadata
    pl.DataFrame({"a": [1]}).write_parquet(tmp_path / "h.parquet")
    assert not written_by_capgeo(tmp_path / "h.parquet")
    pl.DataFrame({"a": [1]}).write_parquet(tmp_path / "i.parquet", metadata={"capgeo": "capgeo 0.1.0"})
    assert written_by_capgeo(tmp_path / "i.parquet")
    # .npz: the array named capgeo; a user's archive without it is not capgeo's
    np.savez(tmp_path / "j.npz", vectors=np.zeros((2, 2)))
    assert not written_by_capgeo(tmp_path / "j.npz")
    # the formats without room for a mark are never taken for capgeo's
    for name in ("k.txt", "l.csv", "m.jsonl"):
        assert not written_by_capgeo(file(name, "c1\n"))
    assert not written_by_capgeo(tmp_path / "missing.json")


def part_file(folder: Path, output: str, random: str = "abcd1234", age: float = 60.0) -> Path:
    path = folder / f".{output}.{random}.part"
    path.write_text("half a write")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_a_killed_writes_temporary_files_are_removed_by_the_next_write(tmp_path):
    stale = part_file(tmp_path, "out.json")
    recent = part_file(tmp_path, "out.json", "recent00", age=0.0)  # may be a live write taking its lock
    other_output = part_file(tmp_path, "other.json")
    not_ours = tmp_path / ".out.json.mine.part"  # not mkstemp's naming
    not_ours.write_text("mine")
    live = part_file(tmp_path, "out.json", "live0000")
    with open(live) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # a write in progress elsewhere holds its file locked
        with atomic_open(tmp_path / "out.json") as written:
            written.write("{}\n")
    assert not stale.exists()
    assert recent.exists() and other_output.exists() and not_ours.exists() and live.exists()
    assert (tmp_path / "out.json").read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".part") and ".out.json." in p.name) == \
        [".out.json.live0000.part", ".out.json.mine.part", ".out.json.recent00.part"]  # and no new one
    assert remove_stale_parts(tmp_path / "out.json") == [live]  # unlocked now, and old


def test_a_command_rerun_after_a_kill_leaves_no_temporary_file(workspace):
    stale = part_file(workspace, "out.json")
    result = run("info", "d.jsonl", "--json", "out.json")
    assert result.exit_code == 0, result.output
    assert not stale.exists() and written_by_capgeo(workspace / "out.json")


def test_fill_missing_refuses_a_dataset_whose_groups_changed(workspace):
    result = run("profile", "d.jsonl", "--encoder", "vectors:v.npz", "--batch-size", "4", "--n-batches", "4",
                 "--no-gamma", "--json", "p.json")
    assert result.exit_code == 0, result.output
    assert json.loads((workspace / "p.json").read_text())["dataset"]["groups_digest"]
    # the same texts, grouped into other images (as many of them)
    write_jsonl(workspace / "d.jsonl", [f"c{i}" for i in range(12)], [f"g{(i + 1) // 2 % 6}" for i in range(12)],
                [f"caption {i}" for i in range(12)])
    result = run("report", "p.json", "--fill-missing", "-o", "r.html")
    assert result.exit_code == 2, result.output
    assert "groups its captions into images otherwise" in result.output and "Traceback" not in result.output
    assert not (workspace / "r.html").exists()
