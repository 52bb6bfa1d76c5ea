"""Loader edge cases a user's file hits: groups of list rows, JSON-list cells in CSV, line numbers of
multi-line CSV rows, blank splits, empty caption lists in benchmark layouts, dangling links, compressed
files, JSON lines saved as .json, CR-only line ends, odd column names."""

import json

import pytest

from capgeo.captions import load_captions
from test_captions_errors import _error  # a one-line DataError, exit status 2


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("name", "text", "line"), [
    ("null_group.jsonl", '{"image": "a.jpg", "captions": ["red car", "car, red"]}\n'
                         '{"image": null, "captions": ["blue boat", "boat, blue"]}\n', "2"),
    ("missing_group.jsonl", '{"image": "a.jpg", "captions": ["red car", "car, red"]}\n'
                            '{"captions": ["blue boat", "boat, blue"]}\n', "2"),
    ("empty_group.csv", 'image,captions\na.jpg,"[""red car"", ""car, red""]"\n,"[""blue boat"", ""boat, blue""]"\n',
     "3"),
])
def test_captions_of_one_list_row_share_an_image_when_its_group_is_missing(tmp_path, name, text, line):
    captions = load_captions(_write(tmp_path / name, text))
    groups = captions.groups
    assert groups[0] == groups[1] == "a.jpg"
    # the boat captions are positives of each other (one image), not negatives
    assert groups[2] == groups[3] != "a.jpg"
    assert groups[2] == line  # the row's line number names it
    assert captions.n_groups == 2


def test_a_made_group_never_equals_a_given_one(tmp_path):
    # row 2 has no image; another row's image is literally named "2"
    path = _write(tmp_path / "clash.jsonl", '{"image": "2", "captions": ["x one", "x two"]}\n'
                                            '{"image": null, "captions": ["y one", "y two"]}\n')
    captions = load_captions(path)
    assert captions.groups == ["2", "2", "2 (no group)", "2 (no group)"]


def test_coco_list_record_without_image_name_is_one_image(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"image_name": "a.jpg", "captions": ["x", "y"]}, {"captions": ["u", "v"]}]))
    captions = load_captions(path)
    assert captions.format == "coco-list"
    assert captions.groups[2] == captions.groups[3] not in ("a.jpg", None)


@pytest.mark.parametrize("empty", [[], None])
def test_empty_or_null_caption_lists_are_counted_as_skipped(tmp_path, empty):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"image_name": "a.jpg", "captions": ["x", "y"]},
                                {"image_name": "b.jpg", "captions": empty}]))
    captions = load_captions(path)
    assert captions.texts == ["x", "y"]
    [skipped] = captions.skipped
    assert skipped.count == 1 and skipped.examples == ("record 2, caption 1",)


def test_karpathy_image_without_sentences_is_counted_as_skipped(tmp_path):
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps({"images": [
        {"filename": "a.jpg", "split": "test", "sentences": [{"raw": "a cat", "sentid": 1}]},
        {"filename": "b.jpg", "split": "test", "sentences": []}]}))
    captions = load_captions(path)
    assert captions.format == "karpathy" and captions.texts == ["a cat"]
    [skipped] = captions.skipped
    assert skipped.count == 1 and skipped.examples == ("images[1].sentences[0]",)


def test_csv_caption_column_of_json_lists_is_a_list_of_captions(tmp_path):
    csv_file = _write(tmp_path / "lists.csv", 'image,caption\nx,"[""a cat"", ""a dog""]"\n')
    jsonl_file = _write(tmp_path / "lists.jsonl", '{"image": "x", "caption": ["a cat", "a dog"]}\n')
    from_csv, from_jsonl = load_captions(csv_file), load_captions(jsonl_file)
    assert from_csv.texts == from_jsonl.texts == ["a cat", "a dog"]
    assert from_csv.groups == ["x", "x"]


def test_csv_caption_that_merely_starts_with_a_bracket_stays_a_caption(tmp_path):
    path = _write(tmp_path / "caps.csv", 'caption\n[photo] a cat\n"[1] a dog, sitting"\n')
    assert load_captions(path).texts == ["[photo] a cat", "[1] a dog, sitting"]


def test_csv_ids_and_errors_name_the_line_a_row_starts_on(tmp_path):
    multi = _write(tmp_path / "multi.csv", 'caption\n"first line\nsecond line"\nthird\n')
    assert load_captions(multi).ids == ["2", "4"]
    rows = ["id,caption"] + [f"{i},caption {i}" for i in range(1, 50)]
    rows[3] = '3,"an unclosed quote'
    unclosed = _write(tmp_path / "unclosed.csv", "\n".join(rows) + "\n")
    message = _error(unclosed)
    assert message.startswith(f"{unclosed}:4: cannot read as CSV") and "never closed" in message
    wide = _write(tmp_path / "wide.csv", 'id,caption\n1,"a\nb"\n2,c,d\n')
    assert _error(wide).startswith(f"{wide}:4: 3 fields")


