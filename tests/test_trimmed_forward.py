"""The trimmed, length-sorted forward gives open_clip's own full-length embeddings, and is used only where exact."""

from __future__ import annotations

import numpy as np
import pytest

import torch
import open_clip

from _clip_fixtures import coco_captions, docci_captions, reference_embeddings, tiny_clip, tiny_config  # noqa: E402
from capgeo.encoders.base import EncoderInfo  # noqa: E402
from capgeo.encoders.openclip import OpenClipTextEncoder  # noqa: E402
from capgeo.encoders.trimmed import encode_token_rows, forward_trimmed, text_tower  # noqa: E402
from capgeo.errors import EncoderError  # noqa: E402


def encoder_for(model) -> OpenClipTextEncoder:
    info = EncoderInfo(spec="test", kind="open_clip", name="tiny", width=32,
                       context_length=int(model.context_length), logit_scale=None, fingerprint="test")
    return OpenClipTextEncoder(model, open_clip.SimpleTokenizer(context_length=int(model.context_length)), info, "cpu")


@pytest.fixture
def captions(shared_data) -> list[str]:
    # short COCO captions and long DOCCI ones, mixed, so batches differ a lot in length
    texts = coco_captions(shared_data, images=5) + docci_captions(shared_data, count=10)
    return [texts[i] for i in np.random.default_rng(0).permutation(len(texts))]


@pytest.mark.parametrize("context_length", [77, 248])
def test_trimmed_equals_full_length_encode_text(captions, context_length):
    model = tiny_clip(tiny_config(context_length))
    encoder = encoder_for(model)
    vectors = encoder.encode(captions, batch_size=8)

    tokens = open_clip.SimpleTokenizer(context_length=context_length)(captions)
    expected = reference_embeddings(model, tokens)
    assert encoder.last_stats.path == "trimmed"
    assert vectors.dtype == np.float32 and vectors.shape == (len(captions), 32)
    assert np.abs(vectors - expected).max() < 1e-5
    # and it really ran shorter sequences than the context
    assert encoder.last_stats.positions_run < 0.8 * encoder.last_stats.positions_full
    assert min(encoder.last_stats.widths) < 30


def test_custom_text_clip_tower_is_trimmed_exactly(captions):
    model = tiny_clip({**tiny_config(77), "custom_text": True})
    assert isinstance(model, open_clip.CustomTextCLIP)
    encoder = encoder_for(model)
    vectors = encoder.encode(captions, batch_size=5)
    expected = reference_embeddings(model, open_clip.SimpleTokenizer(context_length=77)(captions))
    assert encoder.last_stats.path == "trimmed"
    assert np.abs(vectors - expected).max() < 1e-5


def test_truncation_matches_first_tokens_encoded_directly(captions):
    """max_tokens=L gives the embedding of the caption's first L tokens (end token kept last),
    as open_clip's tokenizer cuts at context length L, run through the full-length model."""
    model = tiny_clip(tiny_config(77))
    encoder = encoder_for(model)
    for limit in (8, 32):
        vectors = encoder.encode(captions, max_tokens=limit, batch_size=8)
        cut = open_clip.SimpleTokenizer(context_length=limit)(captions)
        assert (cut[:, -1] != 0).any()   # some captions really were cut
        padded = torch.zeros(len(captions), 77, dtype=torch.long)
        padded[:, :limit] = cut
        expected = reference_embeddings(model, padded)
        assert np.abs(vectors - expected).max() < 1e-5
        assert max(encoder.last_stats.widths) <= limit
    # cutting changes long captions: at 8 tokens they differ from the uncut embedding
    assert np.abs(encoder.encode(captions, max_tokens=8) - encoder.encode(captions)).max() > 1e-2


def test_max_tokens_out_of_range_is_an_encoder_error():
    encoder = encoder_for(tiny_clip(tiny_config(77)))
    with pytest.raises(EncoderError, match="outside 2..77"):
        encoder.encode(["a dog"], max_tokens=78)


