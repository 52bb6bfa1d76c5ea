"""open_clip checkpoints saved to disk load through the real loading path and encode like the model they came from."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

import torch
import open_clip

from _clip_fixtures import coco_captions, docci_captions, reference_embeddings, tiny_clip, tiny_config  # noqa: E402
from capgeo.encoders.openclip import load_open_clip_encoder  # noqa: E402
from capgeo.errors import EncoderError  # noqa: E402

TINY_NAME = "capgeo-test-tiny-77"


@pytest.fixture(scope="module")
def tiny_model_name(tmp_path_factory) -> str:
    """A tiny config registered with open_clip under a model name, like a built-in one."""
    folder = tmp_path_factory.mktemp("configs")
    (folder / f"{TINY_NAME}.json").write_text(json.dumps(tiny_config(77)))
    open_clip.add_model_config(folder / f"{TINY_NAME}.json")
    return TINY_NAME


@pytest.fixture(scope="module")
def model():
    return tiny_clip(tiny_config(77), seed=3)


@pytest.fixture
def captions(shared_data) -> list[str]:
    return coco_captions(shared_data, images=3) + docci_captions(shared_data, count=4)


def expected_for(model, captions, context_length=77) -> np.ndarray:
    return reference_embeddings(model, open_clip.SimpleTokenizer(context_length=context_length)(captions))


def test_openai_style_state_dict_loads_by_model_name(tmp_path, tiny_model_name, model, captions):
    path = tmp_path / "openai-style.pt"
    torch.save(model.state_dict(), path)                     # keys exactly as OpenAI's CLIP names them
    encoder = load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu")

    info = encoder.info
    assert (info.kind, info.name, info.width, info.context_length) == ("open_clip", tiny_model_name, 32, 77)
    assert info.logit_scale == pytest.approx(float(model.logit_scale.detach().exp()), rel=1e-6)
    assert len(info.fingerprint) == 64 and info.fingerprint != hashlib.sha256(path.read_bytes()).hexdigest()
    assert np.abs(encoder.encode(captions) - expected_for(model, captions)).max() < 1e-5
    assert isinstance(encoder.model.visual, torch.nn.Identity)  # image tower freed


def test_open_clip_training_checkpoint_with_module_prefix(tmp_path, model, captions):
    """{'state_dict': {'module.…': …}} as open_clip's trainer writes it, with the config beside the file."""
    path = tmp_path / "epoch_3.pt"
    torch.save({"epoch": 3, "name": "run", "state_dict": {"module." + k: v for k, v in model.state_dict().items()}},
               path)
    (tmp_path / "epoch_3.json").write_text(json.dumps(tiny_config(77)))
    expected = expected_for(model, captions)
    by_sidecar = load_open_clip_encoder(str(path), device="cpu")
    by_config_file = load_open_clip_encoder(f"{tmp_path / 'epoch_3.json'}@{path}", device="cpu")
    assert np.abs(by_sidecar.encode(captions) - expected).max() < 1e-5
    assert np.abs(by_config_file.encode(captions) - expected).max() < 1e-5


def test_fingerprint_covers_the_config_not_only_the_weights(tmp_path, model):
    """The same weights built with another activation are another encoder: results and cache keys must differ."""
    for folder, quick_gelu in (("a", True), ("b", False)):
        (tmp_path / folder).mkdir()
        torch.save(model.state_dict(), tmp_path / folder / "tiny.pt")
        (tmp_path / folder / "tiny.json").write_text(json.dumps(tiny_config(77, quick_gelu=quick_gelu)))
    same = load_open_clip_encoder(str(tmp_path / "a" / "tiny.pt"), device="cpu").info.fingerprint
    again = load_open_clip_encoder(str(tmp_path / "a" / "tiny.pt"), device="cpu").info.fingerprint
    other = load_open_clip_encoder(str(tmp_path / "b" / "tiny.pt"), device="cpu").info.fingerprint
    assert same == again and same != other


def test_local_dir_in_hub_layout(tmp_path, model, captions, monkeypatch):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": tiny_config(77), "preprocess_cfg": {}}))
    torch.save(model.state_dict(), folder / "open_clip_pytorch_model.bin")
    encoder = load_open_clip_encoder(f"local-dir:{folder}", device="cpu")
    assert encoder.info.name == "my-model"
    assert np.abs(encoder.encode(captions) - expected_for(model, captions)).max() < 1e-5
    # "~" in the folder: the weights were found, and open_clip's tokenizer was given "~" unexpanded
    monkeypatch.setenv("HOME", str(tmp_path))
    home = load_open_clip_encoder("local-dir:~/my-model", device="cpu")
    assert np.abs(home.encode(captions) - expected_for(model, captions)).max() < 1e-5
    # a flat config (not nested under "model_cfg"), which open_clip's own local-dir tokenizer refuses:
    # it was reported as a tokenizer "not available offline"
    (folder / "open_clip_config.json").write_text(json.dumps(tiny_config(77)))
    flat = load_open_clip_encoder(f"local-dir:{folder}", device="cpu")
    assert np.abs(flat.encode(captions) - expected_for(model, captions)).max() < 1e-5


