"""Long-CLIP checkpoints load into open_clip with the two positional tables folded, at 248 tokens.

The reference is Long-CLIP's own text forward (beichenzbc/Long-CLIP, model/model_longclip.py,
``encode_text``) written out with plain torch ops: both positional tables added under their
masks (rows 0-19 and 20-247), causal attention, QuickGELU MLP, final LayerNorm, end-of-text
pooling, projection.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import torch
import open_clip

from _clip_fixtures import coco_captions, docci_captions  # noqa: E402
from capgeo.encoders.longclip import (  # noqa: E402
    LONGCLIP_CONTEXT, fold_positional_embeddings, load_longclip_encoder, verify_positional_embedding)
from capgeo.errors import EncoderError  # noqa: E402

WIDTH, LAYERS, EMBED_DIM, VOCAB = 128, 2, 32, 49408   # 128 wide -> 2 heads of 64, as Long-CLIP infers


def longclip_state_dict(seed: int = 0) -> dict:
    """A random Long-CLIP-format state dict (OpenAI key layout, two 248-row positional tables)."""
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape, std=0.02):
        return torch.randn(*shape, generator=generator) * std

    state = {
        "token_embedding.weight": randn(VOCAB, WIDTH),
        "positional_embedding": randn(LONGCLIP_CONTEXT, WIDTH, std=0.5),
        "positional_embedding_res": randn(LONGCLIP_CONTEXT, WIDTH, std=0.5),
        "ln_final.weight": 1 + randn(WIDTH, std=0.1),
        "ln_final.bias": randn(WIDTH, std=0.1),
        "text_projection": randn(WIDTH, EMBED_DIM, std=WIDTH ** -0.5),
        "logit_scale": torch.tensor(4.6052),
        # Long-CLIP checkpoints carry the image tower too; the loader must ignore it
        "visual.proj": randn(64, EMBED_DIM),
        "visual.conv1.weight": randn(64, 3, 14, 14),
    }
    for layer in range(LAYERS):
        prefix = f"transformer.resblocks.{layer}."
        state.update({
            prefix + "ln_1.weight": 1 + randn(WIDTH, std=0.1), prefix + "ln_1.bias": randn(WIDTH, std=0.1),
            prefix + "attn.in_proj_weight": randn(3 * WIDTH, WIDTH, std=WIDTH ** -0.5),
            prefix + "attn.in_proj_bias": randn(3 * WIDTH),
            prefix + "attn.out_proj.weight": randn(WIDTH, WIDTH, std=WIDTH ** -0.5),
            prefix + "attn.out_proj.bias": randn(WIDTH),
            prefix + "ln_2.weight": 1 + randn(WIDTH, std=0.1), prefix + "ln_2.bias": randn(WIDTH, std=0.1),
            prefix + "mlp.c_fc.weight": randn(4 * WIDTH, WIDTH, std=WIDTH ** -0.5),
            prefix + "mlp.c_fc.bias": randn(4 * WIDTH),
            prefix + "mlp.c_proj.weight": randn(WIDTH, 4 * WIDTH, std=(4 * WIDTH) ** -0.5),
            prefix + "mlp.c_proj.bias": randn(WIDTH),
        })
    return state


def longclip_encode_text(state: dict, tokens: torch.Tensor) -> np.ndarray:
    """Long-CLIP's text forward, independently, with plain torch ops; L2-normalised."""
    batch, length = tokens.shape
    heads = WIDTH // 64
    mask1 = torch.zeros(length, 1)
    mask1[:20] = 1
    mask2 = torch.zeros(length, 1)
    mask2[20:] = 1
    x = state["token_embedding.weight"][tokens]
    x = x + state["positional_embedding"] * mask1 + state["positional_embedding_res"] * mask2
    causal = torch.full((length, length), float("-inf")).triu(1)

    def layer_norm(value, name):
        mean = value.mean(-1, keepdim=True)
        var = value.var(-1, keepdim=True, unbiased=False)
        return (value - mean) / torch.sqrt(var + 1e-5) * state[name + ".weight"] + state[name + ".bias"]

    for layer in range(LAYERS):
        p = f"transformer.resblocks.{layer}."
        h = layer_norm(x, p + "ln_1")
        q, k, v = (h @ state[p + "attn.in_proj_weight"].T + state[p + "attn.in_proj_bias"]).chunk(3, dim=-1)
        split = lambda t: t.reshape(batch, length, heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5) + causal
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, WIDTH)
        x = x + attended @ state[p + "attn.out_proj.weight"].T + state[p + "attn.out_proj.bias"]
        h = layer_norm(x, p + "ln_2") @ state[p + "mlp.c_fc.weight"].T + state[p + "mlp.c_fc.bias"]
        h = h * torch.sigmoid(1.702 * h)                                          # QuickGELU
        x = x + h @ state[p + "mlp.c_proj.weight"].T + state[p + "mlp.c_proj.bias"]
    x = layer_norm(x, "ln_final")
    pooled = x[torch.arange(batch), tokens.argmax(dim=-1)] @ state["text_projection"]
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