def test_input_order_is_kept_and_batch_size_does_not_matter(captions):
    encoder = encoder_for(tiny_clip(tiny_config(77)))
    captions = captions[:12]
    one_batch = encoder.encode(captions, batch_size=len(captions))
    singles = encoder.encode(captions, batch_size=1)
    reversed_ = encoder.encode(captions[::-1], batch_size=5)[::-1]
    assert np.abs(one_batch - singles).max() < 1e-5
    assert np.abs(one_batch - reversed_).max() < 1e-5


@pytest.mark.parametrize("text_overrides, custom_text, reason", [
    ({"no_causal_mask": True}, True, "bidirectionally"),                      # bidirectional tower
    ({"no_causal_mask": True, "pool_type": "last"}, True, "pools with 'last'"),    # SigLIP-like tower
    ({"pool_type": "first"}, False, "pools with 'first'"),
    ({"pool_type": "last"}, False, "pools with 'last'"),
    ({"embed_cls": True, "pool_type": "last"}, True, "class token"),             # CoCa-style appended class token
])
def test_towers_where_trimming_is_not_exact_run_at_full_length(captions, text_overrides, custom_text, reason):
    config = tiny_config(77, **text_overrides)
    if custom_text:
        config["custom_text"] = True
    model = tiny_clip(config)
    tower = text_tower(model)
    assert not tower.trimmable and reason in tower.reason

    encoder = encoder_for(model)
    vectors = encoder.encode(captions[:10], batch_size=4)
    assert encoder.last_stats.path == "full"
    assert set(encoder.last_stats.widths) == {77}
    expected = reference_embeddings(model, open_clip.SimpleTokenizer(context_length=77)(captions[:10]))
    assert np.abs(vectors - expected).max() < 1e-5


def test_trimming_a_non_causal_tower_would_be_wrong(captions):
    """Why the fallback exists: the same weights with a bidirectional mask give different
    embeddings when run trimmed, so trimming must be refused for such towers."""
    model = tiny_clip({**tiny_config(77, no_causal_mask=True), "custom_text": True})
    parts = text_tower(model)
    assert not parts.trimmable
    # run the trimmed forward anyway, with a zero (bidirectional) mask of the right size
    parts.attn_mask = torch.zeros(77, 77)
    tokens = open_clip.SimpleTokenizer(context_length=77)(captions)
    tokens = tokens[(tokens != 0).sum(dim=1) < 30][:6]            # short captions: much to trim
    width = int((tokens != 0).sum(dim=1).max())
    assert len(tokens) == 6 and width < 30
    with torch.no_grad():
        trimmed = torch.nn.functional.normalize(forward_trimmed(parts, tokens[:, :width]), dim=-1).numpy()
    assert np.abs(trimmed - reference_embeddings(model, tokens)).max() > 1e-3


def test_trim_false_forces_the_full_length_path(captions):
    model = tiny_clip(tiny_config(77))
    rows = [np.asarray(r[r != 0]) for r in open_clip.SimpleTokenizer(context_length=77)(captions).numpy()]
    trimmed, trimmed_stats = encode_token_rows(text_tower(model), rows, batch_size=8)
    full, full_stats = encode_token_rows(text_tower(model), rows, batch_size=8, trim=False)
    assert (trimmed_stats.path, full_stats.path) == ("trimmed", "full")
    assert np.abs(trimmed - full).max() < 1e-5


def test_subclassed_blocks_run_at_full_length():
    """A ResidualAttentionBlock subclass whose forward looks at every position passed the isinstance
    check and was trimmed, 0.16 away from its own encode_text."""
    from open_clip.transformer import ResidualAttentionBlock

    class MixingBlock(ResidualAttentionBlock):
        def forward(self, q_x, *args, **kwargs):
            out = super().forward(q_x, *args, **kwargs)
            return out + out.mean(dim=1, keepdim=True)

    model = tiny_clip(tiny_config(77))
    for block in model.transformer.resblocks:
        block.__class__ = MixingBlock
    tower = text_tower(model)
    assert not tower.trimmable and "unknown transformer blocks" in tower.reason
    texts = ["a dog", "a cat on a mat", "two birds on a wire above a quiet street"]
    encoder = encoder_for(model)
    vectors = encoder.encode(texts)
    assert encoder.last_stats.path == "full"
    expected = reference_embeddings(model, open_clip.SimpleTokenizer(context_length=77)(texts))
    assert np.abs(vectors - expected).max() < 1e-5
