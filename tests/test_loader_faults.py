"""Input that Python's json module refuses with something other than a JSONDecodeError: an
integer longer than 4,300 digits (a ValueError) and JSON nested 100,000 deep (a RecursionError).
Each was a traceback; each is one `Error:` line, exit 2, naming the file and what is wrong."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from capgeo.cli import main

HUGE = "7" * 5000
DEEP = "[" * 100_000 + "]" * 100_000


def _dci(folder):
    complete = folder / "complete"
    complete.mkdir(parents=True)
    (complete / "sa_1.json").write_text(
        '{"extra_caption": "a dog on a lawn", "mask_keys": [' + HUGE + '], "summaries": {"base": ["a dog"]}}')
    return complete


CASES = [
    # (file name, content or builder, command, fragment of the Error line)
    ("ids.jsonl", '{"id": ' + HUGE + ', "caption": "a dog"}\n', "info", "a number of 5,000 digits"),
    ("ids.json", '[{"id": ' + HUGE + ', "caption": "a dog"}]', "info", "a number of 5,000 digits"),
    ("deep.json", DEEP, "info", "nested too deeply"),
    ("cell.csv", 'image,captions\na.jpg,"[' + HUGE + ']"\n', "info", "a number of 5,000 digits"),
    ("deep-cell.csv", 'image,captions\na.jpg,"[' + DEEP + ']"\n', "info", "nested too deeply"),
    ("first-cell.csv", 'image,caption\na.jpg,"' + DEEP + '"\n', "info --captions-column caption", "nested too deeply"),
    ("dci", _dci, "info", "a number of 5,000 digits"),
]


@pytest.mark.parametrize("name, content, command, fragment", CASES, ids=[case[0] for case in CASES])
def test_a_huge_integer_or_deep_nesting_is_one_error_line(tmp_path, monkeypatch, name, content, command, fragment):
    monkeypatch.chdir(tmp_path)
    if callable(content):
        target = content(tmp_path / name)
    else:
        target = tmp_path / name
        target.write_text(content)
    before = sorted(path.name for path in tmp_path.rglob("*"))
    result = CliRunner().invoke(main, [*command.split(), str(target)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert fragment in errors[0] and target.name in errors[0], errors[0]
    assert sorted(path.name for path in tmp_path.rglob("*")) == before


def test_a_model_config_nested_too_deeply_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text('{"caption": "a dog"}\n{"caption": "a cat"}\n')
    (tmp_path / "cfg.json").write_text(DEEP)
    (tmp_path / "ckpt.pt").write_bytes(b"not read")
    result = CliRunner().invoke(main, ["encode", "d.jsonl", "--encoder", "cfg.json@ckpt.pt", "--no-cache"])
    assert result.exit_code == 2, result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert "cfg.json" in error and "nested too deeply" in error


def test_the_json_helper_agrees_with_json_on_what_it_reads():
    from capgeo import _json

    for text in ('{"a": [1, 2.5, "x", null]}', "1" * 4300, "[" * 500 + "]" * 500):
        assert _json.loads(text) == json.loads(text)
    with pytest.raises(json.JSONDecodeError) as caught:
        _json.loads('{"a": 1, "b": ' + HUGE + "}")
    assert caught.value.pos == len('{"a": 1, "b": ')
