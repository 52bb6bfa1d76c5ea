"""Encoder start-up: a cached run loads no model and hashes nothing, only text weights are read,
and unreadable checkpoints are one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import open_clip  # noqa: E402,F401
import torch  # noqa: E402

from capgeo.encoders import embed  # noqa: E402
from capgeo.encoders import longclip as longclip_module  # noqa: E402
from capgeo.encoders import openclip as openclip_module  # noqa: E402
from capgeo.encoders import weight_memo  # noqa: E402
from capgeo.encoders.longclip import load_longclip_encoder  # noqa: E402
from capgeo.encoders.openclip import load_open_clip_encoder  # noqa: E402
from capgeo.errors import EncoderError  # noqa: E402

from _clip_fixtures import tiny_clip, tiny_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ["a red bus parked by the kerb", "two dogs on a beach at dusk", "a plate of noodles with chopsticks",
            "an empty train platform in the rain, lights reflected in the puddles"]


@pytest.fixture(scope="module")
def clip_checkpoint(tmp_path_factory) -> Path:
    """A tiny open_clip checkpoint (both towers) with its config beside it."""
    folder = tmp_path_factory.mktemp("clip")
    config = tiny_config(77)
    torch.save(tiny_clip(config).state_dict(), folder / "tiny.pt")
    (folder / "tiny.json").write_text(json.dumps(config))
    return folder / "tiny.pt"


@pytest.fixture(scope="module")
def longclip_checkpoint(tmp_path_factory) -> Path:
    """A tiny Long-CLIP-layout state dict: both towers, two 248-row positional tables."""
    folder = tmp_path_factory.mktemp("longclip")
    state = tiny_clip(tiny_config(248), seed=3).state_dict()
    state["positional_embedding_res"] = torch.randn(state["positional_embedding"].shape) * 0.5
    torch.save(state, folder / "longclip-tiny.pt")
    return folder / "longclip-tiny.pt"


def _forbid_building(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model, tokenizer or weight hash was needed on a full cache hit")

    monkeypatch.setattr(openclip_module, "_load_text_model", refuse)
    monkeypatch.setattr(openclip_module, "_tokenizer", refuse)
    monkeypatch.setattr(longclip_module, "build_longclip_tower", refuse)
    monkeypatch.setattr(longclip_module, "read_state_dict", refuse)
    monkeypatch.setattr(weight_memo, "_hash", refuse)


@pytest.mark.parametrize("which", ["clip", "longclip"])
def test_full_cache_hit_builds_no_model_and_hashes_nothing(monkeypatch, tmp_path, request, which):
    checkpoint = request.getfixturevalue(f"{which}_checkpoint")
    first = embed(CAPTIONS, str(checkpoint), device="cpu", cache_dir=tmp_path)
    assert first.origin == "encoded"
    _forbid_building(monkeypatch)
    again = embed(CAPTIONS, str(checkpoint), device="cpu", cache_dir=tmp_path)
    assert again.origin == "cache"
    assert again.info == first.info
    np.testing.assert_array_equal(again.vectors, first.vectors)
    np.testing.assert_array_equal(again.token_counts, first.token_counts)


@pytest.fixture(scope="module")
def local_dir_spec(tmp_path_factory, clip_checkpoint) -> str:
    """The tiny checkpoint in open_clip's hub layout, as `local-dir:` reads it."""
    folder = tmp_path_factory.mktemp("local-dir")
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": tiny_config(77)}))
    (folder / "open_clip_pytorch_model.bin").write_bytes(clip_checkpoint.read_bytes())
    return f"local-dir:{folder}"


@pytest.mark.parametrize("device, which", [("cpu", "longclip"), ("cuda", "longclip"), ("cpu", "local-dir")])
def test_cached_run_in_a_fresh_process_never_imports_torch(tmp_path, request, device, which):
    """cuda: the hardware is not asked for on a hit either. local-dir: it imported open_clip to ask
    which weights file the folder's loader would pick (7.8 s instead of 0.03 s a hit)."""
    spec = str(request.getfixturevalue("longclip_checkpoint")) if which == "longclip" \
        else request.getfixturevalue("local_dir_spec")
    embed(CAPTIONS, spec, device="cpu", cache_dir=tmp_path)
    code = ("import sys\nfrom capgeo.encoders import embed\n"
            f"result = embed({CAPTIONS!r}, {spec!r}, device={device!r}, cache_dir={str(tmp_path)!r})\n"
            "print(result.origin, 'torch' in sys.modules, 'open_clip' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["cache", "False", "False"]


@pytest.mark.parametrize("which, loader", [("clip", load_open_clip_encoder), ("longclip", load_longclip_encoder)])
def test_identity_from_the_file_equals_identity_from_the_built_model(tmp_path, request, which, loader):
    checkpoint = str(request.getfixturevalue(f"{which}_checkpoint"))
    lazy = loader(checkpoint, device="cpu", cache_dir=tmp_path / "memo", lazy=True)
    assert lazy._model is None
    eager = loader(checkpoint, device="cpu", cache_dir=tmp_path / "none", lazy=False)
    assert lazy.info == eager.info
    np.testing.assert_array_equal(lazy.encode(CAPTIONS), eager.encode(CAPTIONS))


def test_fingerprint_is_remembered_and_a_changed_file_is_hashed_again(monkeypatch, tmp_path):
    import hashlib

    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"A" * 1000)
    hashed = []
    real_hash = weight_memo._hash
    monkeypatch.setattr(weight_memo, "_hash", lambda path: hashed.append(path) or real_hash(path))
    cache = tmp_path / "cache"
    assert weight_memo.weight_fingerprint(weights, cache) == hashlib.sha256(b"A" * 1000).hexdigest()
    assert weight_memo.weight_fingerprint(weights, cache) == hashlib.sha256(b"A" * 1000).hexdigest()
    assert len(hashed) == 1                                      # the second call read the memo
    assert (cache / weight_memo.MEMO_FILE).is_file()

    weights.write_bytes(b"B" * 1000)                             # same size, rewritten in place
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert weight_memo.weight_fingerprint(weights, cache) == hashlib.sha256(b"B" * 1000).hexdigest()
    assert len(hashed) == 2


