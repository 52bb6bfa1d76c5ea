"""Generic files: JSONL, JSON, CSV, TSV, Parquet, plain text; recognised and explicit columns."""

import json

import polars as pl
import pytest

from capgeo.captions import load_captions
from capgeo.errors import DataError

ROWS = [
    {"id": "c1", "image": "a.jpg", "caption": "A cat on a mat.", "split": "train", "note": "x"},
    {"id": "c2", "image": "a.jpg", "caption": "  A cat, sleeping.  ", "split": "train", "note": "y"},
    {"id": "c3", "image": "b.jpg", "caption": "A dog in the snow.", "split": "test", "note": "z"},
]


def _write(tmp_path, format, rows=ROWS, name=None):
    path = tmp_path / (name or f"captions.{format}")
    frame = pl.DataFrame(rows)
    if format == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif format == "json":
        path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    elif format == "csv":
        frame.write_csv(path)
    elif format == "tsv":
        frame.write_csv(path, separator="\t", quote_style="never")
    elif format == "parquet":
        frame.write_parquet(path)
    return path


@pytest.mark.parametrize("format", ["jsonl", "json", "csv", "tsv", "parquet"])
def test_recognised_columns(tmp_path, format):
    captions = load_captions(_write(tmp_path, format))
    assert captions.format == format
    assert captions.ids == ["c1", "c2", "c3"]
    assert captions.groups == ["a.jpg", "a.jpg", "b.jpg"]
    assert captions.texts == ["A cat on a mat.", "A cat, sleeping.", "A dog in the snow."]  # stripped
    assert captions.table["split"].to_list() == ["train", "train", "test"]
    assert captions.n_groups == 2
    assert load_captions(_write(tmp_path, format), split="test").ids == ["c3"]


@pytest.mark.parametrize("format", ["jsonl", "json", "csv", "tsv", "parquet"])
def test_explicit_columns(tmp_path, format):
    rows = [{"uid": f"u{i}", "img_ref": f"{i // 2}.png", "long_text": f"Caption number {i}.", "caption": "decoy"}
            for i in range(4)]
    path = _write(tmp_path, format, rows)
    captions = load_captions(path, text_column="long_text", id_column="uid", group_column="img_ref")
    assert captions.ids == ["u0", "u1", "u2", "u3"]
    assert captions.groups == ["0.png", "0.png", "1.png", "1.png"]
    assert captions.texts == [f"Caption number {i}." for i in range(4)]
    # without options the recognised name wins
    assert load_captions(path).texts == ["decoy"] * 4


