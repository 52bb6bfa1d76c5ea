"""Benchmark layouts: real files where we have them, schema-following fixtures for the rest."""

import json
from collections import Counter
from pathlib import Path, PurePosixPath

import pytest

from capgeo.captions import CaptionSet, load_captions
from capgeo.errors import DataError


def _rows(captions: CaptionSet) -> list[dict]:
    return captions.table.to_dicts()


# --- DOCCI -------------------------------------------------------------------------------


def test_docci_jsonlines_real_file(shared_data):
    path = shared_data / "docci-test" / "docci_descriptions.jsonlines"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    captions = load_captions(path)
    assert captions.format == "docci"
    assert len(captions) == len(records) == 5100
    assert captions.ids == [record["example_id"] for record in records]
    assert captions.groups == captions.ids  # one caption per image
    assert captions.texts == [record["description"].strip() for record in records]
    assert Counter(captions.table["split"].to_list()) == Counter(record["split"] for record in records)
    assert captions.n_groups == 5100


def test_docci_json_list_real_file_matches_jsonlines(shared_data):
    folder = shared_data / "docci-test"
    from_list = load_captions(folder / "docci_test.json")
    from_lines = load_captions(folder / "docci_descriptions.jsonlines")
    assert from_list.format == "docci-json"
    records = json.loads((folder / "docci_test.json").read_text(encoding="utf-8"))
    # id = basename without extension of the (placeholder) path
    assert from_list.ids == [PurePosixPath(record["filename"]).stem for record in records]
    assert from_list.ids == from_lines.ids
    assert from_list.texts == from_lines.texts
    # the split is read off DOCCI's id prefix
    assert from_list.table["split"].to_list() == from_lines.table["split"].to_list()


def test_docci_split_filter_and_limit(shared_data):
    path = shared_data / "docci-test" / "docci_descriptions.jsonlines"
    qual = load_captions(path, split="qual_test")
    assert len(qual) == 100 and set(qual.table["split"]) == {"qual_test"}
    assert all(caption_id.startswith("qual_test_") for caption_id in qual.ids)
    first = load_captions(path, split="test", limit=7)
    assert first.ids == [f"test_{index:05d}" for index in range(7)]




def test_repo_samples(repo_data):
    docci = load_captions(repo_data / "docci_sample.jsonlines")
    assert (docci.format, len(docci), docci.n_groups) == ("docci", 300, 300)
    assert set(docci.table["split"]) <= {"test", "qual_test"}
    coco = load_captions(repo_data / "coco_sample.json")
    assert (coco.format, len(coco), coco.n_groups) == ("coco-list", 300, 60)


# --- COCO --------------------------------------------------------------------------------


def test_coco_list_real_file_groups(shared_data):
    path = shared_data / "coco-karpathy-test" / "mscoco_test.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    captions = load_captions(path)
    assert captions.format == "coco-list"
    assert len(captions) == 25010 and captions.n_groups == 5000
    expected_groups = [record["image_name"] for record in records for _ in record["captions"]]
    assert captions.groups == expected_groups
    per_group = Counter(captions.groups)
    assert Counter(per_group.values()) == {5: 4990, 6: 10}
    # ids <image>#<k>, k counting the image's captions from 0
    first = records[0]
    assert captions.ids[:5] == [f"{first['image_name']}#{k}" for k in range(5)]
    assert captions.texts[:5] == [text.strip() for text in first["captions"][:5]]
    # group codes agree with the groups
    codes = captions.group_codes
    assert codes.max() + 1 == 5000
    assert all(codes[i] == codes[0] for i in range(5)) and codes[5] != codes[0]


def _write_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value, indent=1), encoding="utf-8")
    return path


def test_coco_official_captions(tmp_path):
    path = _write_json(tmp_path / "captions_val2014.json", {
        "info": {"year": 2014}, "licenses": [],
        "images": [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg", "width": 640, "height": 480},
                   {"id": 73, "file_name": "COCO_val2014_000000000073.jpg", "width": 640, "height": 480}],
        "annotations": [{"image_id": 42, "id": 1, "caption": "A dog on a couch. "},
                        {"image_id": 73, "id": 2, "caption": "Two bikes by a wall."},
                        {"image_id": 42, "id": 3, "caption": "A brown dog sleeping."},
                        {"image_id": 99, "id": 4, "caption": "An image not listed."}],
    })
    captions = load_captions(path)
    assert captions.format == "coco"
    assert captions.ids == ["1", "2", "3", "4"]
    assert captions.groups == ["COCO_val2014_000000000042.jpg", "COCO_val2014_000000000073.jpg",
                               "COCO_val2014_000000000042.jpg", "99"]
    assert captions.texts[0] == "A dog on a couch."
    assert captions.n_groups == 3


