"""Compressed dataset files (.gz, .zst, .bz2, .xz), made with the standard modules and zstandard:
each text format and benchmark layout reads exactly as its uncompressed file, the format detected
from the inner name; a truncated or damaged stream is one error line, exit 2, nothing written."""

from __future__ import annotations

import bz2
import json
import gzip
import lzma

import pytest
from click.testing import CliRunner

from capgeo.captions import load_captions
from capgeo.cli import main
from test_captions_errors import _error  # a one-line DataError, exit status 2

zstandard = pytest.importorskip("zstandard")

COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
               ".zst": lambda data: zstandard.ZstdCompressor().compress(data)}

TEXT_FILES = {
    "c.jsonl": b'{"image": "a.jpg", "caption": "a red car"}\n{"image": "b.jpg", "caption": "a blue boat"}\n',
    "c.json": b'[{"image": "a.jpg", "caption": "a red car"}, {"image": "b.jpg", "caption": "a blue boat"}]',
    "c.csv": b'image,caption\na.jpg,"a red car, parked"\nb.jpg,a blue boat\n',
    "c.tsv": b"image\tcaption\na.jpg\ta red car\nb.jpg\ta blue boat\n",
    "c.txt": b"a red car\na blue boat\n",
}


def _same(left, right):
    assert (left.format, left.ids, left.texts, left.groups) == (right.format, right.ids, right.texts, right.groups)


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
@pytest.mark.parametrize("name", list(TEXT_FILES))
def test_each_text_format_reads_compressed_as_uncompressed(tmp_path, name, suffix):
    plain = tmp_path / name
    plain.write_bytes(TEXT_FILES[name])
    packed = tmp_path / "packed" / (name + suffix)
    packed.parent.mkdir()
    packed.write_bytes(COMPRESSORS[suffix](TEXT_FILES[name]))
    _same(load_captions(packed), load_captions(plain))


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_benchmark_layouts_read_compressed(tmp_path, repo_data, suffix):
    for name in ("docci_sample.jsonlines", "coco_sample.json"):
        packed = tmp_path / (name + suffix)
        packed.write_bytes(COMPRESSORS[suffix]((repo_data / name).read_bytes()))
        compressed, plain = load_captions(packed), load_captions(repo_data / name)
        assert compressed.format in ("docci", "coco-list")
        _same(compressed, plain)


def test_real_benchmarks_read_compressed(tmp_path, shared_data):
    for source, suffix in ((shared_data / "docci-test" / "docci_descriptions.jsonlines", ".zst"),
                           (shared_data / "docci-test" / "docci_test.json", ".gz"),
                           (shared_data / "coco-karpathy-test" / "mscoco_test.json", ".xz")):
        packed = tmp_path / (source.name + suffix)
        packed.write_bytes(COMPRESSORS[suffix](source.read_bytes()))
        _same(load_captions(packed), load_captions(source))


def test_concatenated_members_and_frames_are_all_read(tmp_path):
    first, second = b'{"caption": "a red car"}\n', b'{"caption": "a blue boat"}\n'
    for suffix in (".gz", ".zst", ".bz2", ".xz"):
        path = tmp_path / f"c.jsonl{suffix}"
        path.write_bytes(COMPRESSORS[suffix](first) + COMPRESSORS[suffix](second))
        assert load_captions(path).texts == ["a red car", "a blue boat"]


