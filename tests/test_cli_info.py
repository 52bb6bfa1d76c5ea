"""`capgeo info` / `capgeo datasets`: output, JSON, warnings, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from capgeo.captions import load_captions, summarize_captions
from capgeo.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def runner():
    return CliRunner()


@pytest.mark.parametrize("command", ["info", "datasets"])
def test_table_output(runner, repo_data, command):
    result = runner.invoke(main, [command, str(repo_data / "coco_sample.json")])
    assert result.exit_code == 0, result.output
    assert "coco-list" in result.stdout
    assert "300" in result.stdout and "60" in result.stdout
    assert "test 300" in result.stdout
    assert result.stderr == ""


def test_json_matches_library_summary(runner, repo_data):
    path = repo_data / "docci_sample.jsonlines"
    result = runner.invoke(main, ["info", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"schema": "capgeo.info/1", **summarize_captions(load_captions(path))}


def test_json_to_file_and_options(runner, repo_data, tmp_path):
    out = tmp_path / "info.json"
    result = runner.invoke(main, ["datasets", str(repo_data / "docci_sample.jsonlines"), "--split", "qual_test",
                                  "--limit", "10", "--json", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text(encoding="utf-8"))
    assert summary["n_captions"] == 10 and summary["splits"] == {"qual_test": 10}
    assert f"Wrote {out}" in result.stderr


def test_skipped_rows_warn_on_stderr(runner, tmp_path):
    path = tmp_path / "caps.txt"
    path.write_text("a caption\n   \nanother caption\n", encoding="utf-8")
    result = runner.invoke(main, ["info", str(path), "--json"])
    assert result.exit_code == 0
    assert "Warning: skipped 1 row(s): empty or whitespace-only caption (at line 2)" in result.stderr
    summary = json.loads(result.stdout)  # stdout stays pure JSON
    assert summary["n_captions"] == 2 and summary["skipped"][0]["count"] == 1


def test_markup_in_captions_is_printed_as_text(runner, tmp_path):
    path = tmp_path / "caps.txt"
    path.write_text("[bold]not markup[/bold] here\n", encoding="utf-8")
    result = runner.invoke(main, ["info", str(path)])
    assert result.exit_code == 0, result.output
    assert "[bold]not markup[/bold] here" in result.stdout


@pytest.mark.parametrize("content,expected", [
    ('{"caption": "a"}\n{"caption": }\n', ":2: invalid JSON line"),
    ('{"id": 1, "caption": "a"}\n{"id": 1, "caption": "b"}\n', "duplicate caption id '1' at line 1 and line 2"),
    ("\n", "the file is empty"),
])
def test_bad_file_exits_2_with_one_line(runner, tmp_path, content, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    result = runner.invoke(main, ["info", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and expected in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_option_errors_exit_2(runner, repo_data, tmp_path):
    result = runner.invoke(main, ["info", str(repo_data / "coco_sample.json"), "--split", "train"])
    assert result.exit_code == 2 and "splits present: test (300)" in result.stderr
    result = runner.invoke(main, ["info", str(tmp_path / "missing.json")])
    assert result.exit_code == 2  # click's own check of DATA
    result = runner.invoke(main, ["info", str(repo_data / "coco_sample.json"), "--format", "nonsense"])
    assert result.exit_code == 2


def test_real_subprocess(repo_data, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "capgeo", "info", "data/docci_sample.jsonlines"], cwd=REPO,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "docci" in ok.stdout and "qual_test 100" in ok.stdout
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'[{"caption": "caf\xe9"}]')
    failed = subprocess.run([sys.executable, "-m", "capgeo", "info", str(bad)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2
    assert failed.stderr.count("\n") == 1 and failed.stderr.startswith(f"Error: {bad}: not UTF-8")
    assert "Traceback" not in failed.stderr + failed.stdout
