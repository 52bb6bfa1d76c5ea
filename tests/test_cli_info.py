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
    payload = json.loads(result.stdout)
    assert payload.pop("images")["source"] == "layout files"   # DOCCI names its images by file (not here)
    assert payload == {"schema": "capgeo.info/1", **summarize_captions(load_captions(path))}


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


# ---------------------------------------------------------------- where the images are

def info_images(*args):
    result = CliRunner().invoke(main, ["info", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    text = CliRunner().invoke(main, ["info", *map(str, args)], env={"COLUMNS": "400"})
    assert text.exit_code == 0, text.output
    line = next(line for line in text.stdout.splitlines() if line.startswith("images"))
    return json.loads(result.stdout)["images"], " ".join(line.split()[1:])


def test_a_coco_layout_names_its_files_and_the_first_few_are_looked_for(tmp_path):
    from _clip_fixtures import jpeg_bytes, random_images

    (tmp_path / "annotations").mkdir()
    (tmp_path / "val2017").mkdir()
    for number, image in enumerate(random_images(8, seed=1)):
        if number != 2:   # image 2 is named and missing
            (tmp_path / "val2017" / f"{number:012d}.jpg").write_bytes(jpeg_bytes(image))
    (tmp_path / "annotations" / "captions_val2017.json").write_text(json.dumps({
        "images": [{"id": n, "file_name": f"{n:012d}.jpg"} for n in range(8)],
        "annotations": [{"id": k, "image_id": k % 8, "caption": f"caption {k}"} for k in range(16)]}))
    images, line = info_images(tmp_path / "annotations" / "captions_val2017.json")
    assert (images["source"], images["n_groups"], images["n_named"]) == ("layout files", 8, 8)
    assert [entry["exists"] for entry in images["checked"]] == [True, True, False, True, True]
    assert images["checked"][0]["image"] == str(tmp_path / "val2017" / "000000000000.jpg")
    assert line.startswith("8 of 8 groups name one: layout files (8 by file name); 4 of the first 5 there, e.g. ")


def test_an_image_column_written_by_datasets_holds_its_bytes(tmp_path):
    datasets = pytest.importorskip("datasets")
    from _clip_fixtures import jpeg_bytes, random_images

    pictures = [jpeg_bytes(image) for image in random_images(4, seed=2)]
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    datasets.Dataset.from_dict({"image": [{"bytes": data, "path": None} for data in pictures for _ in range(2)],
                                "caption": [f"caption {k}" for k in range(8)]},
                               features=features).to_parquet(str(tmp_path / "data.parquet"))
    images, line = info_images(tmp_path / "data.parquet")
    assert images["source"] == "Image column" and images["column"] == "image"
    assert (images["n_groups"], images["n_named"], images["kinds"]) == (4, 4, {"bytes": 4})
    assert images["checked"][0] == {"group": load_captions(tmp_path / "data.parquet").group_names[0],
                                    "image": f"bytes in {tmp_path / 'data.parquet'}, row 1", "exists": True}
    assert "searched" not in images
    assert line.startswith("4 of 4 groups name one: Image column 'image' (4 as bytes); 4 of the first 4 there")


def test_webdataset_members_by_extension(tmp_path):
    webdataset = pytest.importorskip("webdataset")
    from _clip_fixtures import jpeg_bytes, random_images

    with webdataset.TarWriter(str(tmp_path / "shard-000000.tar")) as writer:
        for index, image in enumerate(random_images(5, seed=3)):
            sample = {"__key__": f"{index:06d}", "txt": f"caption {index}"}
            if index != 4:   # sample 4 has no image
                sample["png" if index % 2 else "jpg"] = jpeg_bytes(image)
            writer.write(sample)
    images, line = info_images(tmp_path / "shard-000000.tar")
    assert images["source"] == "webdataset members"
    assert (images["n_groups"], images["n_named"], images["kinds"]) == (5, 4, {"jpg": 2, "png": 2})
    assert images["checked"][1]["image"].endswith("shard-000000.tar:000001.png") and len(images["checked"]) == 4
    assert line.startswith("4 of 5 groups name one: webdataset members (2 .jpg, 2 .png); 4 of the first 4 there")


def test_a_path_column_elsewhere_and_a_dataset_without_images(tmp_path):
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "a.jpg").write_bytes(b"not decoded, only looked for")
    table = tmp_path / "captions" / "pairs.csv"
    table.parent.mkdir()
    table.write_text("text,path\nfirst,a.jpg\nsecond,b.jpg\nthird,\n")
    images, line = info_images(table, "--image-column", "path", "--images", tmp_path / "pictures")
    assert images["source"] == "path column" and images["column"] == "path"
    assert (images["n_groups"], images["n_named"], images["kinds"]) == (3, 2, {"path": 2})
    assert [(entry["image"], entry["exists"]) for entry in images["checked"]] == [
        (str(tmp_path / "pictures" / "a.jpg"), True), ("b.jpg", False)]
    assert images["searched"] == [str(tmp_path / "pictures")]
    assert "2 of 3 groups name one: path column 'path' (2 as paths); 1 of the first 2 there" in line

    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"caption": "a"}\n{"caption": "b"}\n')
    images, line = info_images(plain)
    assert images is None and line.startswith("none named")
