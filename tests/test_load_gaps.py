"""--limit on webdataset shards, compressed shards in folder layouts, and .tar.zst shards."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import os
import sys

import pytest
from click.testing import CliRunner

import capgeo.captions.webdataset as webdataset
from capgeo.captions import load_captions
from capgeo.cli import main
from test_captions_errors import _error  # a one-line DataError, exit status 2
from test_captions_webdataset import _caption, img2dataset_shard


def _opened_shards(monkeypatch) -> list[str]:
    """The names of the shards the webdataset reader opens, from now on."""
    opened: list[str] = []

    def spy(path, *args, **kwargs):
        opened.append(os.path.basename(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(webdataset, "open", spy, raising=False)
    return opened


def test_limit_stops_reading_shards_once_it_has_its_captions(tmp_path, monkeypatch):
    img2dataset_shard(tmp_path / "00000.tar", 0, 5)
    img2dataset_shard(tmp_path / "00001.tar", 5, 5)
    (tmp_path / "00002.tar").write_bytes(b"not a tar, and damaged" * 100)
    assert "00002.tar" in _error(tmp_path)  # read to the end, the damaged shard stops the load
    opened = _opened_shards(monkeypatch)
    captions = load_captions(tmp_path, limit=3)
    assert captions.texts == [_caption(k) for k in range(3)]
    assert opened == ["00000.tar"]
    opened.clear()
    assert load_captions(tmp_path, limit=7).texts == [_caption(k) for k in range(7)]
    assert opened == ["00000.tar", "00001.tar"]  # the damaged shard is never opened


def test_limit_reads_on_past_skipped_samples(tmp_path, monkeypatch):
    img2dataset_shard(tmp_path / "00000.tar", 0, 5, skip={1, 2})  # samples without a caption
    img2dataset_shard(tmp_path / "00001.tar", 5, 5)
    (tmp_path / "00002.tar").write_bytes(b"damaged" * 100)
    opened = _opened_shards(monkeypatch)
    captions = load_captions(tmp_path, limit=4)
    assert captions.texts == [_caption(k) for k in (0, 3, 4, 5)]
    assert "00002.tar" not in opened
    (skipped,) = captions.skipped
    assert skipped.count == 2
    result = CliRunner().invoke(main, ["info", str(tmp_path), "--limit", "6"])
    assert result.exit_code == 0, result.output
    assert "00002.tar" not in result.output


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


ROWS = [[{"caption": f"a photo {s}-{k}", "id": f"{s}-{k}", "image": f"img{s}-{k // 2}"} for k in range(4)]
        for s in range(3)]


@pytest.mark.parametrize("suffix", [".gz", ".zst", ".bz2"])
def test_a_folder_of_compressed_jsonl_shards_reads_as_the_uncompressed_one(tmp_path, suffix):
    compress = {".gz": gzip.compress, ".bz2": bz2.compress,
                ".zst": lambda data: pytest.importorskip("zstandard").ZstdCompressor().compress(data)}[suffix]
    (tmp_path / "plain").mkdir()
    (tmp_path / "packed").mkdir()
    for s, rows in enumerate(ROWS):
        (tmp_path / "plain" / f"part-{s}.jsonl").write_bytes(_jsonl(rows))
        (tmp_path / "packed" / f"part-{s}.jsonl{suffix}").write_bytes(compress(_jsonl(rows)))
    plain = load_captions(tmp_path / "plain")
    for source in (tmp_path / "packed", str(tmp_path / "packed" / f"*.jsonl{suffix}"),
                   str(tmp_path / "packed" / f"part-{{0..2}}.jsonl{suffix}")):
        packed = load_captions(source)
        assert packed.format == "jsonl"
        assert packed.table.equals(plain.table)
    assert load_captions(tmp_path / "packed").layout == "folder of 3 jsonl shards"
    assert load_captions(tmp_path / "packed", limit=5).ids == plain.ids[:5]


def test_hub_layout_of_compressed_csv_shards_takes_splits_from_the_names(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split, count in (("train", 2), ("test", 1)):
        for index in range(count):
            text = "caption,id\n" + "".join(f"{split} caption {index}-{k},{split}{index}-{k}\n" for k in range(3))
            (data / f"{split}-{index:05d}-of-{count:05d}.csv.gz").write_bytes(gzip.compress(text.encode()))
    captions = load_captions(tmp_path, split="test")
    assert captions.ids == ["test0-0", "test0-1", "test0-2"]
    assert load_captions(tmp_path).layout == "Hugging Face csv, 3 shards, splits test, train"


def test_compressed_parquet_shards_are_refused_with_the_reason(tmp_path):
    import polars as pl

    buffer = io.BytesIO()
    pl.DataFrame({"caption": ["a"]}).write_parquet(buffer)
    (tmp_path / "part-0.parquet.gz").write_bytes(gzip.compress(buffer.getvalue()))
    assert "Parquet compresses its own columns" in _error(tmp_path)


def _tarwriter_shard(wds, start: int, count: int, image_bytes: int = 3000) -> bytes:
    buffer = io.BytesIO()
    with wds.TarWriter(buffer) as writer:
        for k in range(start, start + count):
            writer.write({"__key__": f"sample{k:05d}", "jpg": os.urandom(image_bytes), "txt": _caption(k),
                          "json": {"caption": f"other {k}"}})
    return buffer.getvalue()


def test_tar_zst_shards_read_as_the_tar_shards_they_hold(tmp_path):
    wds = pytest.importorskip("webdataset")
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "tar").mkdir()
    (tmp_path / "zst").mkdir()
    for s in range(2):
        data = _tarwriter_shard(wds, s * 30, 30, image_bytes=20_000)
        (tmp_path / "tar" / f"{s:05d}.tar").write_bytes(data)
        (tmp_path / "zst" / f"{s:05d}.tar.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    expected = [(sample["__key__"], sample["txt"].decode()) for sample in
                wds.WebDataset(str(tmp_path / "tar" / "{00000..00001}.tar"), shardshuffle=False, empty_check=False)]
    for source in (tmp_path / "zst", str(tmp_path / "zst" / "{00000..00001}.tar.zst"), tmp_path / "zst" / "00000.tar.zst"):
        captions = load_captions(source)
        assert captions.format == "webdataset"
        assert list(zip(captions.ids, captions.texts)) == expected[:len(captions)]
    assert len(load_captions(tmp_path / "zst")) == 60
    assert load_captions(tmp_path / "zst", text_column="caption").texts == [f"other {k}" for k in range(60)]
    assert load_captions(tmp_path / "zst", limit=5).texts == [_caption(k) for k in range(5)]


def test_a_truncated_or_damaged_tar_zst_names_the_shard(tmp_path):
    wds = pytest.importorskip("webdataset")
    zstandard = pytest.importorskip("zstandard")
    data = zstandard.ZstdCompressor().compress(_tarwriter_shard(wds, 0, 40, image_bytes=20_000))
    shard = tmp_path / "00000.tar.zst"
    shard.write_bytes(data[: len(data) // 2])
    message = _error(shard)
    assert message.startswith(f"{shard}: the tar is truncated or damaged in sample sample000")
    assert "zstd stream ends early" in message
    shard.write_bytes(data[:20] + b"garbage" * 50 + data[400:])
    assert _error(shard).startswith(f"{shard}: not a valid zstd stream")
    result = CliRunner().invoke(main, ["info", str(shard)])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and len(result.output.splitlines()) == 1


def test_tar_zst_without_zstandard_says_what_to_install(tmp_path, monkeypatch):
    shard = tmp_path / "00000.tar.zst"
    shard.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 100)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard raises ImportError
    assert "needs the zstandard package" in _error(shard)
