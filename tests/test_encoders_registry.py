"""The --encoder spec registry: which loader each spec reaches, and errors for the rest."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

from capgeo.encoders import get_encoder, list_encoder_kinds
from capgeo.encoders.minilm import MiniLMEncoder
from capgeo.encoders.precomputed import PrecomputedEncoder
from capgeo.encoders.registry import spec_kind
from capgeo.errors import EncoderError


@pytest.mark.parametrize("spec, kind, argument", [
    (None, "sentence-transformers", "minilm"),
    ("default", "sentence-transformers", "minilm"),
    ("MiniLM", "sentence-transformers", "minilm"),
    ("all-MiniLM-L6-v2", "sentence-transformers", "minilm"),
    ("ViT-L-14/openai", "open_clip", "ViT-L-14/openai"),
    ("hf-hub:timm/ViT-B-16-SigLIP", "open_clip", "hf-hub:timm/ViT-B-16-SigLIP"),
    ("ViT-B-32@/ckpts/epoch_3.pt", "open_clip", "ViT-B-32@/ckpts/epoch_3.pt"),
    ("local-dir:./my-model", "open_clip", "local-dir:./my-model"),
    ("/ckpts/finetuned.safetensors", "open_clip", "/ckpts/finetuned.safetensors"),
    ("longclip-B", "longclip", "longclip-B"),
    ("LongCLIP-L", "longclip", "LongCLIP-L"),
    ("/models/longclip-L.pt", "longclip", "/models/longclip-L.pt"),
    ("ViT-B-16@/models/longclip-B.pt", "open_clip", "ViT-B-16@/models/longclip-B.pt"),  # MODEL@ wins
    ("vectors:emb.npy", "precomputed", "emb.npy"),
    ("vectors:/data/any name.bin", "precomputed", "/data/any name.bin"),
    ("out/emb.parquet", "precomputed", "out/emb.parquet"),
    ("emb.NPZ", "precomputed", "emb.NPZ"),
])
def test_spec_kind(spec, kind, argument):
    assert spec_kind(spec) == (kind, argument)


@pytest.mark.parametrize("spec", ["ViT-L-14", "a/b/c", "/", "bert-base-uncased", "emb.csv"])
def test_unknown_spec_lists_kinds_with_examples(spec):
    with pytest.raises(EncoderError) as raised:
        get_encoder(spec)
    message = str(raised.value)
    assert repr(spec) in message and "\n" not in message
    for kind in ("sentence-transformers", "open_clip", "longclip", "precomputed"):
        assert kind in message
    assert "ViT-L-14/openai" in message or "local-dir:" in message


def test_list_encoder_kinds_covers_every_kind_with_resolvable_examples():
    kinds = list_encoder_kinds()
    assert [kind.kind for kind in kinds] == ["sentence-transformers", "open_clip", "longclip", "precomputed"]
    for kind in kinds:
        assert kind.notes and kind.examples
        for example in kind.examples:
            if example.startswith("("):
                continue  # "(no --encoder)"
            assert spec_kind(example)[0] == kind.kind, example


def test_default_spec_gives_lazy_minilm():
    encoder = get_encoder(None, device="cpu")
    assert isinstance(encoder, MiniLMEncoder)
    assert encoder._model is None  # identity comes from the files; the model loads on first use
    assert (encoder.info.kind, encoder.info.name, encoder.info.width) == ("sentence-transformers", "all-MiniLM-L6-v2", 384)


def test_precomputed_spec(tmp_path):
    np.save(tmp_path / "v.npy", np.eye(3))
    assert isinstance(get_encoder(f"vectors:{tmp_path / 'v.npy'}"), PrecomputedEncoder)


@pytest.mark.parametrize("spec, module, function, argument", [
    ("ViT-B-32/openai", "capgeo.encoders.openclip", "load_open_clip_encoder", "ViT-B-32/openai"),
    ("hf-hub:org/model", "capgeo.encoders.openclip", "load_open_clip_encoder", "hf-hub:org/model"),
    ("longclip-L", "capgeo.encoders.longclip", "load_longclip_encoder", "longclip-L"),
    ("ckpt/longclip-B.pt", "capgeo.encoders.longclip", "load_longclip_encoder", "ckpt/longclip-B.pt"),
])
def test_dispatch_to_clip_loaders(monkeypatch, spec, module, function, argument):
    calls = []
    sentinel = object()

    def loader(spec_or_path, device=None, **options):
        calls.append((spec_or_path, device))
        assert options["lazy"] is True  # identity first; the model is built on first use
        return sentinel

    fake = types.ModuleType(module)
    setattr(fake, function, loader)
    monkeypatch.setitem(sys.modules, module, fake)
    assert get_encoder(spec, device="cpu") is sentinel
    assert calls == [(argument, "cpu")]


def test_missing_loader_module_is_an_encoder_error(monkeypatch):
    # None in sys.modules makes the import fail as if the module were absent
    monkeypatch.setitem(sys.modules, "capgeo.encoders.longclip", None)
    with pytest.raises(EncoderError, match="longclip encoders are not available"):
        get_encoder("longclip-B")


def test_missing_dependency_of_a_loader_is_named(monkeypatch):
    # a loader module whose own import fails on a missing third-party package
    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "capgeo.encoders.openclip":
                raise ModuleNotFoundError("No module named 'open_clip'", name="open_clip")
            return None

    monkeypatch.delitem(sys.modules, "capgeo.encoders.openclip", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    with pytest.raises(EncoderError, match="need the Python package 'open_clip'"):
        get_encoder("ViT-B-32/openai")


def test_importing_encoders_and_resolving_the_default_does_not_import_torch():
    code = ("import sys; from capgeo.encoders import get_encoder, embed, list_encoder_kinds; "
            "info = get_encoder(None).info; list_encoder_kinds(); "
            "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', 'open_clip') if m in sys.modules]; "
            "print(info.width, heavy)")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert output.stdout.strip() == "384 []"


def test_longclip_checkpoint_path_runs_end_to_end_through_embed_and_cache(tmp_path, shared_data):
    """A real (tiny, random) Long-CLIP state dict reached through the registry, embedded and cached."""
    import torch
    from _clip_fixtures import docci_captions
    from test_encoders_longclip import longclip_state_dict

    from capgeo.encoders import embed
    from capgeo.encoders.longclip import load_longclip_encoder

    checkpoint = tmp_path / "my-longclip-tiny.pt"
    torch.save(longclip_state_dict(), checkpoint)
    texts = docci_captions(shared_data, count=12)
    first = embed(texts, str(checkpoint), device="cpu", cache_dir=tmp_path / "cache", chunk_rows=5)
    assert first.info.kind == "longclip" and first.info.context_length == 248 and first.origin == "encoded"
    direct = load_longclip_encoder(str(checkpoint), device="cpu")
    np.testing.assert_allclose(first.vectors, direct.encode(texts), atol=1e-5)
    np.testing.assert_array_equal(first.token_counts, direct.token_counts(texts))

    class NoEncoding:
        info = direct.info

        def token_counts(self, texts):
            raise AssertionError("a cache hit must not tokenise")

        def encode(self, texts, **kwargs):
            raise AssertionError("a cache hit must not encode")

    again = embed(texts, NoEncoding(), cache_dir=tmp_path / "cache", chunk_rows=5)
    assert again.origin == "cache"
    np.testing.assert_array_equal(again.vectors, first.vectors)


@pytest.mark.parametrize("device", ["foo", "cuda:x", "tpu"])
def test_unknown_device_name_is_a_one_line_error_before_anything_loads(device):
    with pytest.raises(EncoderError, match="expected cpu, cuda, cuda:N or mps"):
        get_encoder("ViT-B-32@/nowhere.pt", device=device)


def test_missing_device_hardware_is_found_when_the_model_is_built_not_on_a_cache_hit(monkeypatch):
    import torch

    from capgeo.encoders.openclip import OpenClipTextEncoder

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EncoderError, match="no cuda device"):
        get_encoder(None, device="cuda")  # an eagerly loaded kind checks at once
    built = []
    lazy = OpenClipTextEncoder(None, None, None, "cuda", build_model=lambda: built.append(1))
    with pytest.raises(EncoderError, match="no cuda device"):
        lazy.model
    assert built == []  # refused before building anything
