"""Dataset sources beyond one file: shards, globs and brace ranges, the Hugging Face layouts (written
by the `datasets` package itself), Arrow files, and data in memory."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from capgeo.captions import load_captions
from capgeo.captions.shards import expand_braces, expand_source
from capgeo.cli import main
from capgeo.errors import DataError

datasets = pytest.importorskip("datasets")

ROOT = Path(__file__).resolve().parents[1]


def _png(colour: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (2, 2), (colour, 0, 0)).save(buffer, "PNG")
    return buffer.getvalue()


def _dataset(n: int, start: int = 0, *, image: bool = False):
    columns = {"caption": [f"a photo of thing {i}" for i in range(start, start + n)],
               "id": [f"c{i}" for i in range(start, start + n)],
               "unused": ["x" * 50] * n}
    features = {"caption": datasets.Value("string"), "id": datasets.Value("string"),
                "unused": datasets.Value("string")}
    if image:
        # every other row an image known only by its bytes (path None), the others by path
        columns["image"] = [{"bytes": _png(i % 3), "path": None if i % 2 else f"img{i // 2}.jpg"}
                            for i in range(start, start + n)]
        features["image"] = datasets.Image()
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def _hub_folder(root: Path, *, image: bool = False) -> Path:
    """A hub snapshot as `huggingface_hub` downloads it: README.md + data/<split>-NNNNN-of-NNNNN.parquet."""
    (root / "data").mkdir(parents=True)
    (root / "README.md").write_text("---\nconfigs: [{config_name: default}]\n---\n# a dataset\n")
    for index in range(3):
        _dataset(4, 4 * index, image=image).to_parquet(str(root / "data" / f"train-{index:05d}-of-00003.parquet"))
    _dataset(2, 100, image=image).to_parquet(str(root / "data" / "test-00000-of-00001.parquet"))
    return root


def _run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def _one_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_hub_parquet_layout_splits_from_file_names(tmp_path):
    folder = _hub_folder(tmp_path / "snap")
    both = load_captions(folder)
    assert len(both) == 14
    assert both.table.group_by("split").len().sort("split").rows() == [("test", 2), ("train", 12)]
    assert both.layout == "Hugging Face parquet, 4 shards, splits test, train"
    train = load_captions(folder, split="train")
    expected = pl.read_parquet(sorted((folder / "data").glob("train-*.parquet")))  # polars, read independently
    assert train.texts == expected["caption"].to_list() and train.ids == expected["id"].to_list()
    assert train.layout == "Hugging Face parquet, 3 shards, split train"
    with pytest.raises(DataError, match=r"no shards of split 'val'; splits present: test \(1 shard\), train \(3 shards\)"):
        load_captions(folder, split="val")


def test_info_prints_layout_and_json_carries_it(tmp_path):
    folder = _hub_folder(tmp_path / "snap")
    result = _run("info", folder, "--split", "train")
    assert result.exit_code == 0, result.output
    assert "Hugging Face parquet, 3 shards, split train" in result.output
    result = _run("info", folder, "--split", "train", "--json")
    summary = json.loads(result.stdout)
    assert summary["schema"] == "capgeo.info/1" and summary["layout"] == "Hugging Face parquet, 3 shards, split train"
    assert json.loads(_run("info", ROOT / "data" / "docci_sample.jsonlines", "--json").stdout)["layout"] is None


def test_config_split_folders(tmp_path):
    for config in ("en", "de"):
        for split, start in (("train", 0), ("test", 50)):
            (tmp_path / config / split).mkdir(parents=True)
            _dataset(3, start).to_parquet(str(tmp_path / config / split / "0000.parquet"))
    with pytest.raises(DataError, match=r"2 configs \(de, en\); pass the folder of one"):
        load_captions(tmp_path)
    captions = load_captions(tmp_path / "en", split="test")
    assert captions.ids == ["c50", "c51", "c52"] and captions.layout == "Hugging Face parquet, 1 shard, split test"


def test_folder_glob_and_brace_read_the_same_shards(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for index in range(4):
        _dataset(5, 5 * index).to_parquet(str(shards / f"part{index:03d}.parquet"))
    expected = [f"c{i}" for i in range(20)]
    assert load_captions(shards).ids == expected
    assert load_captions(shards, format="parquet").layout == "folder of 4 parquet shards"
    assert load_captions(f"{shards}/*.parquet").ids == expected
    braced = load_captions(f"{shards}/part{{000..003}}.parquet")
    assert braced.ids == expected and braced.layout == "4 parquet files matching a pattern"
    assert load_captions(f"{shards}/part{{001,003}}.parquet").ids == expected[5:10] + expected[15:]
    # quoted, the patterns reach the CLI unexpanded
    result = _run("info", f"{shards}/part{{000..003}}.parquet", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n_captions"] == 20


def test_brace_expansion_pads_as_written():
    assert expand_braces("s/{00008..00011}.tar") == [f"s/{n:05d}.tar" for n in range(8, 12)]
    assert expand_braces("{a,b}-{1..2}") == ["a-1", "a-2", "b-1", "b-2"]


def test_limit_reads_the_first_rows_of_the_first_shards(tmp_path):
    _hub_folder(tmp_path / "snap")
    full = load_captions(tmp_path / "snap", split="train")
    limited = load_captions(tmp_path / "snap", split="train", limit=6)
    assert limited.ids == full.ids[:6]
    # a later shard's empty captions do not shorten the result: more rows are read
    frame = pl.DataFrame({"caption": ["", "", "a", "b", "c"], "id": list("vwxyz")})
    (tmp_path / "mixed").mkdir()
    frame.write_parquet(tmp_path / "mixed" / "0.parquet")
    assert load_captions(tmp_path / "mixed", limit=2).ids == ["x", "y"]


def test_bad_sources_are_one_error_line(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    _dataset(3).to_parquet(str(shards / "a.parquet"))
    _dataset(3, 10).to_parquet(str(shards / "b.parquet"))
    _dataset(3, 20).remove_columns("unused").to_parquet(str(shards / "c.parquet"))
    _one_error(_run("info", shards), "c.parquet", "differ from those of the first shard", "it lacks unused")
    _one_error(_run("info", f"{tmp_path}/nothing/*.parquet"), "matches no file")
    (tmp_path / "typed").mkdir()
    pl.DataFrame({"caption": ["a"], "id": ["1"]}).write_parquet(tmp_path / "typed" / "a.parquet")
    pl.DataFrame({"caption": ["b"], "id": [2]}).write_parquet(tmp_path / "typed" / "b.parquet")
    _one_error(_run("info", tmp_path / "typed"), "b.parquet: column 'id' is Int64 in this shard but String")
    _one_error(_run("info", f"{shards}/{{a,b,x,y}}.parquet"), "2 of the 4 shards", "x.parquet", "y.parquet")
    _one_error(_run("info", tmp_path / "missing.parquet"), "no such file or folder")


def test_image_column_groups_by_path_or_bytes_hash(tmp_path):
    folder = _hub_folder(tmp_path / "snap", image=True)
    captions = load_captions(folder, split="train")
    images = _dataset(12, image=True).cast_column("image", datasets.Image(decode=False))["image"]
    expected = [image["path"] or "sha256:" + hashlib.sha256(image["bytes"]).hexdigest() for image in images]
    assert captions.groups == expected
    # two rows hold the same bytes and no path: one image, so its captions are positives of each other
    assert captions.groups[1] == captions.groups[7]
    # the same from memory (datasets.Dataset, pandas) and from a save_to_disk folder
    dataset = _dataset(12, image=True)
    assert load_captions(dataset).groups == expected
    assert load_captions(dataset.to_pandas()).groups == expected
    dataset.save_to_disk(str(tmp_path / "saved"))
    assert load_captions(tmp_path / "saved").groups == expected


def test_image_with_neither_bytes_nor_path(tmp_path):
    frame = pl.DataFrame({"caption": ["a", "b"], "image": [{"bytes": b"x", "path": None}, {"bytes": None, "path": ""}]})
    frame.write_parquet(tmp_path / "f.parquet")
    _one_error(_run("info", tmp_path / "f.parquet"), "row 2", "'image' has neither bytes nor path")
    with pytest.raises(DataError, match="row 2: the image column 'image' has neither bytes nor path"):
        load_captions(frame)


def test_save_to_disk_dataset_and_dataset_dict(tmp_path):
    _dataset(5).save_to_disk(str(tmp_path / "one"))
    one = load_captions(tmp_path / "one")
    assert one.ids == [f"c{i}" for i in range(5)] and one.format == "arrow"
    assert one.layout == "datasets save_to_disk folder, 1 Arrow file"
    datasets.DatasetDict({"train": _dataset(4), "test": _dataset(2, 50)}).save_to_disk(str(tmp_path / "dict"))
    test = load_captions(tmp_path / "dict", split="test")
    assert test.ids == ["c50", "c51"] and test.layout == "datasets save_to_disk folder, 1 Arrow file, split test"
    assert len(load_captions(tmp_path / "dict")) == 6


def test_arrow_file_reads_without_datasets(tmp_path):
    _dataset(5).save_to_disk(str(tmp_path / "one"))
    arrow = next((tmp_path / "one").glob("*.arrow"))
    code = ("import sys; sys.modules['datasets'] = None\n"
            "from capgeo.captions import load_captions\n"
            f"c = load_captions({str(arrow)!r}); print(c.layout, len(c), c.ids[0])\n"
            f"c = load_captions({str(tmp_path / 'one')!r}); print(len(c))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["Arrow IPC stream 5 c0", "5"]


def test_in_memory_objects():
    import pandas as pd
    import pyarrow as pa

    records = [{"caption": "a dog", "image_id": 1}, {"caption": "a cat", "image_id": 1}, {"caption": "a car", "image_id": 2}]
    frame = pl.DataFrame(records)
    expected = (["a dog", "a cat", "a car"], ["1", "1", "2"])
    for data in (frame, frame.lazy(), frame.to_pandas(), frame.to_arrow(), records,
                 datasets.Dataset.from_list(records)):
        captions = load_captions(data)
        assert (captions.texts, captions.groups) == expected, type(data)
    assert load_captions(["one", "two", ""]).texts == ["one", "two"]
    with_missing = load_captions(pd.DataFrame({"caption": ["x", None, "z"]}))  # pandas keeps None as NaN
    assert with_missing.texts == ["x", "z"] and with_missing.skipped[0].examples == ("row 2",)
    assert load_captions(pd.DataFrame({"words": ["x", "y"]}), text_column="words").texts == ["x", "y"]
    with pytest.raises(DataError, match=r"<polars DataFrame>: found no caption column .*columns found: words"):
        load_captions(pl.DataFrame({"words": ["x"]}))
    with pytest.raises(DataError, match="cannot read a builtins.int"):
        load_captions(3)
    assert isinstance(pa.table({"caption": ["z"]}), pa.Table)


def test_nothing_heavy_is_imported_for_a_list():
    code = ("import sys\nfrom capgeo.captions import load_captions\nload_captions(['a', 'b'])\n"
            "print(sorted(m for m in ('datasets', 'pandas', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_jsonl_shards_make_distinct_ids(tmp_path):
    (tmp_path / "d").mkdir()
    for name in ("a", "b"):
        (tmp_path / "d" / f"{name}.jsonl").write_text('{"caption": "x"}\n{"caption": "y"}\n')
    captions = load_captions(tmp_path / "d")
    assert captions.ids == ["a.jsonl:1", "a.jsonl:2", "b.jsonl:1", "b.jsonl:2"]
    assert expand_source(tmp_path / "d") == [tmp_path / "d" / "a.jsonl", tmp_path / "d" / "b.jsonl"]


def test_fingerprint_of_a_pattern_covers_its_files(tmp_path):
    (tmp_path / "d").mkdir()
    for name in ("a", "b"):
        pl.DataFrame({"caption": [name]}).write_parquet(tmp_path / "d" / f"{name}.parquet")
    before = load_captions(f"{tmp_path}/d/*.parquet").fingerprint
    pl.DataFrame({"caption": ["changed"]}).write_parquet(tmp_path / "d" / "b.parquet")
    assert load_captions(f"{tmp_path}/d/*.parquet").fingerprint != before


TRICKY = ["plain caption", "  padded both  ", "ends with newline\n", "\x1cfile separator\x1f", "\u200b", "", None,
          "café au lait", "\u3000ideographic space\u3000", "\t", "日本語のキャプション", "a", "\u200bzero-width first",
          "last plain one."]


@pytest.mark.parametrize("options", [{}, {"limit": 3}, {"limit": 9}, {"split": "b"}, {"split": "a", "limit": 2}])
@pytest.mark.parametrize("with_ids", [True, False])
def test_column_rules_match_the_row_rules(tmp_path, options, with_ids):
    """Parquet goes through the column-wise rules; the same records as JSON lines through the row-by-row
    ones, the reference: same captions, ids, groups, splits and skipped rows."""
    records = [{"caption": text, "split": "ab"[row % 2], **({"id": f"x{row}"} if with_ids else {})}
               for row, text in enumerate(TRICKY)]
    pl.DataFrame(records).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    columnar = load_captions(tmp_path / "d.parquet", **options)
    rows = load_captions(tmp_path / "d.jsonl", **options)
    assert columnar.table.to_dicts() == rows.table.to_dicts()
    assert [(item.reason, item.count) for item in columnar.skipped] == [(item.reason, item.count) for item in rows.skipped]
    assert [[place.replace("row", "line") for place in item.examples] for item in columnar.skipped] == \
        [list(item.examples) for item in rows.skipped]


def test_python_whitespace_is_what_str_strip_strips():
    from capgeo.captions.clean import PYTHON_WHITESPACE

    assert set(PYTHON_WHITESPACE) == {chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace()}


def test_duplicate_ids_in_parquet_are_named(tmp_path):
    pl.DataFrame({"caption": ["a", "b", "c"], "id": ["1", "2", "1"]}).write_parquet(tmp_path / "d.parquet")
    with pytest.raises(DataError, match="duplicate caption id '1' at row 1 and row 3"):
        load_captions(tmp_path / "d.parquet")


def test_arrow_ipc_file_format(tmp_path):
    """The IPC file format (magic ARROW1, as polars and pyarrow write files) as well as the stream."""
    pl.DataFrame({"caption": ["a", "b", "c"], "id": ["1", "2", "3"]}).write_ipc(tmp_path / "f.arrow")
    captions = load_captions(tmp_path / "f.arrow", limit=2)
    assert captions.ids == ["1", "2"] and captions.layout == "Arrow IPC file"
    pl.DataFrame({"caption": ["a"], "id": ["1"]}).write_ipc_stream(tmp_path / "s.arrow")
    assert load_captions(tmp_path / "s.arrow").layout == "Arrow IPC stream"


def test_an_output_over_a_shard_of_a_pattern_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    pl.DataFrame({"caption": ["a", "b"]}).write_parquet(tmp_path / "d" / "a.parquet")
    before = (tmp_path / "d" / "a.parquet").read_bytes()
    _one_error(_run("info", f"{tmp_path}/d/*.parquet", "--json", tmp_path / "d" / "a.parquet"), "would overwrite the input DATA")
    assert (tmp_path / "d" / "a.parquet").read_bytes() == before