def test_a_file_replaced_with_its_old_mtime_restored_is_hashed_again(monkeypatch, tmp_path):
    """Same path, same size, mtime set back (touch -r, cp -p): only the ctime tells the new file
    from the old, and a stale hash would give the old model's cached vectors."""
    import hashlib
    import time

    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"A" * 1000)
    old = weights.stat()
    cache = tmp_path / "cache"
    assert weight_memo.weight_fingerprint(weights, cache) == hashlib.sha256(b"A" * 1000).hexdigest()
    time.sleep(0.02)  # a ctime tick apart
    replacement = tmp_path / "other.bin"
    replacement.write_bytes(b"B" * 1000)
    os.utime(replacement, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(replacement, weights)
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    assert weight_memo.weight_fingerprint(weights, cache) == hashlib.sha256(b"B" * 1000).hexdigest()


def test_a_damaged_memo_is_recomputed_not_an_error(tmp_path):
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"weights")
    (tmp_path / weight_memo.MEMO_FILE).write_text("{not json")
    assert len(weight_memo.weight_fingerprint(weights, tmp_path)) == 64
    assert json.loads((tmp_path / weight_memo.MEMO_FILE).read_text())  # rewritten whole


@pytest.mark.parametrize("which, loader", [("clip", load_open_clip_encoder), ("longclip", load_longclip_encoder)])
@pytest.mark.parametrize("damage", ["null", "missing key", "wrong type", "short hash"])
def test_a_memo_that_parses_but_has_the_wrong_shape_is_recomputed(tmp_path, request, which, loader, damage):
    """An edited memo, or one another capgeo version wrote, is not an error (was a TypeError or
    KeyError traceback): facts that do not have the expected shape are computed again."""
    checkpoint = str(request.getfixturevalue(f"{which}_checkpoint"))
    reference = loader(checkpoint, device="cpu", cache_dir=tmp_path / "clean", lazy=True).info
    memo_file = tmp_path / "memo" / weight_memo.MEMO_FILE
    loader(checkpoint, device="cpu", cache_dir=tmp_path / "memo", lazy=True)
    memo = json.loads(memo_file.read_text())["files"]
    (facts,) = [record["facts"] for record in memo.values()]
    name = "open_clip_text" if which == "clip" else "longclip_text"
    if damage == "null":
        facts[name] = None
    elif damage == "missing key":
        facts[name] = {"width": 32}
    elif damage == "wrong type":
        facts[name]["width"] = "wide"
    else:
        facts["sha256"] = "abc"
    _write_signed_memo(memo_file, memo)  # as another capgeo version would write it: its checksum holds
    assert loader(checkpoint, device="cpu", cache_dir=tmp_path / "memo", lazy=True).info == reference
    assert json.loads(memo_file.read_text())["files"] != memo  # and the memo holds the recomputed facts again


def _write_signed_memo(memo_file, files: dict) -> None:
    memo_file.write_text(json.dumps({"checksum": weight_memo._checksum(files), "files": files}))


def test_only_the_text_tower_is_allocated_and_read(monkeypatch, clip_checkpoint):
    from capgeo.encoders import checkpoint as checkpoint_module

    loads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(kwargs) or real_load(*args, **kwargs))
    read_keys = []
    real_read = checkpoint_module.read_state_dict

    def spy(path, keep=lambda key: True):
        state = real_read(path, keep)
        read_keys.extend(state)
        return state

    monkeypatch.setattr(openclip_module, "read_state_dict", spy)
    encoder = load_open_clip_encoder(str(clip_checkpoint), device="cpu", lazy=False)
    assert isinstance(encoder.model.visual, torch.nn.Identity)
    assert not any(name.startswith("visual.") for name, _ in encoder.model.named_parameters())
    assert read_keys and not any(key.startswith("visual.") for key in read_keys)
    assert loads and all(kwargs.get("mmap") and kwargs.get("weights_only") for kwargs in loads)