def test_missing_id_and_group_use_line_numbers(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text('{"text": "first"}\n\n{"text": "second"}\n', encoding="utf-8")
    captions = load_captions(path)
    assert captions.ids == ["1", "3"]  # line numbers, blank line kept in the count
    assert captions.groups == captions.ids


def test_group_without_id_numbers_captions_per_group(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("image_id,caption\n7,one\n8,two\n7,three\n", encoding="utf-8")
    captions = load_captions(path)
    assert captions.ids == ["7#0", "8#0", "7#1"]
    assert captions.groups == ["7", "8", "7"]


@pytest.mark.parametrize("format", ["jsonl", "json", "parquet"])
def test_list_of_captions_column(tmp_path, format):
    rows = [{"image": "a.jpg", "refs": ["one", "two", "three"]}, {"image": "b.jpg", "refs": ["four"]}]
    path = _write(tmp_path, format, rows)
    captions = load_captions(path, captions_column="refs")
    assert captions.texts == ["one", "two", "three", "four"]
    assert captions.groups == ["a.jpg"] * 3 + ["b.jpg"]
    assert captions.ids == ["a.jpg#0", "a.jpg#1", "a.jpg#2", "b.jpg#0"]


def test_list_of_captions_recognised_and_in_csv(tmp_path):
    jsonl = tmp_path / "multi.jsonl"
    jsonl.write_text(json.dumps({"id": "x", "captions": ["a", "b"]}) + "\n", encoding="utf-8")
    captions = load_captions(jsonl)
    assert captions.texts == ["a", "b"] and captions.groups == ["x", "x"]
    csv = tmp_path / "multi.csv"
    pl.DataFrame({"image": ["p.jpg"], "captions": [json.dumps(["first, with comma", "second"])]}).write_csv(csv)
    captions = load_captions(csv)
    assert captions.texts == ["first, with comma", "second"] and captions.n_groups == 1


def test_json_object_of_columns_and_mapping(tmp_path):
    columns = tmp_path / "columns.json"
    columns.write_text(json.dumps({"caption": ["a", "b"], "image": ["i1", "i2"]}), encoding="utf-8")
    captions = load_captions(columns)
    assert captions.texts == ["a", "b"] and captions.groups == ["i1", "i2"]
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"i1.jpg": ["a", "b"], "i2.jpg": "c"}), encoding="utf-8")
    captions = load_captions(mapping)
    assert captions.texts == ["a", "b", "c"]
    assert captions.groups == ["i1.jpg", "i1.jpg", "i2.jpg"]
    # a null caption in a mapping is skipped and counted (it made the whole file "not caption records")
    mapping.write_text(json.dumps({"a.jpg": "a cat", "b.jpg": None, "c.jpg": ["a dog", "a puppy"]}), encoding="utf-8")
    captions = load_captions(mapping)
    assert captions.texts == ["a cat", "a dog", "a puppy"] and captions.groups == ["a.jpg", "c.jpg", "c.jpg"]
    assert [skip.count for skip in captions.skipped] == [1]
    # and a null inside a caption list (it refused the whole file)
    mapping.write_text(json.dumps({"a.jpg": ["a dog", None], "c.jpg": "a cat"}), encoding="utf-8")
    captions = load_captions(mapping)
    assert captions.texts == ["a dog", "a cat"] and [skip.count for skip in captions.skipped] == [1]
    # one record with a null caption is a record, not a mapping whose image name becomes a caption
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"image": "dog_001.jpg", "caption": None}), encoding="utf-8")
    with pytest.raises(DataError, match="no captions to use"):
        load_captions(record)
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"version": 1, "data": [{"caption": "x"}, {"caption": "y"}]}), encoding="utf-8")
    assert load_captions(wrapped).texts == ["x", "y"]


def test_plain_text(tmp_path):
    path = tmp_path / "captions.txt"
    path.write_text("A red car.\n\n  A blue bike.  \n[A bracketed] caption\n", encoding="utf-8")
    captions = load_captions(path)
    assert captions.format == "text"
    assert captions.texts == ["A red car.", "A blue bike.", "[A bracketed] caption"]
    assert captions.ids == ["1", "3", "4"]
    [skipped] = captions.skipped
    assert skipped.count == 1 and skipped.examples == ("line 2",)


def test_ids_keep_leading_zeros_in_csv(tmp_path):
    path = tmp_path / "zeros.csv"
    path.write_text("id,caption\n000123,one\n000124,two\n", encoding="utf-8")
    assert load_captions(path).ids == ["000123", "000124"]


def test_column_options_read_benchmark_file_generically(shared_data):
    path = shared_data / "docci-test" / "docci_descriptions.jsonlines"
    captions = load_captions(path, text_column="description", group_column="image_file", limit=3)
    assert captions.format == "jsonl"
    assert captions.groups == ["qual_test_00000.jpg", "qual_test_00001.jpg", "qual_test_00002.jpg"]
    assert captions.ids == ["qual_test_00000", "qual_test_00001", "qual_test_00002"]  # example_id recognised


def test_column_options_rejected_for_fixed_layouts(shared_data):
    path = shared_data / "docci-test" / "docci_descriptions.jsonlines"
    with pytest.raises(DataError, match=r"--text-column apply to generic formats .*docci layout has fixed fields"):
        load_captions(path, format="docci", text_column="description")