@pytest.fixture(scope="module")
def state() -> dict:
    return longclip_state_dict()


@pytest.fixture
def checkpoint(tmp_path, state):
    path = tmp_path / "longclip-T.pt"
    torch.save(state, path)
    return path


@pytest.fixture
def long_captions(shared_data) -> list[str]:
    # DOCCI captions: most are longer than 77 tokens; add the two longest of the first 300,
    # which are longer than 248 and get cut
    docci = docci_captions(shared_data, count=300)
    longest = sorted(docci, key=len)[-2:]
    return docci[:10] + longest + coco_captions(shared_data, images=2)


def test_folded_model_equals_longclip_text_forward(checkpoint, state, long_captions):
    encoder = load_longclip_encoder(str(checkpoint), device="cpu")
    assert encoder.info.kind == "longclip"
    assert (encoder.info.context_length, encoder.info.width) == (248, EMBED_DIM)
    assert encoder.info.logit_scale == pytest.approx(float(np.exp(4.6052)), rel=1e-5)
    assert encoder.info.fingerprint == hashlib.sha256(checkpoint.read_bytes()).hexdigest()

    tokens = open_clip.SimpleTokenizer(context_length=248)(long_captions)
    assert int((tokens != 0).sum(dim=1).max()) > 77         # the test exercises positions past 77
    vectors = encoder.encode(long_captions, batch_size=4)
    expected = longclip_encode_text(state, tokens)
    assert encoder.last_stats.path == "trimmed"
    assert np.abs(vectors - expected).max() < 1e-5

    counts = encoder.token_counts(long_captions)
    assert counts.max() > 248 and (np.minimum(counts, 248) == (tokens != 0).sum(dim=1).numpy()).all()


def test_checkpoint_with_module_prefix_and_state_dict_key_loads_the_same(tmp_path, checkpoint, state, long_captions):
    wrapped = tmp_path / "longclip-wrapped.pt"
    torch.save({"state_dict": {"module." + key: value for key, value in state.items()}, "epoch": 6}, wrapped)
    plain = load_longclip_encoder(str(checkpoint), device="cpu").encode(long_captions[:4])
    assert np.abs(load_longclip_encoder(str(wrapped), device="cpu").encode(long_captions[:4]) - plain).max() == 0


def test_fold_takes_first_20_rows_from_one_table_and_the_rest_from_the_other(state):
    folded = fold_positional_embeddings(state)
    assert torch.equal(folded[:20], state["positional_embedding"][:20])
    assert torch.equal(folded[20:], state["positional_embedding_res"][20:])


def test_a_77_row_interpolated_table_is_caught(state, shared_data):
    """The silent failure: open_clip's checkpoint loader interpolates a 248-row table to a 77-token tower."""
    from open_clip.model import resize_text_pos_embed
    from open_clip.transformer import QuickGELU, TextTransformer

    folded = fold_positional_embeddings(state)
    tower77 = TextTransformer(context_length=77, vocab_size=VOCAB, width=WIDTH, heads=WIDTH // 64, layers=LAYERS,
                              output_dim=EMBED_DIM, act_layer=QuickGELU)
    text_state = {k: v for k, v in state.items() if not k.startswith(("visual.", "positional_embedding", "logit"))}
    text_state["positional_embedding"] = folded.clone()
    resize_text_pos_embed(text_state, tower77)                 # what open_clip.load_checkpoint does, silently
    tower77.load_state_dict(text_state)
    assert tower77.positional_embedding.shape[0] == 77

    short = coco_captions(shared_data, images=3)               # short enough for 77 tokens
    tokens77 = open_clip.SimpleTokenizer(context_length=77)(short)
    with torch.no_grad():
        interpolated = torch.nn.functional.normalize(tower77(tokens77), dim=-1).numpy()
    expected = longclip_encode_text(state, open_clip.SimpleTokenizer(context_length=248)(short))
    assert np.abs(interpolated - expected).max() > 1e-2      # wrong embeddings, no error from open_clip

    with pytest.raises(EncoderError, match="77-row positional table"):
        verify_positional_embedding(tower77, folded)


