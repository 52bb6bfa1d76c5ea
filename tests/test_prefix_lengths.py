"""Several lengths from one forward (capgeo.encoders.prefix) and only the cut captions re-encoded
(capgeo.encoders.lengths): equal to encoding each cut caption on its own, refused where not exact."""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import pytest

import torch
import open_clip

from _clip_fixtures import coco_captions, docci_captions, tiny_clip, tiny_config  # noqa: E402
from capgeo.encoders import embed  # noqa: E402
from capgeo.encoders.base import EncoderInfo  # noqa: E402
from capgeo.encoders.lengths import embed_lengths  # noqa: E402
from capgeo.encoders.openclip import OpenClipTextEncoder  # noqa: E402
from capgeo.errors import EncoderError  # noqa: E402

LENGTHS = (2, 5, 16, 32, 64)


@functools.lru_cache(maxsize=None)
def tokenizer(context_length: int):
    return open_clip.SimpleTokenizer(context_length=context_length)  # reading its vocabulary takes a while


def encoder_for(model, context_length: int) -> OpenClipTextEncoder:
    info = EncoderInfo(spec="tiny", kind="open_clip", name="tiny", width=32, context_length=context_length,
                       logit_scale=None, fingerprint="tiny")
    return OpenClipTextEncoder(model, tokenizer(context_length), info, "cpu")


def bare_text_transformer(context_length: int, seed: int = 0, **options):
    """A bare open_clip TextTransformer, as the Long-CLIP loader builds (positions made to matter)."""
    from open_clip.transformer import QuickGELU, TextTransformer

    torch.manual_seed(seed)
    tower = TextTransformer(context_length=context_length, width=64, heads=2, layers=2, output_dim=32,
                            act_layer=QuickGELU, **options).eval()
    with torch.no_grad():
        tower.positional_embedding.normal_(std=0.5)
    return tower


def own_encoding(model, ids: list[int], length: int, context_length: int) -> np.ndarray:
    """The caption cut at ``length`` as open_clip's tokenizer cuts it (first L-1 ids, then the end
    token), run through the model's own forward alone, at full context."""
    if len(ids) > length:
        ids = ids[:length - 1] + [tokenizer(context_length).eot_token_id]
    row = torch.zeros(1, context_length, dtype=torch.long)
    row[0, :len(ids)] = torch.tensor(ids)
    with torch.no_grad():
        out = model.encode_text(row) if hasattr(model, "encode_text") else model(row)
    out = out[0] if isinstance(out, tuple) else out
    return torch.nn.functional.normalize(out, dim=-1).numpy()[0]


@pytest.fixture
def texts(shared_data) -> list[str]:
    # short COCO captions and long DOCCI ones, mixed: some lengths cut few captions, some all
    mixed = coco_captions(shared_data, images=2) + docci_captions(shared_data, count=8)
    return [mixed[i] for i in np.random.default_rng(1).permutation(len(mixed))]


def token_ids(texts, context_length) -> list[list[int]]:
    """Each caption's ids at the full context, cut there as open_clip's tokenizer cuts."""
    bpe = tokenizer(context_length)
    rows = []
    for text in texts:
        ids = [bpe.sot_token_id, *bpe.encode(text), bpe.eot_token_id]
        rows.append(ids if len(ids) <= context_length else ids[:context_length - 1] + [bpe.eot_token_id])
    return rows


@pytest.mark.parametrize("kind", ["clip-77", "custom-text-clip-77", "longclip-like-248"])
def test_every_length_equals_each_cut_caption_encoded_on_its_own(texts, kind):
    context = 248 if kind.endswith("248") else 77
    if kind == "clip-77":
        model = tiny_clip(tiny_config(77))
    elif kind == "custom-text-clip-77":
        model = tiny_clip({**tiny_config(77), "custom_text": True})
    else:
        model = bare_text_transformer(248)
    encoder = encoder_for(model, context)
    assert encoder.prefix_refusal == ""
    lengths = (*LENGTHS, 128, context) if context > 128 else (*LENGTHS, context)
    out = encoder.encode_lengths(texts, lengths, batch_size=3)
    assert encoder.last_stats.path == "prefix" and sorted(out) == sorted(lengths)
    counts = encoder.token_counts(texts)
    assert (counts > 64).any() and (counts < 16).any()   # some captions are cut at every length, some at none
    for row, ids in enumerate(token_ids(texts, context)):
        for length in lengths:
            expected = own_encoding(model, list(ids), length, context)
            assert np.abs(out[length][row] - expected).max() < 1e-6, (row, length)


def test_the_lengths_differ_where_captions_are_cut(texts):
    encoder = encoder_for(tiny_clip(tiny_config(77)), 77)
    out = encoder.encode_lengths(texts, (16, 77))
    counts = encoder.token_counts(texts)
    moved = np.einsum("ij,ij->i", out[16], out[77])
    assert np.all(moved[counts > 16] < 0.999)
    np.testing.assert_array_equal(out[16][counts <= 16], out[77][counts <= 16])