def test_coco_image_ids_written_as_a_number_and_as_text_are_one_image(tmp_path):
    """file_names were keyed by the raw JSON value: image_id "2" missed image 2's file name, and one
    image's captions became two groups, negatives of each other."""
    path = _write_json(tmp_path / "captions.json", {
        "images": [{"id": 2, "file_name": "b.jpg"}, {"id": "7", "file_name": "g.jpg"}],
        "annotations": [{"image_id": 2, "id": 1, "caption": "a dog on a sofa"},
                        {"image_id": "2", "id": 2, "caption": "a dog lying on a sofa"},
                        {"image_id": 7, "id": 3, "caption": "a red car"},
                        {"image_id": 3, "id": 4, "caption": "a tree"},
                        {"image_id": "3", "id": 5, "caption": "a tall tree"}]})
    captions = load_captions(path, format="coco")
    assert captions.groups == ["b.jpg", "b.jpg", "g.jpg", "3", "3"]
    assert captions.n_groups == 3


def test_karpathy_layout(tmp_path):
    def image(imgid, filename, split, raws):
        sentids = [imgid * 10 + k for k in range(len(raws))]
        return {"filepath": "val2014", "sentids": sentids, "filename": filename, "imgid": imgid, "split": split,
                "cocoid": 1000 + imgid,
                "sentences": [{"tokens": raw.lower().split(), "raw": raw, "imgid": imgid, "sentid": sentid}
                              for raw, sentid in zip(raws, sentids)]}

    path = _write_json(tmp_path / "dataset_coco.json", {"dataset": "coco", "images": [
        image(0, "a.jpg", "train", ["A cat.", "A small cat."]),
        image(1, "b.jpg", "test", ["A car.", "A red car.", "A parked car."]),
        image(2, "c.jpg", "restval", ["A tree."]),
    ]})
    captions = load_captions(path)
    assert captions.format == "karpathy"
    assert captions.ids == ["0", "1", "10", "11", "12", "20"]
    assert captions.groups == ["a.jpg", "a.jpg", "b.jpg", "b.jpg", "b.jpg", "c.jpg"]
    assert captions.table["split"].to_list() == ["train", "train", "test", "test", "test", "restval"]
    test_only = load_captions(path, split="test")
    assert test_only.texts == ["A car.", "A red car.", "A parked car."]
    assert test_only.n_groups == 1


def test_coco_list_without_split(tmp_path):
    path = _write_json(tmp_path / "flickr.json", [
        {"image_name": "1.jpg", "captions": ["one", "uno"]}, {"image_name": "2.jpg", "captions": ["two"]}])
    captions = load_captions(path)
    assert captions.format == "coco-list"
    assert captions.ids == ["1.jpg#0", "1.jpg#1", "2.jpg#0"]
    assert captions.table["split"].null_count() == 3


# --- Urban-1K ----------------------------------------------------------------------------


def test_urban1k_real_folder(shared_data):
    folder = shared_data / "urban1k" / "Urban1k" / "caption"
    # the caption folder, the dataset root holding it, or a folder the archive was unpacked into
    for path in (folder, folder.parent, folder.parent.parent):
        captions = load_captions(path)
        assert captions.format == "urban1k"
        assert len(captions) == 1000
        assert captions.ids == [str(number) for number in range(1, 1001)]  # numeric order
        assert captions.groups == captions.ids
        assert captions.texts[9] == (folder / "10.txt").read_text(encoding="utf-8").strip()


def test_urban1k_fixture_sorting_and_empty_file(tmp_path):
    folder = tmp_path / "caption"
    folder.mkdir()
    for number, text in [(2, "two"), (10, "ten\n"), (1, " one "), (3, "   \n")]:
        (folder / f"{number}.txt").write_text(text, encoding="utf-8")
    captions = load_captions(tmp_path)
    assert captions.ids == ["1", "2", "10"]
    assert captions.texts == ["one", "two", "ten"]
    [skipped] = captions.skipped
    assert skipped.count == 1 and skipped.examples == ("file 3.txt",)