def test_plain_clip_weights_are_not_taken_for_longclip(tmp_path, state):
    plain = {k: v for k, v in state.items() if k != "positional_embedding_res"}
    path = tmp_path / "clip.pt"
    torch.save(plain, path)
    with pytest.raises(EncoderError, match="no positional_embedding_res"):
        load_longclip_encoder(str(path), device="cpu")


def test_missing_file_is_an_encoder_error(tmp_path):
    with pytest.raises(EncoderError, match="not found"):
        load_longclip_encoder(str(tmp_path / "longclip-L.pt"), device="cpu")


def test_missing_hub_weights_offline_say_what_to_do(monkeypatch, tmp_path):
    import huggingface_hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(EncoderError) as caught:
        load_longclip_encoder("longclip-L", device="cpu")
    message = str(caught.value)
    assert "longclip-L.pt of BeichenZhang/LongCLIP-L" in message and "--encoder /path/to/longclip-L.pt" in message
    # the one command that fetches it ahead of time, and where it lands (issue #30)
    assert "`hf download BeichenZhang/LongCLIP-L longclip-L.pt`" in message and "~/.cache/huggingface/hub" in message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["long-clip-L.pt", "weights.pth", "run@3/model.pt", "LONGCLIP-T.PT",
                                  "longclip-T.safetensors", "W.SAFETENSORS"])
def test_a_longclip_file_is_known_by_its_contents_whatever_its_name(tmp_path, state, checkpoint, name):
    """Only '*longclip*.pt' names reached the Long-CLIP loader, and the open_clip loader's advice
    ('pass the file itself') sent the user back to the same refusal."""
    from safetensors.torch import save_file

    from capgeo.encoders.registry import get_encoder

    path = tmp_path / "renamed" / name
    path.parent.mkdir(parents=True)
    if path.suffix.lower() == ".safetensors":
        save_file({key: value.contiguous() for key, value in state.items()}, str(path))
    else:
        torch.save(state, path)
    texts = ["a red bus parked beside a brick wall", "two dogs run across a wide green field " * 12]
    encoder = get_encoder(str(path), device="cpu", cache_dir=tmp_path / "cache")
    assert encoder.info.kind == "longclip" and encoder.info.context_length == 248
    reference = load_longclip_encoder(str(checkpoint), device="cpu", cache_dir=tmp_path / "cache")
    np.testing.assert_allclose(encoder.encode(texts), reference.encode(texts), atol=1e-6)


def test_model_at_a_longclip_file_says_to_pass_the_file_and_that_works(tmp_path, state):
    from capgeo.encoders.registry import get_encoder

    path = tmp_path / "long-clip.pt"
    torch.save(state, path)
    with pytest.raises(EncoderError, match="pass the file itself") as raised:
        get_encoder(f"ViT-L-14@{path}", device="cpu", cache_dir=tmp_path / "cache")
    assert f"--encoder {path}" in str(raised.value)
    assert get_encoder(str(path), device="cpu", cache_dir=tmp_path / "cache").info.kind == "longclip"


def test_a_ddp_prefixed_longclip_safetensors_is_known_as_longclip(tmp_path, state, checkpoint):
    from safetensors.torch import save_file

    from capgeo.encoders.registry import get_encoder

    path = tmp_path / "weights.safetensors"
    save_file({f"module.{key}": value.contiguous() for key, value in state.items()}, str(path))
    encoder = get_encoder(str(path), device="cpu", cache_dir=tmp_path / "cache")
    assert encoder.info.kind == "longclip"
    reference = load_longclip_encoder(str(checkpoint), device="cpu", cache_dir=tmp_path / "cache")
    texts = ["a red bus parked beside a brick wall"]
    np.testing.assert_allclose(encoder.encode(texts), reference.encode(texts), atol=1e-6)
