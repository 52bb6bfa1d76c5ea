"""Where outputs land: paths resolved as the file system resolves them, names the file system
takes, standard output only where it is meant, and write failures as one line.

Regression tests for a robustness pass: ``--json linkdir/../data.jsonl`` replaced the dataset
(the write resolved ``..`` by name, the clash check through the link).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo._atomic import atomic_open, atomic_path
from capgeo.cli import main
from capgeo.errors import CapgeoError


def _dataset(folder: Path, n: int = 12) -> Path:
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "image": f"img{i}", "caption": f"caption number {i}"}) + "\n"
                            for i in range(n)))
    return data


def test_dot_dot_after_a_link_is_where_the_link_leads_not_the_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = _dataset(tmp_path)
    before = data.read_bytes()
    (tmp_path / "elsewhere" / "sub").mkdir(parents=True)
    (tmp_path / "linkdir").symlink_to(tmp_path / "elsewhere" / "sub")
    result = CliRunner().invoke(main, ["info", "data.jsonl", "--json", "linkdir/../data.jsonl"])
    assert result.exit_code == 0, result.output
    assert data.read_bytes() == before  # the dataset is untouched
    written = json.loads((tmp_path / "elsewhere" / "data.jsonl").read_text())
    assert written["schema"] == "capgeo.info/1"


def test_an_output_that_is_a_link_is_written_through_to_its_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "target.json"
    target.write_text('{"schema": "capgeo.info/1"}\n')
    (tmp_path / "link.json").symlink_to(target)
    assert CliRunner().invoke(main, ["info", "data.jsonl", "--json", "link.json"]).exit_code == 0
    assert (tmp_path / "link.json").is_symlink()
    assert len(json.loads(target.read_text())) > 1  # the target holds the new result, not the stale one


def test_a_name_ending_in_a_slash_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path)
    result = CliRunner().invoke(main, ["info", "data.jsonl", "--json", "newdir/"])
    assert result.exit_code == 2 and "that names a folder" in result.output
    assert not (tmp_path / "newdir").exists()
    dot = CliRunner().invoke(main, ["info", "data.jsonl", "--json", "newdir/."])
    assert dot.exit_code == 2 and "that names a folder" in dot.output and not (tmp_path / "newdir").exists()


def test_long_names_the_file_system_takes_work_and_longer_ones_fail_before_the_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path)
    longest = "a" * 250 + ".json"  # 255 bytes: the temporary file's name must not grow past the limit
    assert CliRunner().invoke(main, ["info", "data.jsonl", "--json", longest]).exit_code == 0
    assert (tmp_path / longest).is_file()
    result = CliRunner().invoke(main, ["info", "data.jsonl", "--json", "a" * 252 + ".json"])
    assert result.exit_code == 2 and "longer than this file system allows" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data.jsonl", longest])


def test_dash_is_standard_output_only_for_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path)
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32))
    for args in (["dupes", "data.jsonl", "--encoder", "vectors:v.npy", "-o", "-"],
                 ["report", "data.jsonl", "--encoder", "vectors:v.npy", "-o", "-"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "standard output" in result.output, args
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("raised", [
    OSError("115200 requested and 4064 written"),  # numpy's tofile on a full disk: no errno
    RuntimeError("parquet: failed to write: No space left on device (os error 28)"),  # polars' ComputeError
])
def test_a_full_disk_is_one_line_whichever_library_wrote(tmp_path, monkeypatch, raised):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9, 0))
    with pytest.raises(CapgeoError, match="No space left on device; free space"):
        with atomic_path(tmp_path / "out.npy"):
            raise raised
    assert list(tmp_path.iterdir()) == []


def test_a_short_write_with_room_left_is_a_file_size_limit_not_a_full_disk(tmp_path):
    """numpy says only "N requested and M written"; with the disk far from full the limit was the
    file's size (ulimit -f, FAT32's 4 GB), which the message must not call a full disk."""
    with pytest.raises(CapgeoError, match="File too large"):
        with atomic_path(tmp_path / "out.npy"):
            raise OSError("115200 requested and 4064 written")


def test_other_errors_are_not_mistaken_for_a_full_disk(tmp_path):
    with pytest.raises(RuntimeError, match="os error 2\\)"):
        with atomic_path(tmp_path / "out.npy"):
            raise RuntimeError("cannot open (os error 2)")  # ENOENT is not a write error capgeo explains


def test_an_interrupt_while_the_temporary_file_is_prepared_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "chmod", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(tmp_path / "out.json") as handle:
            handle.write("{}")
    assert list(tmp_path.iterdir()) == []


def _run(args, **env):
    return subprocess.run([sys.executable, "-m", "capgeo", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_standard_output_on_a_full_device_is_one_line(tmp_path):
    data = _dataset(tmp_path)
    for args in (["info", str(data)], ["info", str(data), "--json"]):
        with open("/dev/full", "w") as full:
            result = subprocess.run([sys.executable, "-m", "capgeo", *args], stdout=full, stderr=subprocess.PIPE,
                                    text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == ["Error: cannot write the output: No space left on device"]


def test_a_terminal_that_cannot_encode_a_caption_gets_a_question_mark_not_a_traceback(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "image": f"i{i}", "caption": f"café crème n°{i} 東京"},
                                       ensure_ascii=False) + "\n" for i in range(6)), encoding="utf-8")
    result = _run(["info", str(data)], PYTHONIOENCODING="ascii")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "caf? cr?me" in result.stdout


def test_texts_with_a_nul_do_not_share_a_digest_with_other_texts():
    from capgeo.captions.model import texts_sha256
    from capgeo.encoders.cache import texts_digest

    assert texts_sha256(["red car\x00blue boat", "green tree"]) != texts_sha256(["red car", "blue boat\x00green tree"])
    assert texts_digest(["a\x00b", "c"]) == texts_sha256(["a\x00b", "c"])
    assert texts_sha256(["a\x00", ""]) != texts_sha256(["a", "\x00"])


def test_cache_folder_given_empty_is_refused_and_a_link_to_a_folder_not_made_yet_is_followed(tmp_path):
    from capgeo.encoders.cache import CacheEntry
    from capgeo.preflight import check_cache_folder

    with pytest.raises(CapgeoError, match="--cache-dir '': expected a folder"):
        check_cache_folder("")
    link = tmp_path / "cache-link"
    link.symlink_to(tmp_path / "later" / "cache")
    check_cache_folder(str(link))
    entry = CacheEntry(str(link), "k" * 8, 3, 4)
    assert entry.folder == tmp_path / "later" / "cache" / "embeddings" / ("k" * 8)


def test_a_multibyte_name_near_the_limit_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path)
    name = "é" * 120 + ".json"  # 245 bytes, 125 characters
    assert CliRunner().invoke(main, ["info", "data.jsonl", "--json", name]).exit_code == 0
    assert (tmp_path / name).is_file()


def test_tilde_is_the_home_folder_for_the_write_and_for_the_checks(tmp_path, monkeypatch):
    """--json '~/train.jsonl' (no shell to expand it) was written to $HOME while the guard against
    overwriting a dataset looked at ./~/train.jsonl, found nothing, and let the dataset be replaced."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    data = _dataset(tmp_path)
    train = home / "train.jsonl"
    train.write_bytes(data.read_bytes())
    result = CliRunner().invoke(main, ["info", "data.jsonl", "--json", "~/train.jsonl"])
    assert result.exit_code == 2 and "not a capgeo result" in result.output
    assert train.read_bytes() == data.read_bytes()
    assert CliRunner().invoke(main, ["info", "data.jsonl", "--json", "~/new.json"]).exit_code == 0
    assert (home / "new.json").is_file() and not (tmp_path / "~").exists()