def test_checkpoint_context_wins_over_config_no_interpolation(tmp_path, tiny_model_name, shared_data):
    """A 248-token checkpoint under a 77-token model name keeps its 248 positions (open_clip would
    interpolate them to 77 without a word)."""
    long_model = tiny_clip(tiny_config(248), seed=5)
    path = tmp_path / "long.pt"
    torch.save(long_model.state_dict(), path)
    encoder = load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu")
    assert encoder.info.context_length == 248
    captions = docci_captions(shared_data, count=4)
    assert np.abs(encoder.encode(captions) - expected_for(long_model, captions, 248)).max() < 1e-5


def test_token_counts_are_untruncated_with_start_and_end_tokens(tmp_path, tiny_model_name, model, captions):
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    encoder = load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu")
    counts = encoder.token_counts(captions)
    wide = open_clip.SimpleTokenizer(context_length=1000)(captions)
    assert (counts == (wide != 0).sum(dim=1).numpy()).all()
    assert counts.max() > 77                                  # DOCCI captions exceed the context


@pytest.mark.parametrize("overrides, says", [
    ({"width": 128}, "its text tower is 128 wide, the model's is 64"),
    ({"vocab_size": 1000}, "size mismatch for token_embedding.weight"),
])
def test_checkpoint_that_does_not_fit_the_model_says_what(tmp_path, tiny_model_name, overrides, says):
    """One line that names what does not fit (only torch's first line was kept, which named nothing)."""
    other = tiny_clip(tiny_config(77, **overrides), seed=1)
    path = tmp_path / "other.pt"
    torch.save(other.state_dict(), path)
    with pytest.raises(EncoderError, match=f"does not fit model {tiny_model_name}") as raised:
        load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu")
    assert "\n" not in str(raised.value) and says in str(raised.value)


def test_checkpoint_with_missing_and_unexpected_keys_names_a_few(tmp_path, tiny_model_name, model):
    state = {("renamed." + key if "resblocks" in key else key): value for key, value in model.state_dict().items()}
    path = tmp_path / "renamed.pt"
    torch.save(state, path)
    with pytest.raises(EncoderError) as raised:
        load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu")
    message = str(raised.value)
    assert "\n" not in message
    assert re.search(r"missing key\(s\) in state_dict \(\d+\): transformer\.resblocks\.0\.", message), message
    assert re.search(r"unexpected key\(s\) in state_dict \(\d+\): renamed\.", message) and " more" in message


def test_a_state_dict_saved_under_model_loads(tmp_path, tiny_model_name, model, captions):
    """{"model": state_dict, "epoch": ...}, as many training loops save, is read like {"state_dict": ...}."""
    path = tmp_path / "trainer.pt"
    torch.save({"model": model.state_dict(), "epoch": 3}, path)
    encoder = load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu")
    assert np.abs(encoder.encode(captions) - expected_for(model, captions)).max() < 1e-5


@pytest.mark.parametrize("spec, message", [
    ("no-such-model@{tmp}/m.pt", "open_clip has no model 'no-such-model'"),
    ("{name}@{tmp}/missing.pt", "not found"),
    ("{tmp}/m.pt", "cannot tell the model from the file alone"),
    ("ViT-B-32/no_such_tag", "no pretrained tag 'no_such_tag'"),
    ("ViT-B-32", "needs weights"),
    ("local-dir:{tmp}", "open_clip_config.json"),
])
def test_bad_specs_are_one_line_encoder_errors(tmp_path, tiny_model_name, model, spec, message):
    torch.save(model.state_dict(), tmp_path / "m.pt")
    with pytest.raises(EncoderError, match=message) as caught:
        load_open_clip_encoder(spec.format(tmp=tmp_path, name=tiny_model_name), device="cpu")
    assert "\n" not in str(caught.value)


def test_longclip_file_given_as_open_clip_is_redirected(tmp_path, tiny_model_name, model):
    state = dict(model.state_dict())
    state["positional_embedding_res"] = state["positional_embedding"].clone()
    torch.save(state, tmp_path / "longclip-x.pt")
    with pytest.raises(EncoderError, match="Long-CLIP checkpoint"):
        load_open_clip_encoder(f"{tiny_model_name}@{tmp_path / 'longclip-x.pt'}", device="cpu")