def test_blank_split_cell_is_no_split(tmp_path):
    path = _write(tmp_path / "split.csv", "caption,split\na,test\nb,\nc,\n")
    captions = load_captions(path)
    assert captions.table["split"].to_list() == ["test", None, None]
    assert "splits present: (none) (2), test (1)" in _error(path, split="val")


def test_dangling_link_in_a_folder_is_an_error(tmp_path):
    folder = tmp_path / "urban"
    folder.mkdir()
    (folder / "1.txt").write_text("one")
    (folder / "2.txt").write_text("two")
    (folder / "3.txt").symlink_to(tmp_path / "missing.txt")
    message = _error(folder)
    assert "3.txt: a symbolic link to a missing file" in message


def test_a_zip_archive_says_so(tmp_path):
    # compressed streams are read (tests/test_captions_compressed.py); an archive of files is not one
    import zipfile

    path = tmp_path / "caps.jsonl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("caps.jsonl", '{"caption": "a"}\n' * 100)
    assert "zip-compressed; decompress it first" in _error(path)


def test_json_lines_saved_as_json_gets_a_hint(tmp_path):
    path = _write(tmp_path / "caps.json", '{"caption": "a"}\n{"caption": "b"}\n')
    message = _error(path)
    assert message.startswith(f"{path}:2:1: invalid JSON: Extra data") and "--format jsonl" in message
    # a broken JSON document without that shape gets no such hint
    assert "jsonl" not in _error(_write(tmp_path / "broken.json", '[{"caption": "a"},\n{"caption": }]\n'))


def test_cr_only_line_ends_split_text_files(tmp_path):
    path = tmp_path / "caps.txt"
    path.write_bytes(b"a cat\ra dog\ra bird\r")
    assert load_captions(path).texts == ["a cat", "a dog", "a bird"]
    # a line end converted twice (\r\r\n) is one line end: ids stay the line numbers an editor shows
    twice = tmp_path / "twice.txt"
    twice.write_bytes(b"a cat\r\r\na dog\r\r\n")
    captions = load_captions(twice)
    assert captions.texts == ["a cat", "a dog"] and captions.ids == ["1", "2"] and not captions.skipped
    cr_json = _write(tmp_path / "cr.json", '{"caption": "a"}\r{"caption": "b"}\r')
    assert "--format jsonl" in _error(cr_json)


def test_column_listing_quotes_names_with_spaces(tmp_path):
    path = _write(tmp_path / "spaced.csv", "id, caption\n1, a cat\n")
    assert "columns found: id, ' caption'" in _error(path, text_column="caption")


def test_coco_file_read_as_json_by_naming_a_column(tmp_path):
    path = tmp_path / "captions_val.json"
    path.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.jpg"}],
                                "annotations": [{"image_id": 1, "id": 7, "caption": "a cat"}]}))
    captions = load_captions(path, id_column="id")
    assert captions.format == "json" and captions.ids == ["7"] and captions.texts == ["a cat"]


@pytest.mark.parametrize(("data", "place"), [
    ({"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": {"x": 1}, "id": 1, "caption": "x"}]},
     "annotations[0].image_id"),
    ({"images": [{"id": [1], "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "id": 1, "caption": "x"}]},
     "images[0].id"),
])
def test_coco_image_id_that_is_not_a_value_is_one_line(tmp_path, data, place):
    path = tmp_path / "captions_val.json"
    path.write_text(json.dumps(data))
    assert f"{place} is a" in _error(path)


def test_benchmark_layout_errors_do_not_advise_column_options(tmp_path):
    folder = tmp_path / "dci"
    folder.mkdir()
    (folder / "sa_1.json").write_text(json.dumps({"extra_caption": 5}))
    message = _error(folder)
    assert "caption should be text" in message and "--text-column" not in message


def test_a_folder_holding_one_non_dci_json_file_says_to_pass_the_file(tmp_path):
    folder = tmp_path / "coco"
    folder.mkdir()
    (folder / "captions.json").write_text(json.dumps([{"image_name": "a.jpg", "captions": ["a cat", "a dog"]}]))
    message = _error(folder)
    assert "is read as DCI annotations, but captions.json is a JSON dataset" in message and "pass the file itself" in message
    assert load_captions(folder / "captions.json").texts == ["a cat", "a dog"]


@pytest.mark.parametrize("option", ["text_column", "captions_column", "id_column", "group_column"])
def test_an_empty_column_name_is_one_error_for_every_column_option(tmp_path, option):
    path = _write(tmp_path / "caps.jsonl", '{"caption": "a cat", "image": "x"}\n')
    assert "an empty column name" in _error(path, **{option: ""})
