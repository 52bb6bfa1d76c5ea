"""Hub downloads fail fast, with a clear message, when the hub cannot be reached."""

from __future__ import annotations

import socket

import pytest
from huggingface_hub import constants

from capgeo.encoders import hub
from capgeo.errors import EncoderError


@pytest.fixture
def hub_offline_by_network(monkeypatch):
    """As on a machine with no network and no HF_HUB_OFFLINE: the switch is off, the host unreachable."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)


def test_unreachable_hub_switches_to_the_cache_for_the_block_only(hub_offline_by_network):
    with hub.cache_only_when_unreachable() as online:
        assert online is False and constants.is_offline_mode()
    assert not constants.is_offline_mode()
    with pytest.raises(RuntimeError):
        with hub.cache_only_when_unreachable():
            raise RuntimeError("download failed")
    assert not constants.is_offline_mode()  # restored after an error too


def test_reachable_hub_is_left_alone(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: True)
    with hub.cache_only_when_unreachable() as online:
        assert online is True and not constants.is_offline_mode()


def test_hub_reachable_is_false_for_a_closed_port(monkeypatch):
    with socket.socket() as listener:  # a port that was open a moment ago and is closed now
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert hub.hub_reachable(timeout=1.0) is False


def test_missing_longclip_weights_fail_at_once_naming_the_cause(hub_offline_by_network, monkeypatch):
    from capgeo.encoders.longclip import load_longclip_encoder

    # failing at once means no connection attempt at all (each would wait and retry)
    attempts = []
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: attempts.append(address))
    with pytest.raises(EncoderError, match="cannot be reached.*`hf download BeichenZhang/LongCLIP-L longclip-L.pt`.*"
                                         "pass --encoder /path/to/longclip-L.pt"):
        load_longclip_encoder("longclip-L")
    assert attempts == []


def test_missing_open_clip_weights_fail_at_once_naming_the_cause(hub_offline_by_network):
    from capgeo.encoders.openclip import load_open_clip_encoder

    with pytest.raises(EncoderError, match=r"ViT-B-32/laion2b_s34b_b79k.*cannot be reached.*`hf download "
                                         r"laion/CLIP-ViT-B-32-laion2B-s34B-b79K open_clip_model.safetensors`.*"
                                         r"ViT-B-32@/path/to"):
        load_open_clip_encoder("ViT-B-32/laion2b_s34b_b79k")


def test_a_missing_hf_tokenizer_fails_at_once_and_is_named(tmp_path, monkeypatch):
    """A config naming an HF tokenizer that is not cached: about a minute of hub retries, then a
    message with an empty name."""
    import json

    import torch

    from _clip_fixtures import tiny_clip, tiny_config
    from capgeo.encoders import hub
    from capgeo.encoders.openclip import load_open_clip_encoder
    from capgeo.errors import EncoderError

    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    config = tiny_config(77)
    torch.save(tiny_clip(config).state_dict(), tmp_path / "sig.pt")
    config["text_cfg"]["hf_tokenizer_name"] = "capgeo-test/no-such-tokenizer"
    (tmp_path / "sig.json").write_text(json.dumps(config))
    with pytest.raises(EncoderError, match="the tokenizer capgeo-test/no-such-tokenizer is not available offline"):
        encoder = load_open_clip_encoder(str(tmp_path / "sig.pt"), device="cpu", cache_dir=tmp_path / "memo")
        encoder.encode(["a caption"])
