"""Column options match ignoring case when nothing matches exactly, and say which column they used."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from capgeo.captions import load_captions
from capgeo.captions.tabular import ColumnCaseWarning
from capgeo.cli import main


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def upper_keys(tmp_path):
    rows = [{"Key": f"k{i}", "IMG": f"img{i // 2}", "IIW": f"a caption number {i}", "Other": "x"} for i in range(6)]
    return write_jsonl(tmp_path / "iiw.jsonl", rows)


def test_each_column_option_matches_ignoring_case_and_says_so(upper_keys):
    result = CliRunner().invoke(main, ["info", str(upper_keys), "--text-column", "iiw", "--id-column", "key",
                                       "--group-column", "img"])
    assert result.exit_code == 0, result.output
    for option, given, used in (("--text-column", "iiw", "IIW"), ("--id-column", "key", "Key"),
                                ("--group-column", "img", "IMG")):
        assert f"Note: {option} '{given}': using key '{used}' of {upper_keys}" in result.stderr
    with pytest.warns(ColumnCaseWarning) as told:  # library callers are told too
        captions = load_captions(upper_keys, text_column="iiw", id_column="key", group_column="img")
    assert sorted(str(w.message).split(":")[0] for w in told) == ["--group-column 'img'", "--id-column 'key'",
                                                                  "--text-column 'iiw'"]
    assert captions.texts == [f"a caption number {i}" for i in range(6)]
    assert captions.ids == [f"k{i}" for i in range(6)] and captions.n_groups == 3


def test_captions_column_matches_ignoring_case(tmp_path):
    data = write_jsonl(tmp_path / "lists.jsonl", [{"Image": "a.jpg", "Caps": ["one red bus", "a red bus"]}])
    with pytest.warns(ColumnCaseWarning) as told:
        captions = load_captions(data, captions_column="caps", group_column="image")
    assert len(told) == 2
    assert captions.texts == ["one red bus", "a red bus"] and captions.n_groups == 1


def test_an_exact_match_wins_and_prints_no_note(tmp_path):
    data = write_jsonl(tmp_path / "both.jsonl", [{"text": "lower one", "TEXT": "upper one", "id": "1"}])
    result = CliRunner().invoke(main, ["info", str(data), "--text-column", "TEXT"])
    assert result.exit_code == 0, result.output
    assert "Note:" not in result.stderr
    assert load_captions(data, text_column="TEXT").texts == ["upper one"]


def test_two_columns_equal_ignoring_case_are_an_error(tmp_path):
    data = write_jsonl(tmp_path / "both.jsonl", [{"text": "lower one", "TEXT": "upper one", "id": "1"}])
    result = CliRunner().invoke(main, ["info", str(data), "--text-column", "Text"])
    assert result.exit_code == 2
    assert "Error:" in result.output and "no key 'Text' (--text-column)" in result.output and "TEXT" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("header, expected", [("caption,Caption,image", "first col"),
                                              ("Caption,caption,image", "second col"),
                                              ("Caption,note,image", "first col")])
def test_recognised_columns_prefer_the_exact_name_to_the_last_one_equal_ignoring_case(tmp_path, header, expected):
    """Found automatically, 'caption' beside 'Caption' took whichever came last."""
    path = tmp_path / "two.csv"
    path.write_text(f"{header}\nfirst col,second col,1\nx,y,2\n")
    assert load_captions(path).texts[0] == expected


def test_recognised_columns_equal_ignoring_case_without_an_exact_one_are_an_error(tmp_path):
    path = write_jsonl(tmp_path / "two.jsonl", [{"TEXT": "first", "Text": "second", "IMAGE": "a", "Image": "b"}])
    result = CliRunner().invoke(main, ["info", str(path)])
    assert result.exit_code == 2
    assert ("keys 'TEXT' and 'Text' both match 'text' ignoring case, and none matches exactly; name the one to "
            "use with --text-column") in result.stderr
    result = CliRunner().invoke(main, ["info", str(path), "--text-column", "TEXT"])
    assert result.exit_code == 2 and "'IMAGE' and 'Image' both match 'image'" in result.stderr
    assert load_captions(path, text_column="Text", group_column="IMAGE").texts == ["second"]