# --- DCI ---------------------------------------------------------------------------------


def _dci_entry(stem, extra, summaries=None):
    entry = {"image": f"{stem}.jpg", "short_caption": "A short one.", "extra_caption": extra,
             "mask_data": {"0": {"idx": 0, "label": "dog", "caption": "a dog", "parent": -1, "requirements": [],
                                 "mask_quality": 0, "area": 10, "outer_mask": "",
                                 "bounds": {"topLeft": {"x": 0, "y": 0}, "bottomRight": {"x": 5, "y": 5}}}},
             "mask_keys": ["0"]}
    if summaries is not None:
        entry["summaries"] = summaries
    return entry


def test_dci_folder_with_summaries_and_splits(tmp_path):
    complete = tmp_path / "complete"
    complete.mkdir()
    _write_json(complete / "sa_1.json", _dci_entry("sa_1", "A long description of a park.",
                                                   {"base": ["Park summary one.", "Park summary two."],
                                                    "m-0-sc": ["A dog."]}))
    _write_json(complete / "sa_2.json", _dci_entry("sa_2", "A long description of a street."))
    _write_json(complete / "sa_3.json", _dci_entry("sa_3", "A long description of a room.", {"base": "Room."}))
    _write_json(tmp_path / "splits.json", {"train": ["sa_1.json", "sa_3.json"], "test": ["sa_2.json"]})

    captions = load_captions(tmp_path)
    assert captions.format == "dci"
    assert captions.ids == ["sa_1", "sa_1#summary-0", "sa_1#summary-1", "sa_2", "sa_3", "sa_3#summary-0"]
    assert captions.groups == ["sa_1"] * 3 + ["sa_2"] + ["sa_3"] * 2
    assert "A dog." not in captions.texts  # mask-region summaries are not captions of the image
    assert captions.table["split"].to_list() == ["train"] * 3 + ["test"] + ["train"] * 2
    assert load_captions(complete).ids == captions.ids  # the complete/ folder itself
    # the short caption opens the description, as DCI's own get_extended_caption joins them
    assert load_captions(tmp_path, split="test").texts == ["A short one.\nA long description of a street."]


@pytest.mark.parametrize(("short", "extra", "expected"), [
    ("A red bicycle.", "The wall is brick.", "A red bicycle.\nThe wall is brick."),
    ("A red bicycle.", "", "A red bicycle."),
    ("A red bicycle.", None, "A red bicycle."),
    ("", "The wall is brick.", "The wall is brick."),
    (None, "The wall is brick.", "The wall is brick."),
])
def test_dci_description_joins_short_and_extra_caption(tmp_path, short, extra, expected):
    entry = _dci_entry("sa_1", extra)
    if short is None:
        del entry["short_caption"]
    else:
        entry["short_caption"] = short
    _write_json(tmp_path / "sa_1.json", entry)
    assert load_captions(tmp_path).texts == [expected]


def test_dci_json_list(tmp_path):
    path = _write_json(tmp_path / "dci_test.json", [
        {"filename": "images/sa_10.jpg", "caption": "First."}, {"filename": "images/sa_11.jpg", "caption": "Second."}])
    captions = load_captions(path)
    assert captions.format == "dci-json"
    assert captions.ids == ["sa_10", "sa_11"] and captions.groups == captions.ids
    # other image names: detected as the shared layout, and --format names it
    other = _write_json(tmp_path / "other.json", [{"filename": "x/img1.png", "caption": "One."}])
    assert load_captions(other).format == "filename-caption"
    assert load_captions(other, format="dci-json").format == "dci-json"
    assert load_captions(other, format="docci-json").ids == ["img1"]


# --- ShareGPT4V --------------------------------------------------------------------------


def test_sharegpt4v(tmp_path):
    def record(ident, image, answer):
        return {"id": ident, "image": image, "conversations": [
            {"from": "human", "value": "<image>\nWhat is in this image?"}, {"from": "gpt", "value": answer}]}

    path = _write_json(tmp_path / "sharegpt4v_instruct_gpt4-vision_cap100k.json", [
        record("000000000009", "coco/train2017/000000000009.jpg", "A lunch box with fruit."),
        record("sa_100", "sam/images/sa_100.jpg", " A busy street.\n"),
        record("sa_101", "sam/images/sa_100.jpg", "Another view of the street."),
    ])
    captions = load_captions(path)
    assert captions.format == "sharegpt4v"
    assert captions.ids == ["000000000009", "sa_100", "sa_101"]
    assert captions.texts == ["A lunch box with fruit.", "A busy street.", "Another view of the street."]
    assert captions.n_groups == 2  # two records describe the same image


