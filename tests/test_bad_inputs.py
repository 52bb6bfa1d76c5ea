"""The bad-input catalogue (docs/errors.md): each row is a user mistake or fault run
through the real command line, which must answer with exit code 2 and one
`Error:` line saying what is wrong, with no traceback, and leave every file in
the working folder as it was (nothing overwritten, nothing half-written).

Cases use `vectors:` files or fail before any encoder is loaded, so the table
runs in seconds. The full-disk rows need a small tmpfs (root and `mount`) and
are skipped with the reason elsewhere.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from capgeo.cli import main

N_CAPTIONS, N_GROUPS, WIDTH = 12, 6, 8
PROFILE_ARGS = "--encoder vectors:V.npy --batch-size 4 --n-batches 3"

#: (case id, command line, fragment of the Error line, extra environment)
CATALOGUE = [
    # outputs over inputs
    ("profile-json-over-data", "profile D.jsonl --json D.jsonl", "would overwrite the input DATA", {}),
    ("report-output-over-data", "report D.jsonl -o D.jsonl", "would overwrite the input DATA", {}),
    ("encode-parquet-over-data", "encode C.parquet -o C.parquet", "would overwrite the input DATA", {}),
    ("encode-output-over-vectors", "encode D.jsonl --encoder vectors:V.npy -o V.npy",
     "would overwrite the input --encoder V.npy", {}),
    ("info-json-over-data", "info D.jsonl --json D.jsonl", "would overwrite the input DATA", {}),
    ("dupes-output-over-data", "dupes D.jsonl --encoder vectors:V.npy -o D.jsonl", "would overwrite the input", {}),
    ("dupes-json-over-vectors", "dupes D.jsonl --encoder vectors:V.npy --json V.npy", "would overwrite the input", {}),
    ("gamma-json-over-data", "gamma D.jsonl --encoder vectors:V.npy --json D.jsonl", "would overwrite the input", {}),
    ("gamma-json-over-image-vectors", "gamma D.jsonl --encoder vectors:V.npy --image-embeddings I.npy --json I.npy",
     "would overwrite the input --image-embeddings", {}),
    ("truncation-json-over-data", "truncation D.jsonl --json D.jsonl", "would overwrite the input DATA", {}),
    ("report-over-saved-profile", "report P.json -o P.json", "would overwrite the input DATA", {}),
    ("compare-over-a-source", "compare P.json P2.json -o P2.json", "would overwrite the input SOURCES", {}),
    ("json-over-file-in-dataset-folder", "info ds --json ds/D.jsonl", "(it holds ds/D.jsonl)", {}),
    ("new-output-inside-dataset-folder", "info ds --json ds/new.txt", "inside the input DATA folder", {}),
    # --json takes its FILE optionally: here it takes the training set, and two EVAL files remain
    ("leak-json-takes-the-training-set", "leak --json D.jsonl C.parquet C.parquet --encoder vectors:V.npy",
     "is not a capgeo result", {}),
    ("json-over-a-dataset-not-read", "info C.parquet --json D.jsonl", "is not a capgeo result", {}),
    ("json-over-checkpoint", "profile D.jsonl --encoder ViT-B-32@ckpt.pt --json ckpt.pt",
     "would overwrite the input --encoder ckpt.pt", {}),
    ("output-over-encoder-config", "dupes D.jsonl --encoder cfg.json@ckpt.pt -o cfg.json",
     "would overwrite the input --encoder cfg.json", {}),
    ("output-over-config-beside-checkpoint", "dupes D.jsonl --encoder beside.pt -o beside.json",
     "would overwrite the input --encoder beside.json", {}),
    ("output-over-local-dir-files", "dupes D.jsonl --encoder local-dir:model -o model/open_clip_config.json",
     "would overwrite the input --encoder model", {}),
    ("output-over-dci-splits", "report dci/complete -o dci/splits.json",
     "would overwrite the input DATA dci/splits.json", {}),
    ("output-over-data-through-symlink", "report link.jsonl -o D.jsonl", "would overwrite the input DATA", {}),
    ("output-over-data-by-other-spelling", "profile D.jsonl --json sub/../D.jsonl", "would overwrite the input", {}),
    ("report-save-profile-over-data", "report D.jsonl --save-profile D.jsonl -o r.html",
     "would overwrite the input", {}),
    ("report-default-output-over-data", "report D.html", "would overwrite the input DATA", {}),
    ("per-caption-over-data", "profile D.jsonl --encoder vectors:V.npy --batch-size 4 --per-caption D.jsonl",
     "would overwrite the input DATA", {}),
    ("drop-list-over-data", "dupes-sets D.jsonl --encoder vectors:V.npy --drop-list D.jsonl",
     "would overwrite the input DATA", {}),
    # one output over another
    ("encode-output-and-json-same", "encode D.jsonl --encoder vectors:V.npy -o a.parquet --json a.parquet",
     "one would overwrite the other", {}),
    ("report-save-profile-and-output-same", "report D.jsonl --save-profile x.html -o x.html",
     "one would overwrite the other", {}),
    ("dupes-output-and-json-same", "dupes D.jsonl --encoder vectors:V.npy -o o.txt --json ./o.txt",
     "one would overwrite the other", {}),
    # numbers no option takes: NaN passed click's range checks, a negative seed reached numpy
    ("gamma-hard-edge-nan", "gamma D.jsonl --encoder vectors:V.npy --hard-edge nan", "is not a finite number", {}),
    ("profile-threshold-nan", "profile D.jsonl --near-duplicate-threshold nan", "is not a finite number", {}),
    ("profile-logit-scale-inf", "profile D.jsonl --logit-scale inf", "is not a finite number", {}),
    ("gamma-grid-inf", "gamma D.jsonl --grid 0,inf", "finite gamma values", {}),
    ("profile-buckets-nan", "profile D.jsonl --buckets 0.5,nan", "expected finite numbers", {}),
    ("profile-seed-negative", "profile D.jsonl --seed -1", "-1 is not in the range x>=0", {}),
    ("dupes-seed-negative", "dupes-sets D.jsonl --keep random --seed -3", "not in the range", {}),
    # refused before the encoder loads (a vectors file that does not exist would be the error otherwise)
    ("gamma-image-rows-before-encoding", "gamma D.jsonl --encoder vectors:absent.npy --image-embeddings short.npy",
     "5 image vectors, but the dataset has 6 groups", {}),
    # option checks before encoding, worded alike in every command
    ("profile-buckets-descending", "profile D.jsonl --buckets 0.9,0.8",
     "--buckets: edges must be strictly ascending", {}),
    ("truncation-buckets-descending", "truncation D.jsonl --buckets 0.9,0.8",
     "--buckets: edges must be strictly ascending", {}),
    ("profile-bucket-not-a-cosine", "profile D.jsonl --buckets 0.5,2", "every edge must be a cosine", {}),
    ("profile-buckets-not-numbers", "profile D.jsonl --buckets 0.8,x", "comma-separated numbers", {}),
    ("profile-relative-quantiles-descending", "profile D.jsonl --relative-quantiles 0.9,0.5",
     "--relative-quantiles: expected strictly ascending levels", {}),
    ("profile-relative-quantile-above-1", "profile D.jsonl --relative-quantiles 0.5,1.5",
     "--relative-quantiles: expected strictly ascending levels", {}),
    ("profile-one-image", "profile one.jsonl", "belong to one group (image)", {}),
    ("gamma-one-image", "gamma one.jsonl", "belong to one group (image)", {}),
    ("truncation-one-image", "truncation one.jsonl", "belong to one group (image)", {}),
    ("report-one-image", "report one.jsonl -o r.html", "belong to one group (image)", {}),
    ("dupes-one-image", "dupes one.jsonl", "belong to one group (image)", {}),
    ("compare-one-image", "compare one.jsonl D.jsonl", "belong to one group (image)", {}),
    ("gamma-n-batches-runaway", "gamma D.jsonl --n-batches 100000000", "--n-batches: expected at most 100,000", {}),
    ("profile-n-batches-runaway", "profile D.jsonl --n-batches 100000000", "--n-batches: expected at most 100,000", {}),
    ("report-n-batches-runaway", "report D.jsonl --n-batches 100000000 -o r.html",
     "--n-batches: expected at most 100,000", {}),
    ("truncation-n-batches-runaway", "truncation D.jsonl --n-batches 100000000",
     "--n-batches: expected at most 100,000", {}),
    ("compare-n-batches-runaway", "compare P.json P2.json --n-batches 100000000",
     "--n-batches: expected at most 100,000", {}),
    ("profile-top-k-runaway", "profile D.jsonl --top-k 5000", "--top-k: expected at most 1,000", {}),
    ("dupes-top-k-runaway", "dupes D.jsonl --top-k 5000", "--top-k: expected at most 1,000", {}),
    ("truncation-top-k-runaway", "truncation D.jsonl --top-k 5000", "--top-k: expected at most 1,000", {}),
    ("profile-sampled-pairs-runaway", "profile D.jsonl --mode sampled --sampled-pairs 1000000000",
     "--sampled-pairs: expected at most 50,000,000", {}),
    ("profile-n-batches-zero", "profile D.jsonl --n-batches 0", "Invalid value for '--n-batches'", {}),
    ("profile-cache-under-a-file", "profile D.jsonl", "cannot write the embedding cache",
     {"CAPGEO_CACHE": "blocker/cache"}),
    ("encode-cache-dir-under-a-file", "encode D.jsonl --cache-dir blocker/cache",
     "cannot write the embedding cache", {}),
    ("gamma-cache-under-a-file", "gamma D.jsonl", "(CAPGEO_CACHE): blocker is not a folder",
     {"CAPGEO_CACHE": "blocker/cache"}),
    ("dupes-cache-under-a-file", "dupes D.jsonl", "cannot write the embedding cache",
     {"CAPGEO_CACHE": "blocker/cache"}),
    ("encode-output-suffix", "encode D.jsonl -o out.txt", "must end in .npy, .npz or .parquet", {}),
    ("encode-output-under-a-file", "encode D.jsonl -o blocker/out.npy", "is not a writable folder", {}),
    ("report-output-is-a-folder", "report D.jsonl -o sub", "is a directory", {}),
    ("dupes-examples-one-image", "dupes-examples one.jsonl", "belong to one group (image)", {}),
    ("dupes-sets-top-k-runaway", "dupes-sets D.jsonl --top-k 5000", "--top-k: expected at most 1,000", {}),
    ("gamma-negative-grid", "gamma D.jsonl --grid -1", "expected one or more finite gamma values >= 0", {}),
    ("truncation-lengths-not-numbers", "truncation D.jsonl --lengths 32,abc", "comma-separated token counts", {}),
    ("profile-max-tokens-1", "profile D.jsonl --max-tokens 1", "Invalid value for '--max-tokens'", {}),
    ("encode-precomputed-max-tokens", "encode D.jsonl --encoder vectors:V.npy --max-tokens 16",
     "cannot be re-cut", {}),
    # vector files
    ("vectors-random-bytes", "profile D.jsonl --encoder vectors:random.npy", "not a plain numeric array file", {}),
    ("vectors-wrong-row-count", "profile D.jsonl --encoder vectors:short.npy", "short.npy", {}),
    ("vectors-nan", "encode D.jsonl --encoder vectors:nan.npy", "nan.npy", {}),
    ("vectors-missing", "encode D.jsonl --encoder vectors:missing.npy", "vector file not found", {}),
    ("vectors-a-folder", "encode D.jsonl --encoder vectors:sub", "vector file sub is a folder, not a file", {}),
    ("vectors-parquet-no-rows", "encode D.jsonl --encoder vectors:empty.parquet", "has no rows", {}),
    ("vectors-npz-scalar-ids", "encode D.jsonl --encoder vectors:scalar-ids.npz", "must be one-dimensional", {}),
    ("checkpoint-a-folder", "encode D.jsonl --encoder ViT-B-32@sub", "checkpoint file sub is a folder, not a file", {}),
    ("checkpoint-empty-after-at", "encode D.jsonl --encoder ViT-B-32@", "names no checkpoint file after '@'", {}),
    ("unknown-encoder-spec", "encode D.jsonl --encoder nonsense", "unknown encoder spec", {}),
    ("unknown-device", "encode D.jsonl --device tpu9", "--device 'tpu9': expected cpu", {}),
    # weight files that cannot be read (capgeo/encoders/checkpoint.py)
    ("checkpoint-random-bytes", "encode D.jsonl --encoder ViT-B-32@ckpt.pt --device cpu",
     "ckpt.pt: not a PyTorch checkpoint", {}),
    ("checkpoint-garbage-safetensors", "encode D.jsonl --encoder ViT-B-32@garbage.safetensors --device cpu",
     "garbage.safetensors: not a readable safetensors file", {}),
    ("checkpoint-truncated-zip", "encode D.jsonl --encoder ViT-B-32@truncated.pt --device cpu",
     "truncated.pt: truncated or damaged PyTorch zip archive", {}),
    # captions
    ("integer-captions-parquet", "info ints.parquet --text-column caption", "caption should be text, found int", {}),
    ("integer-captions-jsonl", "info ints.jsonl", "caption should be text, found int", {}),
    ("only-invisible-captions", "info invisible.jsonl", "no visible character", {}),
    ("data-missing", "profile nothing.jsonl", "nothing.jsonl: no such file or folder", {}),
    ("malformed-jsonl", "info bad.jsonl", "bad.jsonl", {}),
    ("empty-file", "profile empty.jsonl", "empty.jsonl", {}),
    ("csv-without-text-column", "info nocol.csv", "nocol.csv", {}),
    ("text-column-missing", "info D.jsonl --text-column nope", "nope", {}),
    ("split-not-in-file", "info D.jsonl --split test", "split", {}),
    ("duplicate-caption-ids", "profile dupids.jsonl", "dupids.jsonl", {}),
    ("saved-profile-wrong-schema", "report notprofile.json -o r.html", "notprofile.json", {}),
    ("compare-one-source", "compare P.json", "at least two profiles", {}),
    ("karpathy-sentids-not-a-list", "info karpathy.json", "images[0].sentids is a number", {}),
    ("coco-images-not-a-list", "info cocoimages.json --format coco", "'images' is a number", {}),
    ("filename-caption-filename-a-list", "info filenames.json", "record 1: 'filename' is a list", {}),
    ("compare-label-count", "compare P.json P2.json --label a", "--label given 1 times for 2 profiles", {}),
    # compressed files and webdataset shards (docs/formats.md)
    ("truncated-gz", "profile cut.jsonl.gz --encoder vectors:V.npy --json out.json", "cut.jsonl.gz: the gzip stream "
     "ends early", {}),
    ("truncated-zst", "info cut.jsonl.zst --json out.json", "cut.jsonl.zst: the zstd stream ends early", {}),
    ("truncated-tar", "info cut.tar --json out.json", "cut.tar: the tar is truncated or damaged in sample 000000001",
     {}),
    ("tar-member-escapes", "info escape.tar", "escape.tar: member '../up.txt' has a name that escapes the archive",
     {}),
    ("json-integer-too-long", "info long-id.jsonl", "a number of 5,000 digits", {}),
    ("json-nested-too-deeply", "info deep.json", "nested too deeply", {}),
]

#: what numpy says about a pickled .npy: advice that would run code from an unknown file
UNSAFE_ADVICE = "allow_pickle"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """The files the catalogue reads, made once; each case works on a copy."""
    folder = tmp_path_factory.mktemp("bad-inputs")
    rng = np.random.default_rng(0)
    records = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"a red cat {i} sits on mat {i % 3}"}
               for i in range(N_CAPTIONS)]
    write_jsonl(folder / "D.jsonl", records)
    (folder / "D.html").write_text((folder / "D.jsonl").read_text())  # a dataset whose default report is itself
    pl.DataFrame({"caption": [r["caption"] for r in records]}).write_parquet(folder / "C.parquet")
    np.save(folder / "V.npy", rng.normal(size=(N_CAPTIONS, WIDTH)).astype(np.float32))
    np.save(folder / "I.npy", rng.normal(size=(N_GROUPS, WIDTH)).astype(np.float32))
    np.save(folder / "short.npy", rng.normal(size=(5, WIDTH)).astype(np.float32))
    nan = rng.normal(size=(N_CAPTIONS, WIDTH)).astype(np.float32)
    nan[3, 2] = np.nan
    np.save(folder / "nan.npy", nan)
    (folder / "random.npy").write_bytes(rng.bytes(4096))
    (folder / "ckpt.pt").write_bytes(rng.bytes(1024))
    (folder / "garbage.safetensors").write_bytes(b"\xff" * 64 + rng.bytes(512))
    import torch

    torch.save({"positional_embedding": torch.zeros(77, 8)}, folder / "whole.pt")
    whole = (folder / "whole.pt").read_bytes()
    (folder / "truncated.pt").write_bytes(whole[: len(whole) // 2])
    write_jsonl(folder / "one.jsonl", [{"id": f"o{i}", "image": "same", "caption": f"caption {i}"} for i in range(3)])
    pl.DataFrame({"caption": [1, 2, 3]}).write_parquet(folder / "ints.parquet")
    write_jsonl(folder / "ints.jsonl", [{"caption": i} for i in range(3)])
    write_jsonl(folder / "invisible.jsonl", [{"caption": "\u200b\u200d"}, {"caption": "\x07\u2060"}])
    write_jsonl(folder / "dupids.jsonl", [{"id": "same", "caption": "one"}, {"id": "same", "caption": "two"}])
    (folder / "bad.jsonl").write_text('{"caption": "fine"}\n{"caption": "broken\n')
    (folder / "empty.jsonl").write_text("")
    (folder / "nocol.csv").write_text("a,b\n1,2\n")
    (folder / "notprofile.json").write_text(json.dumps({"schema": "something/else", "dataset": {}}))
    (folder / "blocker").write_text("a file where a folder is expected")
    (folder / "cfg.json").write_text("{}")
    (folder / "beside.pt").write_bytes(b"weights")
    (folder / "beside.json").write_text("{}")
    (folder / "model").mkdir()
    (folder / "model" / "open_clip_config.json").write_text('{"model_cfg": {}}')
    (folder / "dci" / "complete").mkdir(parents=True)
    (folder / "dci" / "complete" / "img1.json").write_text('{"short_caption": "s", "extra_caption": "e"}')
    (folder / "dci" / "splits.json").write_text('{"test": ["img1.json"]}')
    pl.DataFrame({"vector": pl.Series([], dtype=pl.List(pl.Float64))}).write_parquet(folder / "empty.parquet")
    np.savez(folder / "scalar-ids.npz", vectors=rng.normal(size=(2, WIDTH)).astype(np.float32), ids=np.array("c1"))
    (folder / "karpathy.json").write_text(json.dumps({"images": [
        {"filename": "a.jpg", "sentids": 5, "sentences": [{"raw": "a cat", "sentid": 1}]},
        {"filename": "b.jpg", "sentences": [{"raw": "a dog", "sentid": 2}]}]}))
    (folder / "cocoimages.json").write_text(json.dumps({"images": 5, "annotations": [
        {"image_id": 1, "id": 1, "caption": "a cat"}, {"image_id": 2, "id": 2, "caption": "a dog"}]}))
    (folder / "filenames.json").write_text(json.dumps([{"filename": ["a.jpg"], "caption": "a cat"},
                                                       {"filename": "b.jpg", "caption": "a dog"}]))
    _compressed_and_shards(folder)
    (folder / "ds").mkdir()
    shutil.copy(folder / "D.jsonl", folder / "ds" / "D.jsonl")
    (folder / "sub").mkdir()
    (folder / "link.jsonl").symlink_to("D.jsonl")
    for name, seed in (("P.json", 0), ("P2.json", 1)):
        result = CliRunner().invoke(main, ["profile", str(folder / "D.jsonl"), *shlex.split(PROFILE_ARGS.replace(
            "V.npy", str(folder / "V.npy"))), "--seed", str(seed), "--no-gamma", "--json", str(folder / name)])
        assert result.exit_code == 0, result.output
    return folder


def _compressed_and_shards(folder: Path) -> None:
    import gzip
    import io
    import tarfile

    lines = b"".join(b'{"caption": "caption number %d"}\n' % k for k in range(2000))
    packed = gzip.compress(lines)
    (folder / "cut.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    zstandard = pytest.importorskip("zstandard")
    packed = zstandard.ZstdCompressor().compress(lines)
    (folder / "cut.jsonl.zst").write_bytes(packed[: len(packed) // 2])
    for name, members in (("cut.tar", [(f"{k:09d}.{suffix}", data) for k in range(3)
                                       for suffix, data in (("jpg", bytes(3000)), ("txt", b"a red cat"))]),
                          ("escape.tar", [("../up.txt", b"a red cat")])):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for member, data in members:
                info = tarfile.TarInfo(member)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        data = buffer.getvalue()
        (folder / name).write_bytes(data[: 5500] if name == "cut.tar" else data)
    (folder / "long-id.jsonl").write_text('{"id": ' + "7" * 5000 + ', "caption": "a red cat"}\n')
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links as their target) with a hash of its bytes."""
    state = {}
    for path in sorted(folder.rglob("*")):
        relative = str(path.relative_to(folder))
        if path.is_symlink():
            state[relative] = "-> " + os.readlink(path)
        elif path.is_file():
            state[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


@pytest.fixture
def workspace(inputs, tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "work"
    shutil.copytree(inputs, folder, symlinks=True)
    monkeypatch.chdir(folder)
    return folder


def assert_refused(result, fragment: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    assert fragment in errors[0], errors[0]
    assert UNSAFE_ADVICE not in result.output


def run(command: str, env: dict[str, str]):
    return CliRunner().invoke(main, shlex.split(command), env={"COLUMNS": "200", **env})


def test_the_catalogue_has_at_least_sixty_distinct_cases():
    assert len(CATALOGUE) >= 60
    assert len({case[0] for case in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("command, fragment, env", [case[1:] for case in CATALOGUE],
                         ids=[case[0] for case in CATALOGUE])
def test_bad_input_is_one_error_line_and_changes_no_file(workspace, command, fragment, env):
    env = {"CAPGEO_CACHE": str(workspace / "cache"), **env}
    before = snapshot(workspace)
    result = run(command, env)
    assert_refused(result, fragment)
    assert snapshot(workspace) == before


# --------------------------------------------------------------------------- a full disk

FULL_DISK_CASES = [
    ("report-output", f"report D.jsonl {PROFILE_ARGS} --no-dupes -o full/r.html", {}),
    ("encode-output", "encode D.jsonl --encoder vectors:V.npy -o full/x.npy", {}),
    ("profile-json", f"profile D.jsonl {PROFILE_ARGS} --no-gamma --json full/p.json", {}),
    ("dupes-output", "dupes D.jsonl --encoder vectors:V.npy -o full/d.txt", {}),
    ("cache-write", "encode D.jsonl", {"CAPGEO_CACHE": "full/cache"}),
]


@pytest.fixture
def full_disk(workspace) -> Path:
    """A 200 KB tmpfs at ./full, filled to the last byte."""
    mount_point = workspace / "full"
    mount_point.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("a full disk is simulated with a tmpfs mount, which needs root and `mount`")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        with open(mount_point / "filler", "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError as error:
        assert error.errno == errno.ENOSPC
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.parametrize("command, env", [case[1:] for case in FULL_DISK_CASES],
                         ids=[case[0] for case in FULL_DISK_CASES])
def test_a_full_disk_is_one_error_line_and_leaves_no_partial_file(workspace, full_disk, command, env):
    env = {"CAPGEO_CACHE": str(workspace / "cache"), **env}
    before = snapshot(workspace)
    result = run(command, env)
    assert_refused(result, "No space left on device; free space on that disk")
    assert snapshot(workspace) == before


# --------------------------------------------------------------------------- runaway sizes and the cache


def test_a_ten_megabyte_caption_adds_kilobytes_not_megabytes_to_a_report():
    from capgeo.report.html import MAX_SHOWN_CHARS, CaptionIds, caption_html

    text = "a red cat on a mat " * 550_000
    spans = [{"start": k, "end": k + 3, "kind": "shared"} for k in range(2, len(text), 19)]
    rendered = caption_html(text, spans, CaptionIds())
    # every shown word may be marked up (~40 characters each), the rest is one note
    assert len(rendered) < MAX_SHOWN_CHARS * 4
    assert f"{len(text) - MAX_SHOWN_CHARS:,} more characters not shown" in rendered
    assert rendered.count("<mark") == len([k for k in range(2, MAX_SHOWN_CHARS, 19) if k + 3 <= MAX_SHOWN_CHARS])


@pytest.mark.slow
def test_damaged_cache_files_give_back_the_uncached_vectors_through_the_cli(workspace):
    """The reported failures: one flipped bit in a chunk, and token counts replaced by
    other valid integers, were cache hits with wrong vectors. Now each is recomputed."""
    env = {"CAPGEO_CACHE": str(workspace / "cache")}
    first = run("encode D.jsonl -o truth.npy", env)
    assert first.exit_code == 0 and "encoded" in first.stdout, first.output
    truth = np.load("truth.npy")

    chunk = next((workspace / "cache").glob("embeddings/*/chunk-*.npy"))
    data = bytearray(chunk.read_bytes())
    data[-3] ^= 0x80  # the sign of the last vector's last element
    chunk.write_bytes(bytes(data))
    result = run("encode D.jsonl -o second.npy", env)
    assert result.exit_code == 0 and "fails its checksum" in result.stderr
    np.testing.assert_array_equal(np.load("second.npy"), truth)

    counts = next((workspace / "cache").glob("embeddings/*/token_counts.*.npy"))
    np.save(counts, np.arange(N_CAPTIONS))
    result = run("encode D.jsonl -o third.npy", env)
    assert result.exit_code == 0 and "fails its checksum" in result.stderr
    np.testing.assert_array_equal(np.load("third.npy"), truth)
    assert "cache hit" in run("encode D.jsonl", env).stdout  # and the repaired entry is whole again


def test_precomputed_vectors_need_no_cache_folder(workspace):
    result = run("encode D.jsonl --encoder vectors:V.npy", {"CAPGEO_CACHE": "blocker/cache"})
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", ["encode D.jsonl --encoder vectors:V.npy -o new/deeper/x.npy",
                                     "info D.jsonl --json new/deeper/x.json"])
def test_an_output_in_a_missing_folder_creates_it_and_says_so(workspace, command):
    result = run(command, {})
    assert result.exit_code == 0, result.output
    assert f"Note: created the folder {Path('new') / 'deeper'}" in result.stderr
    assert len(list((workspace / "new" / "deeper").iterdir())) == 1


def test_json_replaces_an_earlier_capgeo_result_of_any_command(workspace):
    """The guard above lets a rerun write over its own earlier result, whichever command wrote it."""
    env = {"CAPGEO_CACHE": str(workspace / "cache")}
    for command in ("info D.jsonl", "encode D.jsonl --encoder vectors:V.npy", "encoders"):
        for _ in range(2):
            result = run(f"{command} --json out.json", env)
            assert result.exit_code == 0, result.output
            assert json.loads((workspace / "out.json").read_text())["schema"].startswith("capgeo.")
