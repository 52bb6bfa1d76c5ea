"""The embedded default encoder on real captions, checked against sentence-transformers
and against a hand-written mean pooling over the transformer's outputs."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from capgeo.captions.model import CaptionSet
from capgeo.encoders import embed
from capgeo.encoders.minilm import MiniLMEncoder, default_model_dir, load_minilm_encoder
from capgeo.errors import EncoderError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DOCCI = DATA / "docci-test" / "docci_test.json"
COCO = DATA / "coco-karpathy-test" / "mscoco_test.json"

pytestmark = pytest.mark.skipif(not (DOCCI.exists() and COCO.exists()),
                                reason=f"real captions not found under {DATA}")


@pytest.fixture(scope="module")
def captions() -> CaptionSet:
    """20 long DOCCI captions and 20 short COCO captions (4 images x 5)."""
    docci = json.loads(DOCCI.read_text())[:20]
    coco = json.loads(COCO.read_text())[:4]
    rows = [(record["filename"], record["filename"], record["caption"]) for record in docci]
    rows += [(f"{image['image_name']}#{k}", image["image_name"], caption)
             for image in coco for k, caption in enumerate(image["captions"][:5])]
    table = pl.DataFrame({"caption_id": [r[0] for r in rows], "group_id": [r[1] for r in rows],
                          "split": ["test"] * len(rows), "text": [r[2] for r in rows]})
    return CaptionSet(table, DATA, "test")


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    """Loaded once, with every outgoing connection refused: the default must work offline."""
    original = socket.socket.connect

    def refuse(self, address):
        raise AssertionError(f"network access attempted: {address}")

    socket.socket.connect = refuse
    try:
        loaded = load_minilm_encoder(device="cpu")
        loaded.model  # force the load inside the guard
    finally:
        socket.socket.connect = original
    return loaded


@pytest.fixture(scope="module")
def reference():
    """An independent tokenizer and transformer from the same folder (plain transformers)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = default_model_dir()
    return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval(), torch


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def full(encoder, captions, cache_dir):
    """The captions embedded once at full context, in chunks smaller than the set."""
    return embed(captions, encoder, cache_dir=cache_dir, chunk_rows=16)


def mean_pool(reference, texts, max_length):
    tokenizer, model, torch = reference
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def test_info_describes_the_packaged_model(encoder):
    info = encoder.info
    assert (info.kind, info.name, info.width, info.logit_scale) == ("sentence-transformers", "all-MiniLM-L6-v2",
                                                                    384, None)
    assert info.context_length == encoder.model.max_seq_length == 256
    weights = default_model_dir() / "model.safetensors"
    assert info.fingerprint == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_token_counts_match_the_tokenizer(encoder, captions, reference):
    tokenizer = reference[0]
    counts = encoder.token_counts(captions.texts)
    expected = [len(tokenizer.tokenize(text)) + 2 for text in captions.texts]  # + [CLS] and [SEP]
    np.testing.assert_array_equal(counts, expected)
    assert counts[:20].min() > 64 and counts[20:].max() < 40  # DOCCI long, COCO short


def test_embeddings_match_sentence_transformers(encoder, captions, full):
    rows = [0, 7, 19, 20, 33, 39]
    direct = encoder.model.encode([captions.texts[i] for i in rows], normalize_embeddings=True,
                                  convert_to_numpy=True)
    assert full.vectors.shape == (40, 384) and full.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(full.vectors, axis=1), 1.0, atol=1e-5)
    assert np.abs(full.vectors[rows] - direct).max() < 2e-5
    np.testing.assert_array_equal(full.token_counts, encoder.token_counts(captions.texts))
    assert full.origin == "encoded" and full.max_tokens == 256


@pytest.mark.parametrize("max_tokens", [None, 24])
def test_embeddings_match_hand_written_mean_pooling(encoder, captions, reference, max_tokens):
    rows = [0, 25]  # one DOCCI caption (cut either way), one COCO caption
    texts = [captions.texts[i] for i in rows]
    ours = encoder.encode(texts, max_tokens=max_tokens)
    expected = mean_pool(reference, texts, max_tokens or 256)
    assert np.abs(ours - expected).max() < 2e-5


def test_truncation_flags_and_effect(encoder, captions, full, cache_dir):
    result = embed(captions, encoder, cache_dir=cache_dir, max_tokens=64)
    counts = encoder.token_counts(captions.texts)
    np.testing.assert_array_equal(result.truncated, counts > 64)
    assert result.truncated[:20].all() and not result.truncated[20:].any()
    assert result.max_tokens == 64 and result.origin == "encoded"
    np.testing.assert_array_equal(full.truncated, counts > 256)
    # cutting changes exactly the captions that were cut
    changed = np.abs(result.vectors - full.vectors).max(axis=1) > 1e-4
    np.testing.assert_array_equal(changed, counts > 64)


def test_row_order_is_caption_order(encoder, captions, full):
    for row in (3, 21, 39):
        alone = encoder.encode([captions.texts[row]])[0]
        assert np.abs(full.vectors[row] - alone).max() < 2e-5


def test_second_embed_is_a_cache_hit(captions, full, cache_dir):
    fresh = load_minilm_encoder(device="cpu")  # not loaded: a hit must not need the model
    second = embed(captions, fresh, cache_dir=cache_dir, chunk_rows=16)
    assert second.origin == "cache" and fresh._model is None
    np.testing.assert_array_equal(second.vectors, full.vectors)


@pytest.mark.parametrize("max_tokens", [1, 257])
def test_max_tokens_out_of_range(encoder, max_tokens):
    with pytest.raises(EncoderError, match="--max-tokens: expected 2 to the encoder's context length 256"):
        encoder.encode(["a caption"], max_tokens=max_tokens)


def test_empty_input(encoder):
    assert encoder.encode([]).shape == (0, 384)
    assert encoder.token_counts([]).shape == (0,)


def test_unusable_device_is_an_encoder_error(encoder):
    with pytest.raises(EncoderError, match="on device banana: .*banana"):
        load_minilm_encoder(device="banana").encode(["a caption"])
