"""Bad input: every case ends in a one-line DataError naming where and what, or a documented skip."""

import json

import pytest

from capgeo.captions import load_captions
from capgeo.errors import CapgeoError, DataError


def _file(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _error(path, **options) -> str:
    with pytest.raises(DataError) as caught:
        load_captions(path, **options)
    message = str(caught.value)
    assert "\n" not in message  # one line
    assert isinstance(caught.value, CapgeoError) and caught.value.exit_code == 2
    return message


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = _file(tmp_path, "caps.jsonl", '{"caption": "a"}\n\n{"caption": "b",}\n')
    message = _error(path)
    assert message.startswith(f"{path}:3: invalid JSON line")


def test_malformed_json_line_in_docci_file(tmp_path):
    good = '{"example_id": "test_00000", "split": "test", "image_file": "test_00000.jpg", "description": "x"}'
    path = _file(tmp_path, "docci_descriptions.jsonlines", good + "\n" + good[:40] + "\n")
    assert _error(path).startswith(f"{path}:2: invalid JSON line")


def test_invalid_json_file_gives_line_and_column(tmp_path):
    path = _file(tmp_path, "caps.json", '[\n  {"caption": "a"},\n  {"caption": }\n]\n')
    line, column = 3, 15  # the '}' where a value should be
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads(path.read_text())
    assert (reference.value.lineno, reference.value.colno) == (line, column)
    assert _error(path).startswith(f"{path}:{line}:{column}: invalid JSON")


@pytest.mark.parametrize("name,prefix", [("caps.jsonl", b'{"caption": "ok"}\n{"caption": "caf'),
                                          ("caps.csv", b"caption\nok\ncaf"),
                                          ("caps.txt", b"ok\ncaf")])
def test_non_utf8_names_byte_offset_and_line(tmp_path, name, prefix):
    path = _file(tmp_path, name, prefix + b'\xe9"}\n')
    message = _error(path)
    assert f"{path}: not UTF-8" in message
    expected_line = prefix.count(b"\n") + 1
    assert f"offset {len(prefix)} (line {expected_line})" in message


def test_non_utf8_urban1k_file_is_named(tmp_path):
    (tmp_path / "1.txt").write_text("fine", encoding="utf-8")
    (tmp_path / "2.txt").write_bytes(b"caf\xe9")
    message = _error(tmp_path)
    assert "2.txt: not UTF-8" in message and "offset 3" in message


def test_empty_and_whitespace_captions_are_skipped_and_counted(tmp_path):
    rows = [{"id": "a", "caption": "kept"}, {"id": "b", "caption": "   "}, {"id": "c", "caption": ""},
            {"id": "d", "caption": None}, {"id": "e", "caption": "\t also kept \n"}, {"id": "f"}]
    path = _file(tmp_path, "caps.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    captions = load_captions(path)
    assert captions.ids == ["a", "e"]
    assert captions.texts == ["kept", "also kept"]
    skipped = {item.reason: item for item in captions.skipped}
    assert skipped["empty or whitespace-only caption"].count == 2
    assert skipped["empty or whitespace-only caption"].examples == ("line 2", "line 3")
    assert skipped["missing caption (null or absent)"].count == 2
    assert skipped["missing caption (null or absent)"].examples == ("line 4", "line 6")


def test_skipped_in_multi_caption_rows_say_which_caption(tmp_path):
    path = _file(tmp_path, "coco.json", json.dumps([{"image_name": "a.jpg", "captions": ["x", " "]}]))
    captions = load_captions(path)
    assert captions.skipped[0].examples == ("record 1, caption 2",)


def test_duplicate_ids_stop_naming_both_occurrences(tmp_path):
    path = _file(tmp_path, "caps.jsonl", '{"id": "x", "caption": "a"}\n{"id": "y", "caption": "b"}\n'
                                         '{"id": "x", "caption": "c"}\n')
    message = _error(path)
    assert "duplicate caption id 'x' at line 1 and line 3" in message


def test_duplicate_filenames_in_docci_json(tmp_path):
    path = _file(tmp_path, "docci_test.json", json.dumps([
        {"filename": "a/test_00001.jpg", "caption": "x"}, {"filename": "b/test_00001.jpg", "caption": "y"}]))
    assert "duplicate caption id 'test_00001' at record 1 and record 2" in _error(path)


@pytest.mark.parametrize("content", ["", "   \n", "[]"])
def test_empty_files(tmp_path, content):
    name = "caps.json" if content == "[]" else "caps.jsonl"
    path = _file(tmp_path, name, content)
    message = _error(path)
    assert str(path) in message and "empty" in message


def test_all_captions_empty_is_an_error(tmp_path):
    path = _file(tmp_path, "caps.txt", "  \n\n\t\n")
    message = _error(path)
    assert "no captions to use" in message and "skipped 3: empty or whitespace-only caption" in message


def test_split_without_split_field_lists_fields(tmp_path):
    path = _file(tmp_path, "caps.jsonl", '{"id": "1", "caption": "a", "image": "i"}\n')
    message = _error(path, split="test")
    assert "has no split field" in message and "id, caption, image" in message


def test_split_matching_nothing_lists_splits(tmp_path):
    rows = [{"caption": "a", "split": "train"}, {"caption": "b", "split": "train"}, {"caption": "c", "split": "val"}]
    path = _file(tmp_path, "caps.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    message = _error(path, split="test")
    assert "no rows in split 'test'" in message and "train (2), val (1)" in message


def test_undetectable_file_says_what_was_expected(tmp_path):
    path = _file(tmp_path, "caps.xyz", "hello\n")
    message = _error(path)
    assert str(path) in message and "cannot tell the format" in message and "--format" in message


def test_missing_named_column_lists_columns(tmp_path):
    path = _file(tmp_path, "caps.csv", "url,alt\nhttp://x,a cat\n")
    message = _error(path, text_column="caption")
    assert "no column 'caption' (--text-column)" in message and "columns found: url, alt" in message
    message = _error(path, text_column="alt", group_column="image")
    assert "no column 'image' (--group-column)" in message


def test_no_recognised_caption_column_lists_columns(tmp_path):
    path = _file(tmp_path, "caps.jsonl", '{"url": "http://x", "alt": "a cat"}\n')
    message = _error(path)
    assert "found no caption key" in message and "keys found: url, alt" in message
    assert load_captions(path, text_column="alt").texts == ["a cat"]


def test_wrong_format_override_says_what_was_expected(tmp_path):
    path = _file(tmp_path, "caps.json", json.dumps([{"caption": "a"}]))
    assert "COCO captions need an object with an 'annotations' list" in _error(path, format="coco")
    assert "Karpathy layout needs an object with an 'images' list" in _error(path, format="karpathy")
    assert "expected a 'filename' key; found keys: caption" in _error(path, format="docci-json")
    assert "reads a folder, but this is a file" in _error(path, format="urban1k")


def test_non_text_caption_is_an_error(tmp_path):
    path = _file(tmp_path, "caps.jsonl", '{"caption": "ok"}\n{"caption": {"en": "nested"}}\n')
    assert "line 2: caption should be text, found dict" in _error(path)


def test_broken_csv_row_names_line(tmp_path):
    path = _file(tmp_path, "caps.csv", 'id,caption\n1,"fine"\n2,unquoted, comma\n')
    assert _error(path).startswith(f"{path}:3: 3 fields where the header has 2")
    path = _file(tmp_path, "open.csv", 'id,caption\n1,"never closed\n')
    assert "cannot read as CSV" in _error(path)


def test_bad_parquet(tmp_path):
    path = _file(tmp_path, "caps.parquet", b"PAR1 not really")
    assert "cannot read as Parquet" in _error(path)


def test_missing_path(tmp_path):
    assert "no such file or folder" in _error(tmp_path / "nope.json")


def test_dci_file_without_extra_caption(tmp_path):
    (tmp_path / "sa_1.json").write_text(json.dumps({"short_caption": "x"}), encoding="utf-8")
    message = _error(tmp_path)
    assert "sa_1.json: DCI annotation needs an 'extra_caption' key" in message and "short_caption" in message


def test_csv_rows_are_named_by_their_line_after_multiline_captions_and_blank_lines(tmp_path):
    # a quoted caption over three lines and a blank line: rows and lines part ways
    body = 'image,caption\na.jpg,"one\ntwo\nthree"\n\nb.jpg,fine\nc.jpg,"   "\nd.jpg,ok\n'
    captions = load_captions(_file(tmp_path, "caps.csv", body))
    assert captions.texts == ["one\ntwo\nthree", "fine", "ok"]
    assert [item.examples for item in captions.skipped] == [("line 7",)]
    # without an id or group column the ids are the line numbers (the line a row starts on)
    captions = load_captions(_file(tmp_path, "plain.csv", 'caption\n"one\ntwo"\n\nfine\n'))
    assert captions.ids == ["2", "5"]


def test_csv_first_problem_in_file_order_is_reported(tmp_path):
    # a row of the wrong width (line 4, after a two-line caption) before a broken quote (line 6)
    body = 'id,caption\n1,"a\nb"\n2,too,wide\n3,fine\n4,"never closed\n'
    path = _file(tmp_path, "caps.csv", body)
    assert _error(path).startswith(f"{path}:4: 3 fields where the header has 2")
    path = _file(tmp_path, "quote.csv", 'id,caption\n1,"a\nb"\n2,fine\n3,"x"y\n')
    assert _error(path).startswith(f"{path}:5: cannot read as CSV")
    path = _file(tmp_path, "header.csv", 'id,"cap\ntion\n')
    assert "cannot read as CSV" in _error(path)


def test_csv_line_numbers_are_read_only_when_needed(tmp_path, monkeypatch):
    from capgeo.captions import tabular

    path = _file(tmp_path, "caps.csv", "image,caption\n" + "".join(f"i{row},caption {row}\n" for row in range(50)))
    monkeypatch.setattr(tabular._LineNumbers, "_numbers", lambda self: pytest.fail("line numbers were read"))
    assert len(load_captions(path)) == 50


@pytest.mark.parametrize("name, content, where", [
    ("s.jsonl", '{"id":"a","caption":"bad \\ud800 escape"}\n{"id":"b","caption":"a dog"}\n', "line 1: the caption"),
    ("s2.jsonl", '{"id":"a","caption":"a cat"}\n{"id":"b\\udc00","caption":"a dog"}\n', "line 2: the id"),
    ("s.json", '[{"image":"x\\udc00","caption":"a"},{"image":"y","caption":"b"}]', "record 1: the group"),
    ("s3.jsonl", '{"caption":"a cat","split":"test"}\n{"caption":"a dog","split":"tr\\udc00"}\n', "line 2: the split"),
])
def test_an_unpaired_surrogate_escape_is_named_not_a_traceback(tmp_path, name, content, where):
    message = _error(_file(tmp_path, name, content))
    assert f"{name}: {where} holds" in message and "surrogate" in message


def test_a_list_of_captions_with_one_stray_item_names_that_item(tmp_path):
    """["a cat", "a dog", 5] blamed record 1 ("expected an object, found a string")."""
    message = _error(_file(tmp_path, "m.json", '["a cat", "a dog", 5]'))
    assert "record 3: expected a caption (text) or null in this list of captions, found a number" in message
    message = _error(_file(tmp_path, "o.json", '[{"caption": "a cat"}, "a dog", {"caption": "x"}]'))
    assert "record 2: expected an object, found a string" in message


def test_a_folder_of_txt_files_beside_another_caption_file_is_ambiguous(tmp_path):
    """It was read as Urban-1K and the .jsonl silently ignored; hidden files and a README still do not count."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "1.txt").write_text("a cat on a mat")
    (folder / "2.txt").write_text("a dog in the snow")
    (folder / ".DS_Store").write_bytes(b"\0")
    (folder / "README.md").write_text("captions")
    assert load_captions(folder).format == "urban1k"
    (folder / "more.jsonl").write_text('{"caption": "a bird"}\n')
    message = _error(folder)
    assert "cannot tell the folder's format" in message and "more.jsonl" in message
    assert load_captions(folder, format="urban1k").texts == ["a cat on a mat", "a dog in the snow"]


def test_a_dci_caption_that_is_a_list_does_not_suggest_a_column_option(tmp_path):
    """The hint '--captions-column' was given for DCI, whose layout the column options do not apply to."""
    folder = tmp_path / "dci"
    folder.mkdir()
    (folder / "sa_1.json").write_text(json.dumps({"extra_caption": ["a street", "at night"]}))
    message = _error(folder, format="dci")
    assert "caption should be text, found list" in message and "--captions-column" not in message
    generic = _error(_file(tmp_path, "l.jsonl", '{"caption": "a"}\n{"caption": ["b", "c"]}\n'))
    assert "--captions-column" in generic
