"""The hostile-input suite (issue 46, input side): files built to mislead or exhaust a reader,
each run through the real command line in-process. A case passes when capgeo gives the right
result, or exit status 2 with one ``Error:`` line and no traceback; memory-exhaustion cases also
check that peak memory stays small. Grouped by family: formats, webdataset, compressed streams,
globs and brace ranges, vectors. Add a case here with each fix to a reader."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main


def info(*args) -> dict:
    """``capgeo info ... --json -``: the dataset summary, which must succeed."""
    result = CliRunner().invoke(main, ["info", *map(str, args), "--json", "-"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refused(*args) -> str:
    """The one ``Error:`` line of a command that must refuse its input (exit status 2, no traceback)."""
    result = CliRunner().invoke(main, list(map(str, args)))
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


# --- webdataset ---------------------------------------------------------------------------------

class TestWebdataset:
    wds = pytest.importorskip("webdataset")

    def test_a_captions_list_is_one_image_per_sample(self, tmp_path):
        with self.wds.TarWriter(str(tmp_path / "s.tar")) as writer:
            for k in range(3):
                writer.write({"__key__": f"s{k}", "jpg": b"\xff\xd8 image",
                              "json": {"captions": [f"a red car {k}", f"a blue boat {k}"]}})
        summary = info(tmp_path / "s.tar", "--captions-column", "captions")
        assert summary["n_captions"] == 6 and summary["n_groups"] == 3

    def test_image_id_in_the_json_names_the_image(self, tmp_path):
        """One caption per sample, as a COCO-style set is written with ShardWriter: the samples of one
        image_id are one image (each read as its own image inflated the hardest companion and the
        near-duplicate pairs, silently)."""
        n_images, expected = 150, {}
        with self.wds.ShardWriter(str(tmp_path / "shard-%04d.tar"), maxcount=200, verbose=0) as writer:
            k = 0
            for image in range(n_images):
                for c in range(5 + (image % 7 == 0)):  # 5 captions, 6 for every seventh image
                    writer.write({"__key__": f"{k:07d}", "jpg": b"\xff\xd8 image",
                                  "json": {"image_id": 1000 + image, "caption": f"caption {c} of image {image}"}})
                    expected[f"{k:07d}"] = str(1000 + image)
                    k += 1
        pattern = tmp_path / ("shard-{0000..%04d}.tar" % (len(list(tmp_path.glob("*.tar"))) - 1))
        # webdataset's own reader is the reference for which samples the shards hold
        keys = [sample["__key__"] for sample in self.wds.WebDataset(str(pattern), shardshuffle=False,
                                                                    empty_check=False)]
        assert keys == list(expected)
        summary = info(pattern)
        assert summary["n_captions"] == len(expected) == 772
        assert summary["n_groups"] == n_images
        from capgeo.captions import load_captions

        captions = load_captions(pattern)
        assert dict(zip(captions.ids, captions.groups)) == expected

    def test_an_image_key_holding_an_object_names_no_image(self, tmp_path):
        with self.wds.TarWriter(str(tmp_path / "s.tar")) as writer:
            for k in range(4):
                writer.write({"__key__": f"s{k}", "txt": f"a red car {k}",
                              "json": {"image": {"width": 256, "height": 256}}})
        assert info(tmp_path / "s.tar")["n_groups"] == 4  # one image per sample, not one "{'width': ...}"
        line = refused("info", tmp_path / "s.tar", "--group-column", "image")
        assert "s.tar, sample s0: the group is an object" in line

    def test_a_group_key_no_sample_holds_is_refused(self, tmp_path):
        with self.wds.TarWriter(str(tmp_path / "s.tar")) as writer:
            for k in range(3):
                writer.write({"__key__": f"s{k}", "txt": f"a red car {k}", "json": {"image_id": k}})
        line = refused("info", tmp_path / "s.tar", "--group-column", "no_such_key")
        assert "no .json key 'no_such_key' (--group-column)" in line and "image_id" in line
        line = refused("info", tmp_path / "s.tar", "--id-column", "no_such_key")
        assert "(--id-column)" in line

    @staticmethod
    def forged_shard(path: Path, declared: int, *, compress: bool = False) -> Path:
        """A 2 KB shard whose caption member's header declares ``declared`` bytes."""
        import gzip
        import io
        import tarfile

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
            image = tarfile.TarInfo("000.jpg")
            image.size = 3
            archive.addfile(image, io.BytesIO(b"jpg"))
        forged = tarfile.TarInfo("000.txt")
        forged.size = declared
        data = buffer.getvalue().rstrip(b"\0")
        data = data + b"\0" * (-len(data) % 512) + forged.tobuf(tarfile.GNU_FORMAT) + b"a red car".ljust(512, b"\0")
        data += b"\0" * 1024
        path.write_bytes(gzip.compress(data) if compress else data)
        return path

    @pytest.mark.parametrize("name", ["forged.tar", "forged.tar.gz"])
    def test_a_caption_member_declaring_a_terabyte_is_refused_unread(self, tmp_path, name):
        shard = self.forged_shard(tmp_path / name, 1 << 40, compress=name.endswith(".gz"))
        line, peak = _peak_bytes(lambda: refused("info", shard))
        assert "sample 000: 000.txt declares 1,099,511,627,776 bytes, more than the 64 MiB" in line
        assert peak < 8 << 20, peak

    def test_a_caption_member_declaring_more_than_the_file_holds_is_a_truncated_shard(self, tmp_path):
        shard = self.forged_shard(tmp_path / "forged.tar", 10 << 20)
        line = refused("info", shard)
        assert "truncated or damaged in sample 000 (000.txt declares 10,485,760 bytes, past the end" in line

    def test_a_sparse_caption_member_is_refused_unread(self, tmp_path):
        """GNU tar's --sparse: a 10 KB archive holding a 1 TB caption file that is all hole."""
        import shutil
        import subprocess

        if shutil.which("tar") is None or "GNU" not in subprocess.run(["tar", "--version"], capture_output=True,
                                                                     text=True).stdout:
            pytest.skip("needs GNU tar to write a sparse member")
        folder = tmp_path / "files"
        folder.mkdir()
        (folder / "000.jpg").write_bytes(b"jpg")
        with open(folder / "000.txt", "wb") as sparse:
            sparse.truncate(1 << 40)
        subprocess.run(["tar", "--sparse", "-cf", str(tmp_path / "sparse.tar"), "000.jpg", "000.txt"],
                       cwd=folder, check=True)
        (folder / "000.txt").unlink()
        assert (tmp_path / "sparse.tar").stat().st_size < 64 << 10
        line = refused("info", tmp_path / "sparse.tar")
        assert "000.txt declares 1,099,511,627,776 bytes (a sparse member)" in line


    @pytest.mark.parametrize("name, mode", [("s.tar.bz2", "w:bz2"), ("s.tbz2", "w:bz2"), ("s.tar.xz", "w:xz"),
                                            ("s.txz", "w:xz")])
    def test_bz2_and_xz_shards_read_as_webdataset_reads_them(self, tmp_path, name, mode):
        import io
        import tarfile

        plain = tmp_path / "plain.tar"
        with self.wds.TarWriter(str(plain)) as writer:
            for k in range(5):
                writer.write({"__key__": f"s{k}", "jpg": b"\xff\xd8 image", "txt": f"a red car number {k}"})
        expected = [(sample["__key__"], sample["txt"].decode()) for sample in
                    self.wds.WebDataset(str(plain), shardshuffle=False, empty_check=False)]
        (tmp_path / "packed").mkdir()
        with tarfile.open(plain) as source, tarfile.open(tmp_path / "packed" / name, mode) as archive:
            for member in source:
                archive.addfile(member, io.BytesIO(source.extractfile(member).read()))
        from capgeo.captions import load_captions

        captions = load_captions(tmp_path / "packed" / name)
        assert captions.format == "webdataset" and list(zip(captions.ids, captions.texts)) == expected
        assert load_captions(tmp_path / "packed").texts == captions.texts  # a folder of them

    @pytest.mark.parametrize("name", ["cut.tar.bz2", "cut.tar.xz"])
    def test_a_truncated_bz2_or_xz_shard_is_one_error_line(self, tmp_path, name):
        import io
        import tarfile

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:" + name.rsplit(".", 1)[1]) as archive:
            for k in range(50):
                data = (f"a red car number {k} " * 50).encode()
                info = tarfile.TarInfo(f"{k:05d}.txt")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        data = buffer.getvalue()
        (tmp_path / name).write_bytes(data[:len(data) // 2])
        line = refused("info", tmp_path / name)
        assert name in line and ("truncated" in line or "damaged" in line)

# --- compressed streams -------------------------------------------------------------------------

def _peak_bytes(call) -> tuple[object, int]:
    """``call()``'s result and the peak of memory Python allocated while it ran."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _gzip_bomb(path: Path, line: bytes, expanded: int) -> Path:
    """A gzip file of concatenated members (all of which gzip reads) expanding to ``expanded`` bytes
    of ``line`` repeated, built without ever holding that much."""
    import gzip

    block = line * ((1 << 20) // len(line))
    member = gzip.compress(block, 9)
    with open(path, "wb") as out:
        for _ in range(expanded // len(block)):
            out.write(member)
    return path


class TestCompressedStreams:
    @pytest.mark.parametrize("name, line, captions", [
        ("b.txt.gz", b"a red car parked by the river\n", 5),
        ("b.jsonl.gz", b'{"caption": "a red car parked by the river"}\n', 5),
        ("b.csv.gz", b'"a red car, parked by the river"\n', 5),
    ])
    def test_limit_reads_the_head_of_a_gigabyte_stream(self, tmp_path, name, line, captions):
        path = tmp_path / name
        if name.endswith(".csv.gz"):
            import gzip

            path.write_bytes(gzip.compress(b"caption\n") + _gzip_bomb(tmp_path / "rest.gz", line, 1 << 30).read_bytes())
        else:
            _gzip_bomb(path, line, 1 << 30)
        assert path.stat().st_size < 4 << 20
        summary, peak = _peak_bytes(lambda: info(path, "--limit", "5"))
        assert summary["n_captions"] == captions
        assert summary["examples"][0]["text"] == "a red car" + (", " if "csv" in name else " ") + "parked by the river"
        assert peak < 32 << 20, peak  # reading the whole stream holds over a gigabyte

    def test_limit_reads_further_while_blank_lines_and_a_split_leave_too_few(self, tmp_path):
        import gzip

        lines = [json.dumps({"caption": f"caption {k}", "split": "test" if k % 10 == 9 else "train"})
                 if k % 3 else "" for k in range(300)]
        (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
        summary = info(tmp_path / "d.jsonl.gz", "--limit", "7", "--split", "test")
        expected = [f"caption {k}" for k in range(300) if k % 3 and k % 10 == 9][:7]
        from capgeo.captions import load_captions

        assert load_captions(tmp_path / "d.jsonl.gz", limit=7, split="test").texts == expected
        assert summary["n_captions"] == 7

    def test_a_quoted_csv_cell_across_lines_is_not_cut(self, tmp_path):
        rows = "".join(f'{k},"caption {k}\nwith a second line"\n' for k in range(20))
        (tmp_path / "d.csv").write_text("id,caption\n" + rows)
        from capgeo.captions import load_captions

        captions = load_captions(tmp_path / "d.csv", limit=3)
        assert captions.texts == [f"caption {k}\nwith a second line" for k in range(3)]
        assert captions.ids == ["0", "1", "2"]
        (tmp_path / "d.txt").write_text("id,caption\n" + rows)  # CSV by --format, not by its name
        assert load_captions(tmp_path / "d.txt", format="csv", limit=3).texts == captions.texts

    @pytest.mark.parametrize("suffix", [".bz2", ".xz", ".zst", ""])
    @pytest.mark.parametrize("inner", [".txt", ".jsonl", ".csv", ".tsv"])
    def test_limit_on_every_compressor_gives_the_first_rows_of_the_whole_read(self, tmp_path, inner, suffix):
        import bz2
        import lzma

        rows = [f"caption {k}: a red car, by the river" for k in range(500)]
        text = {".txt": "\n".join(rows), ".jsonl": "\n".join(json.dumps({"caption": row}) for row in rows),
                ".csv": "caption\n" + "\n".join(f'"{row}"' for row in rows),
                ".tsv": "caption\n" + "\n".join(rows)}[inner].encode()
        if suffix == ".zst":
            zstandard = pytest.importorskip("zstandard")
            text = zstandard.ZstdCompressor().compress(text)
        elif suffix:
            text = {".bz2": bz2.compress, ".xz": lzma.compress}[suffix](text)
        path = tmp_path / f"d{inner}{suffix}"
        path.write_bytes(text)
        from capgeo.captions import load_captions

        whole = load_captions(path)
        for limit in (1, 7, 499, 500, 501):
            head = load_captions(path, limit=limit)
            assert head.texts == whole.texts[:limit] and head.ids == whole.ids[:limit]

    def test_an_endless_line_under_limit_is_refused(self, tmp_path, monkeypatch):
        from capgeo.captions import sources

        monkeypatch.setattr(sources, "MAX_LINE_BYTES", 4 << 20)
        _gzip_bomb(tmp_path / "zeros.txt.gz", b"\0" * 4096, 64 << 20)
        line = refused("info", tmp_path / "zeros.txt.gz", "--limit", "5")
        assert "zeros.txt.gz: line 1 runs on past 4 MiB without a line end" in line


# --- globs and brace ranges ---------------------------------------------------------------------

class TestGlobsAndBraceRanges:
    @pytest.mark.parametrize("pattern, count", [
        ("s/{00000000..99999999}.jsonl", "100,000,000"),
        ("s/{00000000..99999999}.tar", "100,000,000"),
        ("s/{0000..9999}-{0000..9999}.parquet", "100,000,000"),
        ("s/{0..1000000}.csv", "1,000,001"),
    ])
    def test_a_huge_brace_range_is_refused_before_any_name_is_made(self, tmp_path, monkeypatch, pattern, count):
        monkeypatch.chdir(tmp_path)
        (tmp_path / "s").mkdir()
        line, peak = _peak_bytes(lambda: refused("info", pattern))
        assert f"{pattern}: the brace pattern names {count} files, more than the 1,000,000" in line
        assert peak < 8 << 20, peak  # every name spelled out first held gigabytes

    def test_missing_shards_of_a_brace_range_are_counted_and_the_first_named(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        (tmp_path / "s").mkdir()
        for k in (0, 4, 9):
            (tmp_path / "s" / f"{k:02d}.jsonl").write_text('{"caption": "a red car"}\n')
        line = refused("info", "s/{00..09}.jsonl")
        assert line == ("Error: s/{00..09}.jsonl: 7 of the 10 shards it names do not exist: s/01.jsonl, s/02.jsonl, "
                        "s/03.jsonl, s/05.jsonl, s/06.jsonl and 2 more")

    def test_a_brace_range_within_the_cap_is_expanded_lazily_in_order(self):
        from itertools import islice

        from capgeo.captions.shards import iter_braces

        names = iter_braces("s/{a,b}-{000000..499999}.jsonl")
        assert list(islice(names, 3)) == ["s/a-000000.jsonl", "s/a-000001.jsonl", "s/a-000002.jsonl"]
        assert list(iter_braces("{3..1}{x,y}")) == ["3x", "3y", "2x", "2y", "1x", "1y"]

    @pytest.mark.parametrize("source, stem", [
        ("*.jsonl", "capgeo"), ("s/*.jsonl", "s"), ("s/{00..01}.jsonl", "s"), ("{a,b}.jsonl", "capgeo"),
        ("shards/part-{00000..00099}.parquet", "part"), ("x/*/train-*.parquet", "train"), ("p?.jsonl", "p"),
        ("shards/{000..009}.tar.gz", "shards"), ("captions.jsonl", "captions"), ("data/", "data"), (".", "capgeo"),
    ])
    def test_a_patterns_default_output_name_holds_no_pattern(self, source, stem):
        from capgeo.cli.options import default_output_stem

        assert default_output_stem(source) == stem

    @pytest.mark.slow  # a whole report: about 10 s on a 2-core machine
    def test_report_of_a_glob_writes_a_plain_default_name(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        (tmp_path / "s").mkdir()
        for k in range(2):
            (tmp_path / "s" / f"part-{k}.jsonl").write_text(
                "".join(json.dumps({"caption": f"a red car {k} {j}"}) + "\n" for j in range(4)))
        np.save(tmp_path / "V.npy", np.random.default_rng(0).normal(size=(8, 8)).astype(np.float32))
        result = CliRunner().invoke(main, ["report", "s/part-*.jsonl", "--encoder", "vectors:V.npy",
                                           "--batch-size", "4", "--no-gamma"])
        assert result.exit_code == 0, result.output
        assert sorted(path.name for path in tmp_path.iterdir()) == ["V.npy", "part.html", "s"]


# --- vectors ------------------------------------------------------------------------------------

def _forged_npy(shape: tuple, claimed: tuple, dtype=np.float32) -> bytes:
    """A .npy of an array of ``shape`` whose header claims ``claimed``."""
    import io

    array = np.zeros(shape, dtype)
    header = np.lib.format.header_data_from_array_1_0(array)
    header["shape"] = claimed
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + array.tobytes()


class TestVectors:
    N = 12

    @pytest.fixture
    def data(self, tmp_path) -> Path:
        path = tmp_path / "d.jsonl"
        path.write_text("".join(json.dumps({"caption": f"caption number {k}"}) + "\n" for k in range(self.N)))
        return path

    @pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
    def test_an_npz_whose_header_claims_16_gb_is_refused_before_allocating(self, tmp_path, data, compression):
        with zipfile.ZipFile(tmp_path / "v.npz", "w", compression) as archive:
            archive.writestr("vectors.npy", _forged_npy((self.N, 8), (self.N, 2 ** 25)))
        line, peak = _peak_bytes(lambda: refused("profile", data, "--encoder", f"vectors:{tmp_path / 'v.npz'}"))
        assert "v.npz: cannot read vectors: the file is cut short or its header damaged" in line
        assert "the 'vectors' array's header claims shape (12, 33554432) of float32, 1,610,612,736 bytes, more " \
            "than the file holds" in line
        assert peak < 64 << 20, peak

    def test_an_npz_ids_array_claiming_more_than_its_member_is_refused(self, tmp_path, data):
        with zipfile.ZipFile(tmp_path / "v.npz", "w") as archive:
            archive.writestr("vectors.npy", _forged_npy((self.N, 8), (self.N, 8)))
            archive.writestr("ids.npy", _forged_npy((self.N,), (2 ** 40,), dtype="<U4"))
        line = refused("profile", data, "--encoder", f"vectors:{tmp_path / 'v.npz'}")
        assert "the 'ids' array's header claims shape (1099511627776,)" in line

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_an_npy_whose_header_claims_more_than_the_file_is_refused(self, tmp_path, data, dtype):
        (tmp_path / "v.npy").write_bytes(_forged_npy((self.N, 8), (self.N, 2 ** 25), dtype))
        line, peak = _peak_bytes(lambda: refused("profile", data, "--encoder", f"vectors:{tmp_path / 'v.npy'}"))
        assert "v.npy: cannot read vectors: the file is cut short" in line
        assert f"{self.N * 2 ** 25 * np.dtype(dtype).itemsize:,} bytes, more than the file holds" in line
        assert peak < 64 << 20, peak

    @pytest.mark.parametrize("damage", [
        lambda header: header.replace(b"}", b'"'),           # an open string: numpy's tokenizer fails
        lambda header: header.replace(b"'shape'", b"'shap"),  # a broken dictionary
        lambda header: header[:20],                            # cut inside the header
    ])
    def test_a_damaged_npy_header_is_one_error_line(self, tmp_path, data, damage):
        whole = _forged_npy((self.N, 8), (self.N, 8))
        length = 10 + int.from_bytes(whole[8:10], "little")
        (tmp_path / "v.npy").write_bytes(damage(whole[:length]) + whole[length:])
        for option in ("--encoder", "--image-embeddings"):
            args = ["gamma", data, "--encoder", "vectors:" + str(tmp_path / "v.npy")] if option == "--encoder" else \
                ["gamma", data, "--encoder", "vectors:" + str(tmp_path / "ok.npy"), option, tmp_path / "v.npy"]
            np.save(tmp_path / "ok.npy", np.eye(self.N, 8, dtype=np.float32))
            line = refused(*args)
            assert "v.npy: cannot read vectors: the .npy header is damaged (" in line, line
            assert len(line) < 300


# --- formats ------------------------------------------------------------------------------------

class TestFormats:
    def test_a_parquet_caption_column_of_lists_is_read_as_lists_of_captions(self, tmp_path):
        import polars as pl

        rows = [["a red car", "a blue car"], ["a dog on grass"], None, ["a cat", "a kitten", "a tabby"]]
        pl.DataFrame({"caption": rows}).write_parquet(tmp_path / "lists.parquet")
        summary = info(tmp_path / "lists.parquet")
        # the same data as JSON lines, with the list under `captions`: the reference reading
        (tmp_path / "lists.jsonl").write_text("".join(json.dumps({"captions": row}) + "\n" for row in rows))
        reference = info(tmp_path / "lists.jsonl")
        assert summary["n_captions"] == reference["n_captions"] == 6
        assert summary["n_groups"] == reference["n_groups"] == 3
        from capgeo.captions import load_captions

        captions = load_captions(tmp_path / "lists.parquet")
        assert captions.texts == ["a red car", "a blue car", "a dog on grass", "a cat", "a kitten", "a tabby"]
        assert captions.groups == load_captions(tmp_path / "lists.jsonl").groups

    @pytest.mark.parametrize("column", ["caption", "captions"])
    def test_a_parquet_column_of_nested_lists_is_one_error_line(self, tmp_path, column):
        import polars as pl

        pl.DataFrame({column: [[["a red car"], ["a blue car"]], [["a dog"]]]}).write_parquet(tmp_path / "n.parquet")
        line = refused("info", tmp_path / "n.parquet")
        assert f"n.parquet: row 1, caption 1: {column!r} holds a list inside its list of captions" in line

    def test_a_parquet_list_column_named_as_text_says_to_use_captions_column(self, tmp_path):
        import polars as pl

        pl.DataFrame({"caption": [["a red car", "a blue car"]]}).write_parquet(tmp_path / "lists.parquet")
        line = refused("info", tmp_path / "lists.parquet", "--text-column", "caption")
        assert "caption should be text, found list" in line and "--captions-column" in line

    def test_a_dci_short_caption_that_is_a_number_is_refused(self, tmp_path):
        (tmp_path / "dci" / "complete").mkdir(parents=True)
        (tmp_path / "dci" / "complete" / "a.json").write_text('{"short_caption": "a car", "extra_caption": "red"}')
        (tmp_path / "dci" / "complete" / "b.json").write_text('{"short_caption": 42, "extra_caption": "a red car"}')
        line = refused("info", tmp_path / "dci")
        assert "b.json: 'short_caption' is a number; expected text" in line

    @pytest.mark.parametrize("images", [{"1": {"id": 1, "file_name": "a.jpg"}}, 5, "a.jpg"])
    def test_a_coco_file_whose_images_is_not_a_list_is_refused_when_detected(self, tmp_path, images):
        (tmp_path / "coco.json").write_text(json.dumps({"images": images, "annotations": [
            {"image_id": 1, "id": 1, "caption": "a cat"}, {"image_id": 1, "id": 2, "caption": "a kitten"}]}))
        line = refused("info", tmp_path / "coco.json")
        assert "coco.json: 'images' is" in line and "expected a list of" in line