@pytest.mark.parametrize("spec, missing, fetch, offline", [
    ("ViT-B-32/laion2b_s34b_b79k", "weights of ViT-B-32/laion2b_s34b_b79k",
     "`hf download laion/CLIP-ViT-B-32-laion2B-s34B-b79K open_clip_model.safetensors`",
     "--encoder ViT-B-32@/path/to/open_clip_model.safetensors"),
    ("hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K", "config of hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
     "`hf download laion/CLIP-ViT-B-32-laion2B-s34B-b79K open_clip_config.json open_clip_model.safetensors`",
     "--encoder local-dir:"),
])
def test_missing_weights_offline_say_which_and_how_to_pass_a_file(monkeypatch, tmp_path, spec, missing, fetch,
                                                                  offline):
    import huggingface_hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(EncoderError) as caught:
        load_open_clip_encoder(spec, device="cpu")
    message = str(caught.value)
    assert missing in message and "HF_HUB_OFFLINE" in message
    # the command that fetches the files ahead of time, and the spec that reads a copied one (issue #30)
    assert fetch in message and offline in message
    assert "\n" not in message


def test_embed_entry_point_uses_this_loader(tmp_path, tiny_model_name, model, captions):
    """capgeo.encoders.embed with an open_clip spec: same vectors, token counts and truncation flags."""
    from capgeo.encoders import embed
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    embeddings = embed(captions, f"{tiny_model_name}@{path}", device="cpu", use_cache=False, max_tokens=40)
    cut = open_clip.SimpleTokenizer(context_length=40)(captions)
    padded = torch.zeros(len(captions), 77, dtype=torch.long)
    padded[:, :40] = cut
    assert np.abs(embeddings.vectors - reference_embeddings(model, padded)).max() < 1e-5
    wide = open_clip.SimpleTokenizer(context_length=1000)(captions)
    assert (embeddings.truncated == ((wide != 0).sum(dim=1) > 40).numpy()).all()
    assert embeddings.info.kind == "open_clip" and embeddings.max_tokens == 40


@pytest.mark.parametrize("name", ["run@3/epoch.pt", "EPOCH.PT", "W.SAFETENSORS"])
def test_bare_checkpoint_with_an_at_sign_in_its_path_or_an_upper_case_suffix(tmp_path, model, captions, name):
    """A folder called run@3 was read as MODEL@checkpoint; .PT was not a checkpoint suffix and a
    .SAFETENSORS file was handed to torch.load."""
    from safetensors.torch import save_file

    from capgeo.encoders.registry import get_encoder

    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".safetensors":
        save_file({key: value.contiguous() for key, value in model.state_dict().items()}, str(path))
    else:
        torch.save(model.state_dict(), path)
    path.with_suffix(".json").write_text(json.dumps(tiny_config(77)))
    encoder = get_encoder(str(path), device="cpu", cache_dir=tmp_path / "cache")
    assert encoder.info.kind == "open_clip"
    assert np.abs(encoder.encode(captions) - expected_for(model, captions)).max() < 1e-5
    # and MODEL@ with that path still reads the model name before the first @ only
    by_config = get_encoder(f"{path.with_suffix('.json')}@{path}", device="cpu", cache_dir=tmp_path / "cache")
    assert np.abs(by_config.encode(captions) - expected_for(model, captions)).max() < 1e-5