@pytest.mark.parametrize("name, content, reason", [
    ("random.pt", os.urandom(4096), "not a PyTorch checkpoint"),
    ("garbage.safetensors", b"\xff" * 64 + os.urandom(512), "not a readable safetensors file"),
    ("truncated.pt", None, "truncated or damaged PyTorch zip archive"),
    ("short.safetensors", None, "not a readable safetensors file"),
    ("objects.pt", None, "holds objects other than tensors"),
])
def test_unreadable_checkpoints_are_one_line_errors_with_exit_2(tmp_path, clip_checkpoint, name, content, reason):
    from click.testing import CliRunner

    from capgeo.cli import main

    path = tmp_path / name
    if name == "truncated.pt":
        content = clip_checkpoint.read_bytes()[:len(clip_checkpoint.read_bytes()) // 2]
    elif name == "short.safetensors":
        from safetensors.torch import save_file

        save_file({"text_projection": torch.zeros(64, 32), "positional_embedding": torch.zeros(77, 64)}, path)
        content = path.read_bytes()[:-100]                      # the header promises bytes that are gone
    elif name == "objects.pt":
        import argparse

        torch.save({"text_projection": torch.zeros(2, 2), "args": argparse.Namespace(lr=1)}, path)
        content = path.read_bytes()                             # pickled objects weights_only refuses
    path.write_bytes(content)
    (tmp_path / f"{path.stem}.json").write_text(json.dumps(tiny_config(77)))
    result = CliRunner().invoke(main, ["encode", str(ROOT / "data" / "docci_sample.jsonlines"), "--limit", "3",
                                       "--encoder", str(path), "--device", "cpu", "--cache-dir",
                                       str(tmp_path / "cache")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    assert str(path) in lines[0] and reason in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("which", ["clip", "longclip"])
def test_weights_replaced_after_the_fingerprint_are_refused(tmp_path, request, which):
    """A checkpoint overwritten between the fingerprint and the (lazy) load: its vectors were cached
    and reported under the old weights' fingerprint, and later cache hits served them as those."""
    import shutil

    source = request.getfixturevalue(f"{which}_checkpoint")
    checkpoint = tmp_path / source.name
    shutil.copy(source, checkpoint)
    if source.with_suffix(".json").exists():
        shutil.copy(source.with_suffix(".json"), checkpoint.with_suffix(".json"))
    loader = load_open_clip_encoder if which == "clip" else load_longclip_encoder
    encoder = loader(str(checkpoint), device="cpu", cache_dir=tmp_path / "memo", lazy=True)
    state = torch.load(checkpoint, weights_only=True)
    state = {key: value + 0.5 if value.is_floating_point() else value for key, value in state.items()}
    torch.save(state, checkpoint)  # a training run writing its latest weights
    with pytest.raises(EncoderError, match="changed while capgeo was reading it"):
        encoder.encode(CAPTIONS)


def test_a_boolean_in_the_memo_is_not_taken_for_a_number(tmp_path, clip_checkpoint):
    facts = load_open_clip_encoder(str(clip_checkpoint), device="cpu", cache_dir=tmp_path, lazy=True).info
    memo_file = tmp_path / weight_memo.MEMO_FILE
    memo = json.loads(memo_file.read_text())["files"]
    for record in memo.values():
        record["facts"]["open_clip_text"]["width"] = True
    _write_signed_memo(memo_file, memo)
    again = load_open_clip_encoder(str(clip_checkpoint), device="cpu", cache_dir=tmp_path, lazy=True).info
    assert again.width == facts.width != 1


@pytest.mark.parametrize("names", [
    ["open_clip_pytorch_model.bin"],
    ["model.safetensors", "open_clip_pytorch_model.bin", "pytorch_model.bin"],
    ["b.bin", "a.pth", "z.safetensors"],
    ["b.bin", "a.pth"],
    ["pytorch_model.pth", "model.pth", "x.safetensors"],
    ["open_clip_model.safetensors", "open_clip_pytorch_model.safetensors"],
])
def test_the_weights_a_folder_offers_are_the_ones_open_clip_picks(tmp_path, names):
    """capgeo follows open_clip's local-dir rule without importing open_clip: the two must agree."""
    from open_clip.factory import _find_checkpoint_in_dir

    for name in names:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "open_clip_config.json").write_text("{}")
    assert openclip_module.weights_in_folder(tmp_path) == Path(_find_checkpoint_in_dir(tmp_path))


def test_a_folder_with_only_a_pt_file_offers_it(tmp_path):
    (tmp_path / "weights.pt").write_bytes(b"x")
    assert openclip_module.weights_in_folder(tmp_path) == tmp_path / "weights.pt"