def test_line_endings_and_unicode_separators(tmp_path):
    # CRLF endings are lines; U+2028 inside a caption is not a line break
    text = tmp_path / "crlf.txt"
    text.write_bytes("first\r\nsecond\u2028still second\r\n".encode("utf-8"))
    assert load_captions(text).texts == ["first", "second\u2028still second"]
    jsonl = tmp_path / "crlf.jsonl"
    jsonl.write_bytes(('{"caption": "a\u2028b"}\r\n{"caption": "c"}\r\n').encode("utf-8"))
    assert load_captions(jsonl).texts == ["a\u2028b", "c"]
    csv = tmp_path / "bom.csv"
    csv.write_bytes("\ufeffcaption,id\r\n\"multi\nline\",1\r\nplain,2\r\n".encode("utf-8"))
    captions = load_captions(csv)
    assert captions.texts == ["multi\nline", "plain"] and captions.ids == ["1", "2"]


@pytest.mark.parametrize("format", ["jsonl", "csv"])
def test_a_record_without_a_group_never_joins_another_image(tmp_path, format):
    """Its group is its caption id, here its line number "2", which is also the first record's
    image: the dog was made a second caption of the cat's image."""
    rows = [{"image": "2", "caption": "a cat"}, {"image": None, "caption": "a dog"},
            {"image": "1", "caption": "a bird"}]
    if format == "csv":
        path = tmp_path / "g.csv"
        path.write_text("caption,image\na cat,2\na dog,\na bird,1\n")
    else:
        path = _write(tmp_path, format, rows)
    captions = load_captions(str(path))
    assert captions.n_groups == 3
    groups = dict(zip(captions.texts, captions.groups))
    assert groups["a cat"] == "2" and groups["a bird"] == "1"
    assert groups["a dog"] not in ("1", "2")


def test_a_record_without_an_id_gets_one_no_other_record_has(tmp_path):
    """Its line number "2" is another record's id: that was reported as a duplicate id at a line
    that has no id at all."""
    rows = [{"id": "2", "caption": "a cat"}, {"id": None, "caption": "a dog"}, {"id": "3", "caption": "a bird"}]
    captions = load_captions(str(_write(tmp_path, "jsonl", rows)))
    assert captions.ids[0] == "2" and captions.ids[2] == "3"
    assert captions.ids[1] not in ("2", "3") and captions.ids[1].startswith("2")
    assert len(set(captions.ids)) == 3 and captions.n_groups == 3


def test_a_json_object_of_columns_with_capitalised_keys_is_columns(tmp_path):
    """{"Caption": [...], "Image": [...]} was read as an {image: [captions]} mapping: two images named
    "Caption" and "Image", with the file names as captions."""
    path = tmp_path / "cols.json"
    path.write_text(json.dumps({"Caption": ["a cat", "a dog", "a bird"], "Image": ["1.jpg", "2.jpg", "3.jpg"]}))
    captions = load_captions(path)
    assert captions.texts == ["a cat", "a dog", "a bird"] and captions.groups == ["1.jpg", "2.jpg", "3.jpg"]
    with pytest.warns(UserWarning, match="matched ignoring case"):
        assert load_captions(path, text_column="CAPTION").texts == ["a cat", "a dog", "a bird"]