@pytest.mark.parametrize("name", ["docci", "coco-list"])
def test_format_override_reads_as_named(tmp_path, name):
    # a file with an unhelpful extension is read when --format names its layout
    path = tmp_path / "captions.data"
    if name == "docci":
        path.write_text('{"example_id": "test_00001", "split": "test", "image_file": "t.jpg", "description": "x y"}\n')
    else:
        path.write_text(json.dumps([{"image_name": "a.jpg", "captions": ["x y", "z"]}]))
    assert load_captions(path).format == name  # sniffed from the content
    assert load_captions(path, format=name).format == name


def test_a_folder_with_other_entries_is_not_unwrapped(tmp_path):
    """Only a folder holding nothing but one folder stands for it; anything else is detected as it is."""
    inner = tmp_path / "outer" / "Urban1k" / "caption"
    inner.mkdir(parents=True)
    (inner / "1.txt").write_text("a red bus", encoding="utf-8")
    assert load_captions(tmp_path / "outer").texts == ["a red bus"]
    (tmp_path / "outer" / "notes.md").write_text("readme", encoding="utf-8")
    with pytest.raises(DataError, match="cannot tell the folder's format"):
        load_captions(tmp_path / "outer")


def test_urban1k_folder_skips_hidden_files_and_names_other_text_files(tmp_path):
    """README.txt and .notes.txt were read as captions, and a macOS ._1.txt stopped the load."""
    from capgeo.captions import load_captions

    folder = tmp_path / "u"
    folder.mkdir()
    for number, text in ((1, "a cat"), (2, "a dog"), (10, "a bird")):
        (folder / f"{number}.txt").write_text(text)
    (folder / "README.txt").write_text("captions of the benchmark")
    (folder / ".notes.txt").write_text("notes")
    (folder / "._1.txt").write_bytes(b"\x00\x05\x16\x07\xff\xfe")
    (folder / "\u00b2.txt").write_text("superscript two")  # a digit int() refuses
    captions = load_captions(folder)
    assert captions.ids == ["1", "2", "10"] and captions.texts == ["a cat", "a dog", "a bird"]
    (skipped,) = captions.skipped
    assert skipped.reason == "a text file not named N.txt" and skipped.count == 2


def test_dci_folder_skips_hidden_files(tmp_path):
    from capgeo.captions import load_captions

    folder = tmp_path / "dci"
    folder.mkdir()
    (folder / "sa_1.json").write_text(json.dumps({"extra_caption": "a street at night"}))
    (folder / "._sa_1.json").write_bytes(b"\x00\x05\x16\x07\xff")
    assert load_captions(folder, format="dci").texts == ["a street at night"]


def test_a_one_line_coco_file_without_a_json_suffix_is_coco(tmp_path):
    """Official COCO files are one line; without .json it was taken for JSON lines and failed."""
    from capgeo.captions import load_captions

    data = {"info": {}, "licenses": [], "images": [{"id": 1, "file_name": "a.jpg"}],
            "annotations": [{"image_id": 1, "id": 10, "caption": "a cat"}, {"image_id": 1, "id": 11, "caption": "a pet"}]}
    path = tmp_path / "captions_val"
    path.write_text(json.dumps(data))
    captions = load_captions(path)
    assert captions.format == "coco" and captions.texts == ["a cat", "a pet"] and captions.groups == ["a.jpg"] * 2


def test_docci_json_detection_looks_at_every_image(tmp_path):
    """Only the first 50 file names were checked: a list with one other image past them was docci-json."""
    from capgeo.captions import load_captions

    records = [{"filename": f"images/test_{i:05d}.jpg", "caption": f"caption {i}"} for i in range(60)]
    records.append({"filename": "images/other.jpg", "caption": "another"})
    path = tmp_path / "list.json"
    path.write_text(json.dumps(records))
    assert load_captions(path).format != "docci-json"