@pytest.mark.parametrize("tower, reason", [
    (lambda: bare_text_transformer(77, no_causal_mask=True), "causal"),
    (lambda: bare_text_transformer(77, pool_type="last"), "pools with 'last'"),
    (lambda: bare_text_transformer(77, qk_norm=True), "ResidualAttentionBlock"),
])
def test_refused_where_it_would_not_be_exact(texts, tower, reason):
    model = tower()
    encoder = encoder_for(model, 77)
    assert reason in encoder.prefix_refusal
    with pytest.raises(EncoderError, match="cannot encode several lengths in one forward"):
        encoder.encode_lengths(texts, (16, 77))
    # the lengths are still right: encoded one by one, only the cut captions again
    by_length = embed_lengths(texts, encoder, (16,), use_cache=False, progress=False)
    assert encoder.last_stats.path != "prefix"
    for row, ids in enumerate(token_ids(texts, 77)):
        np.testing.assert_allclose(by_length[16].vectors[row], own_encoding(model, list(ids), 16, 77), atol=1e-5)


def test_the_refusal_matters_reuse_forced_on_custom_blocks_is_wrong(texts, monkeypatch):
    """Forced past the check, the end-token forward repeats plain attention, not the tower's
    normalised queries and keys: its answers are wrong, which is why it is refused there."""
    import capgeo.encoders.prefix as prefix

    model = bare_text_transformer(77, qk_norm=True)
    encoder = encoder_for(model, 77)
    monkeypatch.setattr(prefix, "why_not_reusable", lambda parts: "")
    out = encoder.encode_lengths(texts, (16, 77))
    ids = token_ids(texts, 77)
    errors = [np.abs(out[16][row] - own_encoding(model, list(ids[row]), 16, 77)).max() for row in range(len(texts))]
    assert max(errors) > 1e-3


# --------------------------------------------------------------------------- any encoder: only cut captions


class WordEncoder:
    """A deterministic encoder of whole words: a caption cut at L keeps its first L-2 words
    (start and end tokens count, as BERT's do). It records what it is asked to encode."""

    def __init__(self, context_length: int = 40, width: int = 8):
        self.info = EncoderInfo(spec="words", kind="sentence-transformers", name="words", width=width,
                                context_length=context_length, logit_scale=None, fingerprint="words-v1")
        self.calls: list[tuple[int, list[str]]] = []

    def token_counts(self, texts):
        return np.array([len(text.split()) + 2 for text in texts], dtype=np.int64)

    def encode(self, texts, *, max_tokens=None, batch_size=64, progress=None):
        limit = max_tokens or self.info.context_length
        self.calls.append((limit, list(texts)))
        vectors = np.array([self._vector(" ".join(text.split()[:limit - 2])) for text in texts], dtype=np.float32)
        if progress is not None and hasattr(progress, "advance"):
            progress.advance(len(texts))
        return vectors.reshape(len(texts), self.info.width)

    def _vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        vector = np.random.default_rng(seed).normal(size=self.info.width)
        return vector / np.linalg.norm(vector)


def word_captions(n: int = 30) -> list[str]:
    rng = np.random.default_rng(0)
    return [" ".join(f"w{rng.integers(50)}" for _ in range(int(rng.integers(1, 45)))) for _ in range(n)]


def test_only_cut_captions_are_encoded_again_each_in_its_own_labelled_pass(monkeypatch):
    import capgeo.encoders.lengths as lengths_module

    bars = []
    real_bar = lengths_module.progress_bar

    class Recorded:
        def __init__(self, description, total):
            self.description, self.total, self.steps = description, total, []

        def advance(self, amount=1):
            self.steps.append(amount)

    def recording_bar(description, total, enabled=None):
        bars.append(Recorded(description, total))
        import contextlib

        @contextlib.contextmanager
        def bar():
            with real_bar(description, total, enabled=False):
                yield bars[-1]
        return bar()

    monkeypatch.setattr(lengths_module, "progress_bar", recording_bar)
    texts = word_captions()
    encoder = WordEncoder()
    counts = encoder.token_counts(texts)
    by_length = embed_lengths(texts, encoder, (8, 20), use_cache=False, chunk_rows=7)
    # the full context first (every caption), then each shorter length: only the captions it cuts
    encoded = {}
    for limit, batch in encoder.calls:
        encoded.setdefault(limit, []).extend(batch)
    assert sorted(encoded[40]) == sorted(texts)
    for length in (8, 20):
        assert sorted(encoded[length]) == sorted(t for t, c in zip(texts, counts) if c > length)
        expected = np.array([encoder._vector(" ".join(t.split()[:length - 2])) for t in texts])
        np.testing.assert_allclose(by_length[length].vectors, expected, atol=1e-6)
        # an uncut caption keeps its full-context vector, bit for bit
        np.testing.assert_array_equal(by_length[length].vectors[counts <= length],
                                      by_length[40].vectors[counts <= length])
    # one bar per pass, labelled with its length and its place among the passes, each counting
    # up to its own total and never back
    assert [bar.description for bar in bars] == ["Encoding with words: full context 40 (1/3)",
                                                  "Encoding with words: length 8 (2/3)",
                                                  "Encoding with words: length 20 (3/3)"]
    assert [bar.total for bar in bars] == [len(texts), int((counts > 8).sum()), int((counts > 20).sum())]
    for bar in bars:
        assert all(step >= 0 for step in bar.steps) and sum(bar.steps) == bar.total


