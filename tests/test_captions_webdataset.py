"""webdataset tar shards, written with the webdataset package's TarWriter and with plain tarfile
laid out as img2dataset writes them (key.jpg, key.txt, key.json beside key.parquet and
_stats.json); read by capgeo with tarfile only, and checked against webdataset's own reader."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tracemalloc

import pytest
from click.testing import CliRunner

from capgeo.captions import load_captions
from capgeo.captions.shards import expand_braces
from capgeo.captions.webdataset import find_shards
from capgeo.cli import main
from test_captions_errors import _error  # a one-line DataError, exit status 2


def _caption(k: int) -> str:
    return f"photo {k}: a {'red' if k % 2 else 'blue'} car parked by the river, seen from the left"


def img2dataset_shard(path, start: int, count: int, *, image_bytes: int = 2000, txt: bool = True,
                      skip=(), compress: bool = False):
    """A shard as img2dataset writes it: per sample key.jpg, key.txt, key.json (in that order)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for k in range(start, start + count):
            key = f"{k:09d}"
            members = [("jpg", os.urandom(image_bytes))]
            if txt and k not in skip:
                members.append(("txt", _caption(k).encode()))
            meta = {"url": f"https://example.org/{k}.jpg", "key": key, "status": "success", "error_message": None,
                    "width": 256, "height": 256, "caption": None if k in skip else _caption(k),
                    "image_id": f"img-{k // 2}", "uid": f"u{k}"}
            members.append(("json", json.dumps(meta).encode()))
            for suffix, data in members:
                info = tarfile.TarInfo(f"{key}.{suffix}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def img2dataset_folder(folder, shards: int = 3, per_shard: int = 5, **options):
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        img2dataset_shard(folder / f"{s:05d}.tar", s * per_shard, per_shard, **options)
        (folder / f"{s:05d}.parquet").write_bytes(b"PAR1 metadata img2dataset writes beside each shard")
        (folder / f"{s:05d}_stats.json").write_text('{"count": %d}' % per_shard)
    return folder


def test_tarwriter_shards_read_as_webdataset_itself_reads_them(tmp_path):
    wds = pytest.importorskip("webdataset")
    expected = []
    for s in range(2):
        with wds.TarWriter(str(tmp_path / f"shard-{s:06d}.tar")) as writer:
            for k in range(s * 7, s * 7 + 7):
                sample = {"__key__": f"sample{k:05d}", "jpg": os.urandom(500), "txt": _caption(k),
                          "json": {"caption": f"other {k}", "group": f"g{k % 3}"}}
                writer.write(sample)
    pattern = str(tmp_path / "shard-{000000..000001}.tar")
    for sample in wds.WebDataset(pattern, shardshuffle=False, empty_check=False):
        expected.append((sample["__key__"], sample["txt"].decode("utf-8")))
    captions = load_captions(pattern)
    assert captions.format == "webdataset"
    assert list(zip(captions.ids, captions.texts)) == expected
    assert captions.groups == captions.ids  # one image per sample
    # the json's keys: --text-column names another caption, --group-column the image
    named = load_captions(tmp_path, text_column="caption", group_column="group")
    assert named.texts == [f"other {k}" for k in range(14)]
    assert named.groups == [f"g{k % 3}" for k in range(14)]


def test_an_img2dataset_folder_reads_its_shards_and_ignores_the_files_beside_them(tmp_path):
    folder = img2dataset_folder(tmp_path / "out")
    captions = load_captions(folder)
    assert captions.texts == [_caption(k) for k in range(15)]
    assert captions.ids == [f"{k:09d}" for k in range(15)]
    # the .json's image_id names the image, as an image key of a table does
    assert captions.n_groups == 8 and captions.groups[:3] == ["img-0", "img-0", "img-1"]
    # the .json's fields name ids and groups
    grouped = load_captions(folder, group_column="key", id_column="uid")
    assert grouped.ids == [f"u{k}" for k in range(15)] and grouped.n_groups == 15
    # without .txt members the .json's caption is taken
    img2dataset_folder(tmp_path / "json-only", txt=False)
    assert load_captions(tmp_path / "json-only").texts == captions.texts


def test_tar_gz_shards_and_a_single_shard(tmp_path):
    img2dataset_shard(tmp_path / "a.tar.gz", 0, 6, compress=True)
    img2dataset_shard(tmp_path / "b.tgz", 6, 6, compress=True)
    assert load_captions(tmp_path / "a.tar.gz").texts == [_caption(k) for k in range(6)]
    assert load_captions(tmp_path).texts == [_caption(k) for k in range(12)]


def test_a_sample_without_a_caption_is_skipped_and_counted(tmp_path):
    img2dataset_shard(tmp_path / "s.tar", 0, 10, skip={3, 7})
    captions = load_captions(tmp_path / "s.tar")
    assert len(captions.texts) == 8
    (skipped,) = captions.skipped
    assert skipped.count == 2 and "no .txt member" in skipped.reason
    assert list(skipped.examples) == ["s.tar, sample 000000003", "s.tar, sample 000000007"]


def test_no_caption_anywhere_says_what_the_samples_hold(tmp_path):
    img2dataset_shard(tmp_path / "s.tar", 0, 4)
    message = _error(tmp_path / "s.tar", text_column="alt")
    assert "no sample has a caption" in message and ".jpg" in message and "status" in message


def test_image_members_are_never_held_in_memory(tmp_path):
    """Peak memory while reading is the same for 1 KB and 1 MB images."""
    peaks = {}
    for size in (1_000, 1_000_000):
        folder = tmp_path / str(size)
        folder.mkdir()
        img2dataset_shard(folder / "s.tar", 0, 24, image_bytes=size)
        tracemalloc.start()
        load_captions(folder / "s.tar")
        peaks[size] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks[1_000_000] < peaks[1_000] + 200_000, peaks  # 24 MB of images would show as megabytes


def _cut(path, at: int):
    data = path.read_bytes()
    path.write_bytes(data[:at])


@pytest.mark.parametrize("where, sample", [
    (512 + 1000, "000000000"),                  # inside the first image
    (3 * 2560 + 512 + 10, "000000001"),         # inside the second sample's image: header of jpg is read
    (2 * 3 * 1024 + 1024 + 512 + 5, None),      # somewhere in the middle, past a caption
])
def test_a_truncated_shard_names_the_shard_and_the_sample(tmp_path, where, sample):
    shard = img2dataset_shard(tmp_path / "s.tar", 0, 6, image_bytes=2000)
    _cut(shard, where)
    message = _error(shard)
    assert message.startswith(f"{shard}: the tar is truncated")
    assert "in sample " in message or "after sample " in message
    if sample is not None:
        assert f"sample {sample}" in message


def test_a_shard_cut_between_two_members_is_truncated_not_shorter(tmp_path):
    shard = img2dataset_shard(tmp_path / "s.tar", 0, 6, image_bytes=2048 - 512)
    with tarfile.open(shard) as archive:
        members = archive.getmembers()
    fourth_sample = members[9]  # a member boundary: tarfile alone reads three samples and stops quietly
    _cut(shard, fourth_sample.offset)
    message = _error(shard)
    assert "truncated after sample 000000002" in message


def test_a_truncated_tar_gz_and_a_damaged_header(tmp_path):
    shard = img2dataset_shard(tmp_path / "s.tar.gz", 0, 6, compress=True)
    _cut(shard, len(shard.read_bytes()) // 2)
    assert "truncated or damaged" in _error(shard)
    damaged = img2dataset_shard(tmp_path / "d.tar", 0, 6)
    data = bytearray(damaged.read_bytes())
    with tarfile.open(damaged) as archive:
        second = archive.getmembers()[3].offset
    data[second: second + 100] = b"\xff" * 100
    damaged.write_bytes(bytes(data))
    message = _error(damaged)
    assert message.startswith(f"{damaged}: the tar is truncated or damaged after sample 000000000")


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/escape.txt", "a/../../escape.txt"])
def test_a_member_whose_name_escapes_the_archive_is_refused(tmp_path, name):
    shard = tmp_path / "evil.tar"
    with tarfile.open(shard, "w") as archive:
        info = tarfile.TarInfo(name)
        data = b"caption"
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    message = _error(shard)
    assert "escapes the archive" in message and repr(name) in message
    assert not (tmp_path.parent / "escape.txt").exists()


def test_bad_members_name_the_shard_and_sample(tmp_path):
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as archive:
        for name, data in (("k1.txt", b"fine"), ("k2.txt", b"\xff\xfe bad"), ("k3.json", b"{broken")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    assert "sample k2: k2.txt is not UTF-8" in _error(shard)


def test_the_cli_refuses_a_truncated_shard_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = img2dataset_folder(tmp_path / "out")
    _cut(folder / "00001.tar", 3000)
    before = sorted(os.listdir(tmp_path))
    result = CliRunner().invoke(main, ["info", "out", "--json", "info.json"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "00001.tar" in errors[0] and "sample 000000005" in errors[0], result.output
    assert "Traceback" not in result.output and sorted(os.listdir(tmp_path)) == before


def test_braces_expand_as_braceexpand_does():
    braceexpand = pytest.importorskip("braceexpand")
    for pattern in ("s/{00000..00012}.tar", "{a,b}-{1..3}.tar", "x{8..11}.tar", "{0010..0008}.tar", "plain.tar"):
        assert expand_braces(pattern) == list(braceexpand.braceexpand(pattern))


def test_a_pattern_naming_a_missing_shard_says_which(tmp_path):
    img2dataset_shard(tmp_path / "00000.tar", 0, 2)
    message = _error(str(tmp_path / "{00000..00001}.tar"))
    assert "1 of the 2 shards it names do not exist" in message and "00001.tar" in message
    assert find_shards(tmp_path / "caps.jsonl") is None


def test_format_webdataset_on_something_else_says_what_it_expects(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"caption": "a"}\n')
    assert "expected webdataset shards" in _error(tmp_path, format="webdataset")
    assert "not a tar" in _error(tmp_path / "c.jsonl", format="webdataset")


def test_real_captions_in_img2dataset_shards_read_as_their_source(tmp_path, shared_data):
    """DOCCI's 5,100 test captions written into shards of 1,000 samples, keyed by example id, with
    image members and .json metadata as img2dataset writes them: the same ids and texts come back."""
    source = load_captions(shared_data / "docci-test" / "docci_test.json")
    folder = tmp_path / "docci-shards"
    folder.mkdir()
    rows = list(zip(source.ids, source.texts))
    for s in range(0, len(rows), 1000):
        with tarfile.open(folder / f"{s // 1000:05d}.tar", "w") as archive:
            for key, text in rows[s:s + 1000]:
                for suffix, data in (("jpg", b"\xff\xd8" + bytes(300)), ("txt", text.encode()),
                                     ("json", json.dumps({"key": key, "caption": text}).encode())):
                    info = tarfile.TarInfo(f"{key}.{suffix}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
    read = load_captions(folder)
    assert (read.ids, read.texts) == (source.ids, source.texts)
    result = CliRunner().invoke(main, ["info", str(folder), "--json", str(tmp_path / "info.json")])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["format"] == "webdataset" and info["n_captions"] == 5100