def test_a_json_file_of_one_record_is_one_caption(tmp_path):
    """It was an {image: caption} mapping: three captions "a cat on a mat", "1.jpg" and "test"."""
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"caption": "a cat on a mat", "image": "1.jpg", "split": "test"}))
    captions = load_captions(path)
    assert captions.texts == ["a cat on a mat"] and captions.groups == ["1.jpg"]
    assert len(load_captions(path, split="test")) == 1
    # a mapping of images to captions stays one
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"1.jpg": "a cat", "2.jpg": ["a dog", "a puppy"]}))
    assert load_captions(mapping).texts == ["a cat", "a dog", "a puppy"]


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_nan_ids_and_groups_are_missing_and_whole_floats_are_integers(tmp_path, format):
    """NaN groups became the group "nan" (every such caption a positive of the others) and float ids
    "1.0"; pandas turns an integer column with a missing value into exactly this."""
    rows = [{"id": 1.0, "image_id": 7.0, "caption": "a cat"},
            {"id": 2.0, "image_id": float("nan"), "caption": "a dog"},
            {"id": 3.0, "image_id": float("nan"), "caption": "a bird"},
            {"id": 4.0, "image_id": 7.0, "caption": "a kitten"}]
    if format == "jsonl":
        path = tmp_path / "nan.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))  # the literal NaN json.dumps writes
    else:
        path = tmp_path / "nan.parquet"
        pl.DataFrame(rows).write_parquet(path)
    captions = load_captions(path)
    assert captions.ids == ["1", "2", "3", "4"]
    groups = dict(zip(captions.texts, captions.groups))
    assert groups["a cat"] == groups["a kitten"] == "7"
    assert len({groups["a dog"], groups["a bird"], "7"}) == 3 and captions.n_groups == 3


def test_an_id_that_is_an_object_is_an_error(tmp_path):
    path = tmp_path / "obj.jsonl"
    path.write_text(json.dumps({"id": {"path": "1.jpg"}, "caption": "a cat"}) + "\n")
    with pytest.raises(DataError, match=r"line 1: the id is an object with keys \[path\]; expected text or a number"):
        load_captions(path)


def test_rows_without_a_caption_list_are_skipped_and_counted(tmp_path):
    """A null, missing or empty list (or an empty TSV cell) made its image vanish without a word,
    or (TSV) stopped the load."""
    records = [{"image": "a.jpg", "captions": ["a cat"]}, {"image": "b.jpg", "captions": None},
               {"image": "c.jpg"}, {"image": "d.jpg", "captions": []}]
    path = tmp_path / "lists.json"
    path.write_text(json.dumps(records))
    captions = load_captions(path)
    assert captions.texts == ["a cat"]
    assert sum(item.count for item in captions.skipped) == 3
    tsv = tmp_path / "lists.tsv"
    tsv.write_text('image\tcaptions\na.jpg\t["a cat", "a dog"]\nb.jpg\t\n')
    captions = load_captions(tsv)
    assert captions.texts == ["a cat", "a dog"] and sum(item.count for item in captions.skipped) == 1


def test_csv_reads_captions_longer_than_the_csv_modules_default_field_limit(tmp_path):
    caption = "a long caption " * 10_000  # 150,000 characters; the csv module refuses 131,073 and up
    path = tmp_path / "long.csv"
    path.write_text(f'caption,image\n"{caption}",1.jpg\nshort,2.jpg\n')
    assert load_captions(path).texts[0] == caption.strip()


def test_blank_lines_before_a_csv_header_are_skipped(tmp_path):
    path = tmp_path / "lead.csv"
    path.write_text("\n\ncaption,image\na cat,1.jpg\n\na dog,2.jpg\n")
    captions = load_captions(path)
    assert captions.texts == ["a cat", "a dog"]
    assert captions.ids == ["1.jpg#0", "2.jpg#0"]


def test_a_made_id_is_the_records_line_number(tmp_path):
    path = tmp_path / "partid.csv"
    path.write_text("id,caption\n3,a cat\n,a dog\n2,a bird\n")
    assert load_captions(path).ids == ["3", "3 (line 3)", "2"]
    path = tmp_path / "blank.jsonl"
    path.write_text('{"id": "x", "caption": "a cat"}\n\n{"caption": "a dog"}\n')
    assert load_captions(path).ids == ["x", "3"]


def test_a_deeply_nested_json_line_is_an_error_not_a_traceback(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"caption": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(DataError, match="deep.jsonl:1: invalid JSON line: nested too deeply"):
        load_captions(path)