def test_lengths_go_through_the_embedding_cache_under_embeds_keys(tmp_path):
    texts = word_captions()
    encoder = WordEncoder()
    first = embed_lengths(texts, encoder, (8, 20), cache_dir=tmp_path, chunk_rows=7)
    assert {length: item.origin for length, item in first.items()} == {8: "encoded", 20: "encoded", 40: "encoded"}
    # embed() at one length reads what embed_lengths wrote, and the reverse
    encoder.calls.clear()
    for length in (8, 20, 40):
        cached = embed(texts, encoder, max_tokens=length, cache_dir=tmp_path, chunk_rows=7)
        assert cached.origin == "cache"
        np.testing.assert_array_equal(cached.vectors, first[length].vectors)
    again = embed_lengths(texts, encoder, (8, 20), cache_dir=tmp_path, chunk_rows=7)
    assert encoder.calls == [] and {item.origin for item in again.values()} == {"cache"}
    # a new length with the full context cached encodes only the captions it cuts
    new = embed_lengths(texts, encoder, (12,), cache_dir=tmp_path, chunk_rows=7)
    counts = encoder.token_counts(texts)
    assert [limit for limit, _ in encoder.calls] == [12] * len(encoder.calls)
    assert sum(len(batch) for _, batch in encoder.calls) == int((counts > 12).sum())
    assert new[40].origin == "cache" and new[12].origin == "encoded"


def test_one_pass_with_the_full_context_cached_runs_only_the_cut_captions(texts, tmp_path):
    encoder = encoder_for(tiny_clip(tiny_config(77)), 77)
    full = embed(texts, encoder, cache_dir=tmp_path)
    by_length = embed_lengths(texts, encoder, (16, 32), cache_dir=tmp_path)
    counts = encoder.token_counts(texts)
    assert by_length[77].origin == "cache" and by_length[16].origin == "encoded"
    np.testing.assert_array_equal(by_length[77].vectors, full.vectors)
    # one forward, of the captions cut at 16 only
    assert encoder.last_stats.path == "prefix"
    assert encoder.last_stats.positions_full == int((counts > 16).sum()) * 77
    for length in (16, 32):
        direct = encoder.encode(texts, max_tokens=length)
        assert np.abs(by_length[length].vectors - direct).max() < 1e-6


def test_embedded_default_encodes_only_the_cut_captions_again(texts):
    from capgeo.encoders import get_encoder

    encoder = get_encoder(None)
    counts = encoder.token_counts(texts)
    asked = []
    real_encode = encoder.encode

    def recording_encode(batch, **options):
        asked.append((options.get("max_tokens"), list(batch)))
        return real_encode(batch, **options)

    encoder.encode = recording_encode
    by_length = embed_lengths(texts, encoder, (16, 64), use_cache=False, progress=False)
    for length in (16, 64):
        cut = [text for text, count in zip(texts, counts) if count > length]
        assert 0 < len(cut) < len(texts)
        assert sorted(text for limit, batch in asked if limit == length for text in batch) == sorted(cut)
        direct = real_encode(texts, max_tokens=length)
        assert np.abs(by_length[length].vectors - direct).max() < 1e-5


def test_under_ray_each_length_goes_through_embed(monkeypatch):
    """Ray's actors encode a whole dataset at one length: under a session every length is an embed() call."""
    import capgeo.scale.session as session

    monkeypatch.setattr(session, "active_ray", lambda: object())
    texts = word_captions()
    encoder = WordEncoder()
    by_length = embed_lengths(texts, encoder, (8, 20), use_cache=False, progress=False)
    assert sorted(limit for limit, batch in encoder.calls for _ in batch) == sorted([8, 20, 40] * len(texts))
    monkeypatch.undo()
    alone = embed_lengths(texts, WordEncoder(), (8, 20), use_cache=False, progress=False)
    for length in (8, 20, 40):
        np.testing.assert_allclose(by_length[length].vectors, alone[length].vectors, atol=1e-7)
