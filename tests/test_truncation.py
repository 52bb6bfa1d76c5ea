"""`capgeo.findings.truncation`: embeddings per length, cut points, per-length statistics, errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from capgeo.captions.model import CaptionSet
from capgeo.encoders.base import EncoderInfo, Embeddings
from capgeo.errors import CapgeoError, EncoderError
from capgeo.findings.truncation import (
    cut_offset,
    cut_offsets,
    parse_lengths,
    resolve_lengths,
    truncation_section,
)
from capgeo.geometry.batches import sample_batches
from capgeo.pipeline import embed_at_lengths, truncation_profile


def caption_set(texts, groups=None) -> CaptionSet:
    groups = groups or [f"g{i}" for i in range(len(texts))]
    return CaptionSet(pl.DataFrame({"caption_id": [f"c{i}" for i in range(len(texts))], "group_id": groups,
                                    "split": [None] * len(texts), "text": texts}), Path("constructed"), "test")


def info(context_length: int, spec: str = "test", kind: str = "open_clip", width: int = 16) -> EncoderInfo:
    return EncoderInfo(spec=spec, kind=kind, name="tiny", width=width, context_length=context_length,
                       logit_scale=None, fingerprint="0" * 64)


# --------------------------------------------------------------------------- constructed captions

#: a 68-word opening shared by 8 captions, which then differ for ~25 words each
OPENING = ("A wide sunlit kitchen with white marble counters, a tall steel refrigerator on the left side, "
           "a round wooden table in the middle with four green chairs around it, a bowl of red apples on the "
           "table, large windows behind the sink looking out onto a garden with rose bushes and a stone path, "
           "copper pans hanging from a rack above the stove and a striped rug on the tiled floor. ")
ENDINGS = [
    "In the foreground a black dog sleeps curled up on a blue cushion while a child in a yellow raincoat "
    "feeds it biscuits from a paper bag.",
    "On the right a man in a grey suit reads a newspaper and drinks coffee from a chipped mug, his briefcase "
    "open beside him on the floor.",
    "Outside the window heavy snow is falling on parked cars and a red bicycle leans against a frozen lamp "
    "post covered with ice.",
    "A laptop on the counter shows a football match and two teenagers cheer loudly, one of them waving a team "
    "scarf over her head.",
    "Smoke rises from a burnt pizza in the open oven and a fire extinguisher lies on the floor next to a "
    "broken plate and spilled flour.",
    "A cat sits inside the sink licking water from the dripping tap, its orange tail hanging over the edge "
    "toward a pile of laundry.",
    "An old woman knits a purple scarf in a rocking chair by the window, a radio playing jazz music on the "
    "shelf next to her.",
    "Tools and wooden planks cover the table because a carpenter is repairing a cabinet door with a hammer "
    "and a box of nails.",
]
UNRELATED = [
    "A surfer rides a huge wave at sunset near a rocky beach.",
    "Two giraffes eat leaves from a tall acacia tree on the savanna.",
    "A red double-decker bus drives past a clock tower in the rain.",
    "A plate of sushi with chopsticks and a small dish of soy sauce.",
]


def test_opening_is_sixty_words_or_more():
    assert len(OPENING.split()) >= 60


# --------------------------------------------------------------------------- lengths


def test_parse_lengths():
    assert parse_lengths("32, 64,128") == [32, 64, 128]
    with pytest.raises(CapgeoError, match="'abc'"):
        parse_lengths("32,abc")
    with pytest.raises(CapgeoError, match="at least one"):
        parse_lengths(" , ")


def test_resolve_lengths_adds_the_context_and_sorts():
    assert resolve_lengths([128, 32, 64, 32], info(256)) == [32, 64, 128, 256]
    assert resolve_lengths([77], info(77)) == [77]
    # defaults: those below the context, then the context
    assert resolve_lengths(None, info(77)) == [32, 64, 77]
    assert resolve_lengths(None, info(256)) == [32, 64, 77, 128, 248, 256]


def test_lengths_above_the_context_are_rejected_with_a_clear_message():
    with pytest.raises(EncoderError) as error:
        resolve_lengths([32, 300], info(77, spec="ViT-B-32/openai"))
    message = str(error.value)
    assert "300" in message and "'ViT-B-32/openai'" in message and "77" in message and "\n" not in message
    with pytest.raises(EncoderError, match="--lengths: 1 is too short"):
        resolve_lengths([1], info(77))


def test_embed_at_lengths_refuses_a_length_above_the_context():
    """It encoded at 300 tokens for a 256-token encoder, and the report then took 300 for the reference."""
    from types import SimpleNamespace

    encoder = SimpleNamespace(info=info(256, spec="minilm", kind="sentence-transformers"))
    with pytest.raises(EncoderError, match="--lengths: 300 is above the context length"):
        embed_at_lengths(caption_set(UNRELATED), encoder, [300])


def test_precomputed_vectors_are_rejected(tmp_path):
    from capgeo.encoders.precomputed import write_vector_file

    captions = caption_set(UNRELATED)
    path = tmp_path / "vectors.npy"
    write_vector_file(path, np.eye(4, 8, dtype=np.float32), captions.ids)
    with pytest.raises(EncoderError, match="precomputed vectors have no tokenizer"):
        truncation_profile(captions, f"vectors:{path}", lengths=[32])


# --------------------------------------------------------------------------- cut points


def whitespace_counts(texts):
    """A stand-in tokenizer: one token per word plus start and end tokens."""
    return np.array([len(text.split()) + 2 for text in texts])


def test_cut_offset_with_a_word_tokenizer():
    text = "one two three four five six seven eight nine ten"
    # 6 tokens = start + 4 words + end
    assert cut_offset(text, 6, whitespace_counts) == len("one two three four")
    assert cut_offset(text, 12, whitespace_counts) == len(text)        # fits whole
    assert cut_offset(text, 2, whitespace_counts) == 0                 # not even one word
    assert cut_offsets([text, "a b", text], 5, whitespace_counts) == [len("one two three"), 3, len("one two three")]
    assert cut_offsets([], 5, whitespace_counts) == []


def check_cut_point(text: str, offset: int, length: int, token_counts) -> None:
    """text[:offset] fits in ``length`` tokens and the next whole word would not."""
    assert token_counts([text[:offset]])[0] <= length
    following = re.compile(r"\S+").search(text, offset)
    assert following is not None, "a cut caption must have unseen words"
    assert token_counts([text[:following.end()]])[0] > length


# --------------------------------------------------------------------------- open_clip: embedding at L


def test_open_clip_embedding_at_length_equals_its_first_tokens_encoded_directly():
    import torch
    import open_clip
    from _clip_fixtures import tiny_clip, tiny_config

    from capgeo.encoders.openclip import OpenClipTextEncoder

    model = tiny_clip(tiny_config(77))
    tokenizer = open_clip.SimpleTokenizer(context_length=77)
    encoder = OpenClipTextEncoder(model, tokenizer, info(77, width=32), "cpu")  # tiny_config: embed_dim 32
    texts = [OPENING + ending for ending in ENDINGS[:4]] + UNRELATED[:2] + [OPENING * 2]
    captions = caption_set(texts)
    lengths = [8, 20, 40, 77]
    embeddings = embed_at_lengths(captions, encoder, lengths, use_cache=False)
    assert sorted(embeddings) == lengths

    full_ids = [[tokenizer.sot_token_id, *tokenizer.encode(text), tokenizer.eot_token_id] for text in texts]
    assert list(embeddings[77].token_counts) == [len(ids) for ids in full_ids]
    for length in lengths:
        rows = torch.zeros(len(texts), 77, dtype=torch.long)
        for row, ids in enumerate(full_ids):
            ids = list(ids)
            if len(ids) > length:
                ids = ids[:length - 1] + [tokenizer.eot_token_id]   # first L-1 tokens + end token
            rows[row, :len(ids)] = torch.tensor(ids)
        with torch.no_grad():
            expected = torch.nn.functional.normalize(model.encode_text(rows), dim=-1).numpy()
        np.testing.assert_allclose(embeddings[length].vectors, expected, atol=1e-5, rtol=0)
        assert embeddings[length].max_tokens == length
    # every length came from one forward of the whole captions: each caption ran through the tower once
    assert encoder.last_stats.path == "prefix" and encoder.last_stats.positions_full == len(texts) * 77
    # the lengths really differ for the long captions, and the short ones do not move
    long_rows = np.array([len(ids) > 8 for ids in full_ids])
    moved = np.einsum("ij,ij->i", embeddings[8].vectors, embeddings[77].vectors)
    assert np.all(moved[long_rows] < 0.999)

    # the cut point found with the CLIP tokenizer's own counts
    for text in texts[:4]:
        offset = cut_offset(text, 20, encoder.token_counts)
        check_cut_point(text, offset, 20, encoder.token_counts)


# --------------------------------------------------------------------------- the default encoder: truncation-only pairs


@pytest.fixture(scope="module")
def minilm_section():
    from capgeo.encoders import get_encoder

    encoder = get_encoder(None)
    captions = caption_set([OPENING + ending for ending in ENDINGS] + UNRELATED)
    embeddings = embed_at_lengths(captions, encoder, [32, 64, 128, 256], use_cache=False)
    section = truncation_section(captions, embeddings, encoder, batch_size=6, n_batches=20, max_listed=40).to_dict()
    return captions, encoder, embeddings, section


def test_shared_opening_is_a_truncation_only_near_duplicate(minilm_section):
    captions, encoder, embeddings, section = minilm_section
    counts = encoder.token_counts(captions.texts)
    assert counts[:8].min() > 64 and counts.max() <= 128  # cut at 32 and 64, whole at 128
    assert section["lengths"] == [32, 64, 128, 256] and section["reference_length"] == 256
    assert section["threshold"] == 0.95
    by_length = {entry["max_tokens"]: entry for entry in section["per_length"]}
    for length in (32, 64):
        assert by_length[length]["near_duplicates"]["n_truncation_only"] == 28       # all pairs of the 8
        assert by_length[length]["n_cut"] == 8
    for length in (128, 256):
        assert by_length[length]["near_duplicates"]["n_pairs"] == 0
        assert by_length[length]["near_duplicates"]["n_truncation_only"] == 0
    assert by_length[256]["reference"] and not by_length[32]["reference"]

    pairs = [pair for pair in section["truncation_only_pairs"] if pair["max_tokens"] == 32]
    assert len(pairs) == 28
    flagged = {(pair["a"]["id"], pair["b"]["id"]) for pair in pairs}
    assert ("c0", "c1") in flagged
    unrelated_ids = {f"c{i}" for i in range(8, 12)}
    assert not any(pair["a"]["id"] in unrelated_ids or pair["b"]["id"] in unrelated_ids
                   for pair in section["truncation_only_pairs"])
    full = embeddings[256].vectors
    for pair in pairs:
        assert pair["cosine_at_length"] >= 0.95 > pair["cosine_full"]
        a, b = pair["a"]["index"], pair["b"]["index"]
        assert pair["cosine_full"] == pytest.approx(float(full[a] @ full[b]), abs=1e-6)
        for side in ("a", "b"):
            caption = pair[side]
            # the encoder saw only part of the shared opening
            assert caption["cut"] and 0 < caption["cut_offset"] < len(OPENING)
            check_cut_point(caption["text"], caption["cut_offset"], 32, encoder.token_counts)


def test_cut_point_splits_the_text_where_the_prefix_ends(minilm_section):
    captions, encoder, _, section = minilm_section
    for pair in section["truncation_only_pairs"]:
        for side in ("a", "b"):
            caption = pair[side]
            check_cut_point(caption["text"], caption["cut_offset"], pair["max_tokens"], encoder.token_counts)
    # a longer length sees more of the text
    text = captions.texts[0]
    assert cut_offset(text, 32, encoder.token_counts) < cut_offset(text, 64, encoder.token_counts) < len(text)
    assert cut_offset(text, 256, encoder.token_counts) == len(text)


def test_uncut_captions_do_not_move(minilm_section):
    _, _, _, section = minilm_section
    by_length = {entry["max_tokens"]: entry for entry in section["per_length"]}
    assert by_length[128]["movement"]["all"]["min"] == pytest.approx(1.0, abs=1e-5)
    assert by_length[128]["movement"]["cut"]["count"] == 0
    assert by_length[32]["movement"]["cut"]["count"] == 8
    assert by_length[32]["movement"]["cut"]["mean"] < by_length[64]["movement"]["cut"]["mean"] < 1.0


# --------------------------------------------------------------------------- per-length statistics vs brute force


def synthetic(seed: int = 0):
    """40 captions of 30 groups at lengths 16, 32 and 64 (the full context).

    Captions longer than a length get embeddings that drift toward a shared
    'opening' direction as the length shrinks (so near-duplicates appear at short
    lengths); captions that fit are identical to their full-context embedding."""
    rng = np.random.default_rng(seed)
    n, width = 40, 16
    groups = [f"g{i}" for i in range(30)] + [f"g{i}" for i in range(10)]
    counts = rng.integers(8, 100, size=n)
    counts[[5, 39]] = 10   # short: never cut, so the pair below stays a near-duplicate at every length
    full = rng.normal(size=(n, width))
    full[39] = full[5] + 0.05 * rng.normal(size=width)   # a near-duplicate at every length (groups g9, g5)
    full /= np.linalg.norm(full, axis=1, keepdims=True)
    openings = rng.normal(size=(3, width))
    opening_of = rng.integers(0, 3, size=n)
    by_length = {}
    for length, weight in ((16, 2.0), (32, 1.0), (64, 0.0)):
        vectors = full + weight * openings[opening_of] + 0.3 * rng.normal(size=(n, width)) * (weight > 0)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        fits = counts <= length
        vectors[fits] = full[fits]
        by_length[length] = Embeddings(vectors=vectors.astype(np.float32), token_counts=counts, max_tokens=length,
                                       info=info(64))
    return caption_set([f"caption {i}" for i in range(n)], groups), by_length


def brute_force(vectors, codes, counts, length, full, threshold, batch_size, n_batches, seed, edges):
    vectors = vectors.astype(np.float64)
    full = full.astype(np.float64)
    n = len(vectors)
    similarity = vectors @ vectors.T
    different = codes[:, None] != codes[None, :]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    negatives = similarity[upper & different]
    hardest = np.where(different, similarity, -np.inf).max(axis=1)
    above = upper & different & (similarity >= threshold)
    full_similarity = full @ full.T
    more_seen = np.minimum(counts, 64) > length      # the reference (64 tokens) saw more of the caption
    only = above & (full_similarity < threshold) & (more_seen[:, None] | more_seen[None, :])
    moved = np.einsum("ij,ij->i", vectors, full)
    batches = sample_batches(codes, batch_size, n_batches, seed)
    in_batch = []
    for batch in batches:
        block = similarity[np.ix_(batch, batch)]
        in_batch.append(block[~np.eye(batch_size, dtype=bool)])
    in_batch = np.concatenate(in_batch)
    shares = np.histogram(in_batch, bins=[-np.inf, *edges, np.inf])[0] / in_batch.size
    return {
        "share_cut": np.mean(counts > length), "neg_mean": negatives.mean(), "neg_std": negatives.std(),
        "neg_max": negatives.max(), "hardest": hardest, "n_pairs": int(above.sum()), "n_only": int(only.sum()),
        "moved": moved, "moved_cut": moved[more_seen], "shares": shares,
    }


def test_per_length_statistics_match_brute_force():
    captions, by_length = synthetic()
    threshold, batch_size, n_batches, seed, edges = 0.9, 8, 25, 3, (0.5, 0.8, 0.9)
    section = truncation_section(captions, by_length, None, batch_size=batch_size, n_batches=n_batches, seed=seed,
                                 threshold=threshold, edges=edges, top_k=5, block_size=16, max_listed=100).to_dict()
    codes = np.asarray(captions.group_codes)
    counts = by_length[64].token_counts
    full = by_length[64].vectors
    assert section["lengths"] == [16, 32, 64]
    total_only = 0
    for entry in section["per_length"]:
        length = entry["max_tokens"]
        expected = brute_force(by_length[length].vectors, codes, counts, length, full, threshold, batch_size,
                               n_batches, seed, edges)
        assert entry["share_cut"] == pytest.approx(expected["share_cut"])
        assert entry["pairwise"]["mean"] == pytest.approx(expected["neg_mean"], abs=1e-6)
        assert entry["pairwise"]["std"] == pytest.approx(expected["neg_std"], abs=1e-5)
        assert entry["pairwise"]["max"] == pytest.approx(expected["neg_max"], abs=1e-6)
        assert entry["pairwise"]["count"] == (codes[:, None] != codes[None, :]).sum() // 2
        hardest = entry["hardest_companion"]
        assert hardest["mean"] == pytest.approx(expected["hardest"].mean(), abs=1e-6)
        for key, level in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9)):
            assert hardest["quantiles"][key] == pytest.approx(np.quantile(expected["hardest"], level), abs=1e-6)
        np.testing.assert_allclose(entry["buckets"]["shares"], expected["shares"], atol=1e-12)
        assert entry["near_duplicates"]["n_pairs"] == expected["n_pairs"]
        assert entry["near_duplicates"]["n_truncation_only"] == expected["n_only"]
        total_only += min(100, expected["n_only"])
        movement = entry["movement"]
        assert movement["all"]["mean"] == pytest.approx(expected["moved"].mean(), abs=1e-6)
        assert movement["all"]["quantiles"]["p10"] == pytest.approx(np.quantile(expected["moved"], 0.1), abs=1e-6)
        assert movement["cut"]["count"] == expected["moved_cut"].size
        if expected["moved_cut"].size:
            assert movement["cut"]["mean"] == pytest.approx(expected["moved_cut"].mean(), abs=1e-6)
            assert movement["cut"]["min"] == pytest.approx(expected["moved_cut"].min(), abs=1e-6)
    # the construction makes truncation-only pairs at short lengths, none at the reference
    assert section["per_length"][0]["near_duplicates"]["n_truncation_only"] > 0
    assert section["per_length"][-1]["near_duplicates"]["n_truncation_only"] == 0
    reference = section["per_length"][-1]
    assert reference["n_cut"] > 0 and reference["movement"]["cut"]["count"] == 0   # cut by the context itself
    for entry in section["per_length"]:
        # the pair (5, 39) is a near-duplicate at every length: counted, never truncation-only
        assert entry["near_duplicates"]["n_pairs"] > entry["near_duplicates"]["n_truncation_only"]
    assert len(section["truncation_only_pairs"]) == total_only
    for pair in section["truncation_only_pairs"]:
        assert pair["a"]["cut_offset"] is None  # no tokenizer given
        assert pair["a"]["group"] != pair["b"]["group"]


def test_listed_pairs_are_capped_but_all_counted():
    captions, by_length = synthetic()
    section = truncation_section(captions, by_length, None, batch_size=8, n_batches=5, threshold=0.9, max_listed=2).to_dict()
    for entry in section["per_length"]:
        listed = [pair for pair in section["truncation_only_pairs"] if pair["max_tokens"] == entry["max_tokens"]]
        assert len(listed) == min(2, entry["near_duplicates"]["n_truncation_only"])
        cosines = [pair["cosine_at_length"] for pair in listed]
        assert cosines == sorted(cosines, reverse=True)


def test_same_batches_at_every_length():
    """Paired comparison: with identical vectors at every length the in-batch statistics are identical."""
    captions, by_length = synthetic()
    same = {length: Embeddings(by_length[64].vectors, by_length[64].token_counts, length, by_length[64].info)
            for length in (16, 64)}
    section = truncation_section(captions, same, None, batch_size=8, n_batches=10, seed=5).to_dict()
    first, last = section["per_length"]
    assert first["buckets"] == last["buckets"] and first["hardest_in_batch"] == last["hardest_in_batch"]


def test_bad_inputs_are_capgeo_errors():
    captions, by_length = synthetic()
    with pytest.raises(CapgeoError, match="threshold"):
        truncation_section(captions, by_length, None, threshold=1.5).to_dict()
    with pytest.raises(CapgeoError, match="no lengths"):
        truncation_section(captions, {}, None).to_dict()
    unknown = {length: Embeddings(e.vectors, np.full(len(captions), -1), length, e.info)
               for length, e in by_length.items()}
    with pytest.raises(EncoderError, match="token counts"):
        truncation_section(captions, unknown, None).to_dict()
    one_group = caption_set([f"caption {i}" for i in range(40)], ["g"] * 40)
    with pytest.raises(CapgeoError, match="one group"):
        truncation_section(one_group, by_length, None).to_dict()


def test_near_duplicate_pass_keeps_the_best_pairs_of_many():
    """Every pair of 200 captions is a near-duplicate when cut; the kept list is pruned while
    walking the tiles and must still be the exact best pairs (cosine at L descending)."""
    from capgeo.findings.truncation import near_duplicates_at_length

    rng = np.random.default_rng(1)
    n, width = 200, 8
    short = np.ones((n, width)) + 0.01 * rng.normal(size=(n, width))
    short /= np.linalg.norm(short, axis=1, keepdims=True)
    full = rng.normal(size=(n, width))
    full /= np.linalg.norm(full, axis=1, keepdims=True)
    codes = np.arange(n) % 150                      # some groups hold two captions: never paired
    cut = np.ones(n, dtype=bool)
    cut[:20] = False                                # pairs of two uncut captions are never truncation-only
    near = near_duplicates_at_length(short.astype(np.float32), full, codes, cut, 0.9, keep=5, block_size=16)

    similarity = short.astype(np.float32).astype(np.float64) @ short.astype(np.float32).astype(np.float64).T
    a, b = np.triu_indices(n, k=1)
    pairs = (codes[a] != codes[b]) & (similarity[a, b] >= 0.9)
    full_cosine = np.einsum("ij,ij->i", full[a], full[b])
    only = pairs & (full_cosine < 0.9) & (cut[a] | cut[b])
    assert near.n_pairs == int(pairs.sum()) > 4 * 5 + 4096
    assert near.n_truncation_only == int(only.sum())
    assert near.n_captions == n
    best = np.lexsort((b[only], a[only], -similarity[a, b][only]))[:5]
    assert [(x, y) for x, y, _, _ in near.truncation_only] == list(zip(a[only][best].tolist(), b[only][best].tolist()))
    np.testing.assert_allclose([row[2] for row in near.truncation_only], similarity[a, b][only][best], atol=1e-6)