def test_a_compressed_file_without_a_compression_suffix_is_decompressed(tmp_path):
    path = tmp_path / "caps.jsonl"
    path.write_bytes(gzip.compress(b'{"caption": "a"}\n'))
    assert load_captions(path).texts == ["a"]


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_a_truncated_stream_names_the_file(tmp_path, suffix):
    path = tmp_path / f"caps.jsonl{suffix}"
    whole = COMPRESSORS[suffix](b"".join(b'{"caption": "caption number %d"}\n' % k for k in range(2000)))
    path.write_bytes(whole[: len(whole) // 2])
    message = _error(path)
    assert message.startswith(f"{path}: the ") and "stream ends early" in message


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_a_damaged_stream_names_the_file(tmp_path, suffix):
    path = tmp_path / f"caps.jsonl{suffix}"
    whole = bytearray(COMPRESSORS[suffix](b'{"caption": "a red car"}\n' * 50))
    whole[len(whole) // 2: len(whole) // 2 + 8] = b"\x00\xff" * 4
    path.write_bytes(bytes(whole[:6]) + b"not compressed data at all" * 4 if suffix != ".gz" else bytes(whole))
    message = _error(path)
    assert message.startswith(f"{path}: ")
    assert "not a valid" in message or "ends early" in message


def test_compressed_parquet_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "c.parquet.gz"
    path.write_bytes(gzip.compress(b"PAR1 not really"))
    assert "Parquet compresses its own columns" in _error(path)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_the_cli_refuses_a_truncated_file_in_one_line_and_writes_nothing(tmp_path, monkeypatch, suffix):
    monkeypatch.chdir(tmp_path)
    whole = COMPRESSORS[suffix](b"".join(b'{"caption": "caption %d"}\n' % k for k in range(3000)))
    (tmp_path / f"c.jsonl{suffix}").write_bytes(whole[:-40])
    result = CliRunner().invoke(main, ["info", f"c.jsonl{suffix}", "--json", "out.json"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and f"c.jsonl{suffix}" in errors[0] and "Traceback" not in result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"c.jsonl{suffix}"]


# --- benchmark folders of compressed files -------------------------------------------------

URBAN_CAPTIONS = [(2, "two"), (10, "ten\n"), (1, " one "), (3, "   \n")]


def _urban_folder(folder, suffix):
    folder.mkdir(parents=True)
    for number, text in URBAN_CAPTIONS:
        name = f"{number}.txt"
        data = text.encode("utf-8")
        (folder / (name + suffix if suffix else name)).write_bytes(COMPRESSORS[suffix](data) if suffix else data)
    return folder


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_an_urban1k_folder_of_compressed_files_reads_as_uncompressed(tmp_path, suffix):
    plain = load_captions(_urban_folder(tmp_path / "plain" / "caption", "").parent)
    packed = load_captions(_urban_folder(tmp_path / "packed" / "caption", suffix).parent)
    assert packed.format == "urban1k"
    assert packed.ids == ["1", "2", "10"] and packed.texts == ["one", "two", "ten"]  # numeric order, stripped
    _same(packed, plain)
    [skipped] = packed.skipped
    assert skipped.count == 1 and skipped.examples == (f"file 3.txt{suffix}",)  # the file as it is named


def test_an_urban1k_folder_may_mix_compressed_and_plain_files(tmp_path):
    folder = tmp_path / "caption"
    folder.mkdir()
    (folder / "1.txt").write_text("one", encoding="utf-8")
    (folder / "2.txt.gz").write_bytes(gzip.compress(b"two"))
    (folder / "3.txt.zst").write_bytes(COMPRESSORS[".zst"](b"three"))
    (folder / "notes.txt.xz").write_bytes(lzma.compress(b"not a caption"))
    captions = load_captions(folder)
    assert (captions.format, captions.ids, captions.texts) == ("urban1k", ["1", "2", "3"], ["one", "two", "three"])
    [skipped] = captions.skipped
    assert skipped.reason == "a text file not named N.txt" and skipped.examples == ("file notes.txt.xz",)


def test_a_truncated_file_of_an_urban1k_folder_names_it(tmp_path):
    folder = _urban_folder(tmp_path / "caption", ".gz")
    whole = gzip.compress(" ".join(f"word{k}" for k in range(3000)).encode())
    (folder / "4.txt.gz").write_bytes(whole[: len(whole) // 2])
    message = _error(tmp_path)
    assert message.startswith(f"{folder / '4.txt.gz'}: the gzip stream ends early")


def test_real_urban1k_folder_reads_compressed(tmp_path, shared_data):
    source = shared_data / "urban1k" / "Urban1k" / "caption"
    folder = tmp_path / "Urban1k" / "caption"
    folder.mkdir(parents=True)
    for index, path in enumerate(sorted(source.glob("*.txt"))):
        suffix = list(COMPRESSORS)[index % len(COMPRESSORS)]  # every compressor, in one folder
        (folder / (path.name + suffix)).write_bytes(COMPRESSORS[suffix](path.read_bytes()))
    packed, plain = load_captions(folder.parent), load_captions(source)
    assert packed.format == "urban1k" and len(packed) == 1000
    _same(packed, plain)


def _dci_annotation(stem, extra, summaries=None):
    entry = {"image": f"{stem}.jpg", "short_caption": "A short one.", "extra_caption": extra,
             "mask_data": {}, "mask_keys": []}
    if summaries is not None:
        entry["summaries"] = summaries
    return json.dumps(entry).encode("utf-8")


def _dci_folder(root, suffix):
    complete = root / "complete"
    complete.mkdir(parents=True)
    entries = {"sa_1": _dci_annotation("sa_1", "A park.", {"base": ["Park one.", "Park two."], "m-0-sc": ["A dog."]}),
               "sa_2": _dci_annotation("sa_2", "A street."),
               "sa_3": _dci_annotation("sa_3", "A room.", {"base": "Room."})}
    for stem, data in entries.items():
        (complete / (f"{stem}.json" + suffix)).write_bytes(COMPRESSORS[suffix](data) if suffix else data)
    # splits.json names the annotations by their inner name, as the uncompressed release does
    (root / "splits.json").write_text(json.dumps({"train": ["sa_1.json", "sa_3.json"], "test": ["sa_2.json"]}))
    return root


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_a_dci_folder_of_compressed_annotations_reads_as_uncompressed(tmp_path, suffix):
    plain = load_captions(_dci_folder(tmp_path / "plain", ""))
    packed = load_captions(_dci_folder(tmp_path / "packed", suffix))
    assert packed.format == "dci"
    assert packed.ids == ["sa_1", "sa_1#summary-0", "sa_1#summary-1", "sa_2", "sa_3", "sa_3#summary-0"]
    _same(packed, plain)
    assert packed.table["split"].to_list() == plain.table["split"].to_list() == ["train"] * 3 + ["test"] + ["train"] * 2
    # the complete/ folder itself, and a folder of only annotations (no complete/), are detected too
    assert load_captions(tmp_path / "packed" / "complete").ids == packed.ids
    assert load_captions(tmp_path / "packed", split="test").texts == ["A short one.\nA street."]


def test_a_compressed_dci_annotation_without_extra_caption_names_the_file(tmp_path):
    (tmp_path / "sa_1.json.gz").write_bytes(gzip.compress(b'{"short_caption": "a"}'))
    assert _error(tmp_path) == f"{tmp_path / 'sa_1.json.gz'}: DCI annotation needs an 'extra_caption' key; found an object with keys [short_caption]"