def test_rows_to_a_terminal_that_is_not_utf8_stay_utf8(tmp_path):
    data = tmp_path / "u.jsonl"
    data.write_text("".join(json.dumps({"id": f"é{i}", "image": f"图{i // 2}", "caption": f"Straße Café {i}"},
                                       ensure_ascii=False) + "\n" for i in range(12)), encoding="utf-8")
    np.save(tmp_path / "v.npy", np.random.default_rng(1).normal(size=(12, 8)).astype(np.float32))
    result = subprocess.run([sys.executable, "-m", "capgeo", "dupes", str(data), "--encoder",
                             f"vectors:{tmp_path / 'v.npy'}", "--output-format", "jsonl", "--threshold", "-1",
                             "--top", "2"], capture_output=True, timeout=120,
                            env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.decode("utf-8").splitlines()]
    assert len(rows) == 2 and all(row["id_a"].startswith("é") for row in rows)


def test_a_loop_of_links_as_an_output_or_a_cache_is_one_line(tmp_path, monkeypatch):
    from capgeo.preflight import check_cache_folder

    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path)
    (tmp_path / "la").symlink_to(tmp_path / "lb")
    (tmp_path / "lb").symlink_to(tmp_path / "la")
    result = CliRunner().invoke(main, ["info", "data.jsonl", "--json", "la"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    with pytest.raises(CapgeoError, match="loop"):
        check_cache_folder(str(tmp_path / "la"))


def test_report_written_to_the_home_folder_says_where(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    _dataset(tmp_path)
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32))
    result = CliRunner().invoke(main, ["report", "data.jsonl", "--encoder", "vectors:v.npy", "--no-gamma",
                                       "--no-dupes", "--batch-size", "4", "-o", "~/r.html"])
    assert result.exit_code == 0, result.output
    assert f"Wrote {home / 'r.html'}" in result.output


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_help_and_version_on_a_full_device_are_one_line():
    for args in (["--help"], ["--version"]):
        with open("/dev/full", "w") as full:
            result = subprocess.run([sys.executable, "-m", "capgeo", *args], stdout=full, stderr=subprocess.PIPE,
                                    text=True, timeout=120)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == ["Error: cannot write the output: No space left on device"]


def test_a_write_the_disk_cuts_short_is_completed_or_fails(tmp_path, monkeypatch):
    """`> file` on a disk that filled mid-write: the buffered write returned a short count nobody
    checked and the output ended mid-row with status 0. write_all loops on short writes and lets
    the error of the next one through."""
    from capgeo import _atomic

    real_write = os.write
    monkeypatch.setattr(_atomic.os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    with open(tmp_path / "out", "w") as stream:
        _atomic.write_all(stream, b"x" * 100 + b"\n")
    assert (tmp_path / "out").read_bytes() == b"x" * 100 + b"\n"

    written = []

    def full_after_some(fd, data):
        if written:
            raise OSError(28, "No space left on device")
        written.append(real_write(fd, bytes(data[:10])))
        return written[-1]

    monkeypatch.setattr(_atomic.os, "write", full_after_some)
    with open(tmp_path / "full", "w") as stream, pytest.raises(OSError) as caught:
        _atomic.write_all(stream, b"y" * 100)
    assert caught.value.errno == 28


def test_a_fifo_as_output_is_written_into_not_replaced(tmp_path, monkeypatch):
    """A device or FIFO given as an output was replaced by a regular file (the temporary file renamed
    over it): as root, `--json /dev/null` would have replaced the system's /dev/null."""
    import stat
    import threading

    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = CliRunner().invoke(main, ["info", "data.jsonl", "--json", str(fifo)])
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(received[0])["schema"].startswith("capgeo.")


def test_dev_stdout_as_an_output_reaches_the_reader(tmp_path):
    """/dev/stdout resolved to /proc/<pid>/fd/pipe:[...], which cannot be opened ("No such file")."""
    data = _dataset(tmp_path)
    result = subprocess.run([sys.executable, "-m", "capgeo", "info", str(data), "--json", "/dev/stdout"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    head, _, _ = result.stdout.partition("\n}\n")
    assert json.loads(head + "\n}")["schema"].startswith("capgeo.")


def test_a_folder_in_the_way_of_a_write_is_one_line(tmp_path):
    """A folder where a cache chunk's file goes: the rename failed with a raw IsADirectoryError."""
    (tmp_path / "chunk.npy").mkdir()
    with pytest.raises(CapgeoError, match="a folder of that name is in the way"):
        with atomic_path(tmp_path / "chunk.npy") as part:
            np.save(part, np.zeros(3))


def test_a_text_that_is_not_unicode_is_named_not_a_traceback():
    from capgeo.captions.model import texts_sha256
    from capgeo.errors import DataError

    with pytest.raises(DataError, match=r"text 1: holds '\\ud800', half of a UTF-16 surrogate pair"):
        texts_sha256(["a dog", "a cat \ud800"])


def test_json_to_dev_stdout_redirected_to_a_file_keeps_what_is_there(tmp_path):
    """`--json /dev/stdout >> log` reopened the name, truncating the log and writing from its start;
    with `>` the terminal summary then overwrote the JSON."""
    data = _dataset(tmp_path)
    log = tmp_path / "log.txt"
    log.write_text("IMPORTANT LINE\n")
    with open(log, "a") as appended:
        result = subprocess.run([sys.executable, "-m", "capgeo", "info", str(data), "--json", "/dev/stdout"],
                                stdout=appended, stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    text = log.read_text()
    assert text.startswith("IMPORTANT LINE\n")
    assert json.loads(text[len("IMPORTANT LINE\n"):])["schema"] == "capgeo.info/1"  # the JSON alone, whole
    with open(tmp_path / "out.json", "w") as fresh:
        subprocess.run([sys.executable, "-m", "capgeo", "info", str(data), "--json", "/dev/stdout"], stdout=fresh,
                       stderr=subprocess.PIPE, text=True, timeout=120, check=True)
    assert json.loads((tmp_path / "out.json").read_text())["schema"] == "capgeo.info/1"


def test_json_to_a_closed_stdout_and_to_a_descriptor_that_is_not_open(tmp_path):
    data = _dataset(tmp_path)
    closed = subprocess.run(f"{sys.executable} -m capgeo info {data} --json - >&-", shell=True,
                            capture_output=True, text=True, timeout=120)
    assert closed.returncode == 2 and "Traceback" not in closed.stderr
    assert closed.stderr.strip() == "Error: cannot write the output: standard output is closed"
    result = CliRunner().invoke(main, ["info", str(data), "--json", "/dev/fd/57"])
    assert result.exit_code == 2 and "descriptor 57 is not open" in result.output


def test_an_empty_output_name_is_said_to_be_empty(tmp_path):
    data = _dataset(tmp_path)
    result = CliRunner().invoke(main, ["info", str(data), "--json", ""])
    assert result.exit_code == 2 and "an empty file name" in result.output


def test_two_outputs_on_standard_output_by_different_names_are_refused():
    from capgeo.paths import check_output_paths

    with pytest.raises(CapgeoError, match="both would write to standard output"):
        check_output_paths({}, {"--output": "/dev/stdout", "--json": "-"})
    check_output_paths({}, {"--output": "rows.jsonl", "--json": "-"})  # one each: fine


def test_a_saved_profile_named_txt_is_not_read_as_captions(tmp_path):
    data = _dataset(tmp_path)
    result = CliRunner().invoke(main, ["info", str(data), "--json", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    (tmp_path / "p.txt").write_text((tmp_path / "p.json").read_text())
    result = CliRunner().invoke(main, ["info", str(tmp_path / "p.txt")])
    assert result.exit_code == 2 and "result capgeo wrote, not a dataset" in result.output


def test_parquet_rows_to_stdout_redirected_to_a_file_are_refused_before_the_work(tmp_path):
    from _action_fixtures import vectors_dataset

    data, encoder = vectors_dataset(tmp_path, 20)
    with open(tmp_path / "rows.parquet", "w") as redirected:
        result = subprocess.run([sys.executable, "-m", "capgeo", "dupes", str(data), "--encoder", encoder,
                                 "--output-format", "parquet", "-o", "/dev/stdout"], stdout=redirected,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 2
    assert "it is redirected to a file here" in result.stderr and "scan" not in result.stderr.lower()


def test_the_files_an_encoder_spec_reads_are_its_inputs_and_no_others(tmp_path, monkeypatch):
    """The config read with a checkpoint and a local-dir folder's files are protected; a .json beside a
    MODEL@ckpt checkpoint (which builds from open_clip's own config) and new files in a model folder are
    not, and an empty local-dir: is left to the encoder's own error."""
    from capgeo.paths import encoder_input_files

    monkeypatch.chdir(tmp_path)
    for name in ("ckpt.pt", "ckpt.json", "open_clip_config.json", "cfg.json", "alone.pt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "model").mkdir()
    for name in ("open_clip_config.json", "open_clip_pytorch_model.bin", "extra.pth"):
        (tmp_path / "model" / name).write_text("x")
    assert encoder_input_files("ckpt.pt") == ["ckpt.pt", str(Path("ckpt.json"))]  # the one the loader reads
    assert encoder_input_files("alone.pt") == ["alone.pt", str(Path("open_clip_config.json"))]
    assert encoder_input_files("ViT-B-32@ckpt.pt") == ["ckpt.pt"]
    assert encoder_input_files("cfg.json@ckpt.pt") == ["ckpt.pt", "cfg.json"]
    assert encoder_input_files("local-dir:model") == [str(Path("model/open_clip_config.json")),
                                                      str(Path("model/open_clip_pytorch_model.bin"))]
    assert encoder_input_files("local-dir:") == [] and encoder_input_files("local-dir:absent") == []
    assert encoder_input_files("vectors:v.npy") == ["v.npy"] and encoder_input_files(None) == []