def test_local_dir_fingerprint_does_not_depend_on_how_the_path_is_spelled(tmp_path, model, monkeypatch):
    """Four spellings of one folder gave four fingerprints: four cache entries, and saved profiles that
    disagreed on the encoder."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": tiny_config(77), "preprocess_cfg": {}}))
    torch.save(model.state_dict(), folder / "open_clip_pytorch_model.bin")
    monkeypatch.chdir(tmp_path)
    fingerprints = {load_open_clip_encoder(f"local-dir:{spelling}", device="cpu").info.fingerprint
                    for spelling in ("my-model", "./my-model", str(folder), "my-model/")}
    assert len(fingerprints) == 1
    other = tmp_path / "other"
    other.mkdir()
    (other / "open_clip_config.json").write_text(json.dumps({"model_cfg": tiny_config(77, quick_gelu=False),
                                                             "preprocess_cfg": {}}))
    torch.save(model.state_dict(), other / "open_clip_pytorch_model.bin")
    assert load_open_clip_encoder(f"local-dir:{other}", device="cpu").info.fingerprint not in fingerprints


def test_torchscript_archive_loads_like_its_state_dict(tmp_path, tiny_model_name, model, captions):
    """OpenAI's released CLIP .pt files are TorchScript archives; torch.load refuses them under
    weights_only, and capgeo called them "truncated or damaged"."""
    tokens = open_clip.SimpleTokenizer()(["a cat"])
    traced = torch.jit.trace_module(model, {"encode_text": tokens, "encode_image": torch.zeros(1, 3, 32, 32)},
                                    check_trace=False)
    path = tmp_path / "ViT-tiny.pt"
    torch.jit.save(traced, path)
    encoder = load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu")
    assert np.abs(encoder.encode(captions) - expected_for(model, captions)).max() < 1e-5


def test_a_file_that_is_no_checkpoint_gets_no_advice_to_turn_off_weights_only(tmp_path, tiny_model_name):
    path = tmp_path / "garbage.pt"
    path.write_text("garbage\n")
    with pytest.raises(EncoderError) as error:
        load_open_clip_encoder(f"{tiny_model_name}@{path}", device="cpu").encode(["a"])
    assert "not a PyTorch checkpoint" in str(error.value) and "weights_only" not in str(error.value)


def test_hugging_face_text_tower_is_tokenised_at_its_configured_context(tmp_path, captions):
    """open_clip tokenises a Hugging Face text tower at text_cfg's context_length (77 by default), as
    get_tokenizer does; capgeo took the model's position-table size (512 for BERT) and gave other vectors."""
    from open_clip.tokenizer import HFTokenizer

    from capgeo.encoders.minilm import default_model_dir

    bert = str(default_model_dir())  # a real BERT config and tokenizer that ship with a package: offline
    config = {"embed_dim": 32, "custom_text": True,
              "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16},
              "text_cfg": {"hf_model_name": bert, "hf_tokenizer_name": bert, "hf_pooler_type": "mean_pooler",
                           "hf_proj_type": "linear", "context_length": 77}}
    (tmp_path / "hf.json").write_text(json.dumps(config))
    built = {key: value for key, value in config.items() if key != "custom_text"}
    torch.manual_seed(4)
    hf_model = open_clip.CustomTextCLIP(**dict(built, text_cfg=dict(config["text_cfg"], hf_model_pretrained=False)))
    hf_model.eval()
    torch.save(hf_model.state_dict(), tmp_path / "hf.pt")
    texts = captions + ["dog " * 120]  # longer than 77 tokens
    try:
        reference_tokens = HFTokenizer(bert, context_length=77)(texts)
    except AttributeError as error:  # open_clip's own tokenizer against a transformers it predates
        pytest.skip(f"open_clip {open_clip.__version__}'s HFTokenizer does not run with this transformers: {error}")
    encoder = load_open_clip_encoder(f"{tmp_path / 'hf.json'}@{tmp_path / 'hf.pt'}", device="cpu")
    assert encoder.info.context_length == 77
    expected = reference_embeddings(hf_model, reference_tokens)
    assert np.abs(encoder.encode(texts) - expected).max() < 1e-5


def test_a_tower_that_appends_a_class_token_keeps_its_context(tmp_path):
    """CoCa (embed_cls) has one positional row more than its context: the row count was taken as
    the context, the model rebuilt one token longer, its table interpolated, and the vectors came out
    at cosine 0.45-0.64 from open_clip's own (long captions: a traceback)."""
    import copy

    config = {"embed_dim": 64, "custom_text": True,
              "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16, "head_width": 32,
                             "attentional_pool": True, "attn_pooler_heads": 2, "output_tokens": True},
              "text_cfg": {"context_length": 76, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2,
                           "embed_cls": True, "output_tokens": True},
              "multimodal_cfg": {"context_length": 76, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 1,
                                 "attn_pooler_heads": 2}}
    torch.manual_seed(0)
    arguments = copy.deepcopy(config)
    arguments.pop("custom_text")
    model = open_clip.CoCa(**arguments).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    torch.save(model.state_dict(), tmp_path / "coca.pt")
    (tmp_path / "coca.json").write_text(json.dumps(config))
    captions = ["a dog on a red couch", "two cats asleep on a bed", "a plane over the sea " * 30]
    with torch.no_grad():
        reference = model.encode_text(open_clip.SimpleTokenizer(context_length=76)(captions)).numpy()
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    encoder = load_open_clip_encoder(str(tmp_path / "coca.pt"), device="cpu", cache_dir=tmp_path / "memo")
    assert encoder.info.context_length == 76
    np.testing.assert_allclose(encoder.encode(captions), reference, atol=1e-5)


def test_a_ddp_prefixed_safetensors_checkpoint_is_read_like_the_pt_one(tmp_path, model, captions):
    """module.-prefixed keys were stripped for .pt files only: the same weights as .safetensors did not
    fit their model."""
    from safetensors.torch import save_file

    from capgeo.encoders.registry import get_encoder

    path = tmp_path / "ddp.safetensors"
    save_file({f"module.{key}": value.contiguous() for key, value in model.state_dict().items()}, str(path))
    path.with_suffix(".json").write_text(json.dumps(tiny_config(77)))
    encoder = get_encoder(str(path), device="cpu", cache_dir=tmp_path / "cache")
    assert np.abs(encoder.encode(captions) - expected_for(model, captions)).max() < 1e-5
