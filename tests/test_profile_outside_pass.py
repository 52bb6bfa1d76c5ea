"""The work of `capgeo profile` outside the all-pairs pass, made fast (issue 14 follow-up):
each fast path against the original row-by-row formula."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np

from capgeo.captions.clean import RawCaptions, _clean_text, to_caption_set
from capgeo.geometry import build_profile
from tests.test_profile import caption_set, fake_embeddings

TEXTS = ["  a red bus  ", "\u200b", "\u200bcat", "   ", None, "\u3000dog\u3000", "two words", "\t\u00a0x", "\u2028"]


def raw(texts, *, ids=None, groups=None) -> RawCaptions:
    return RawCaptions(source=Path("in-memory"), format="test", texts=list(texts), where=lambda row: f"row {row + 1}",
                       ids=ids, groups=groups)


def test_cleaning_matches_the_row_by_row_check():
    captions = to_caption_set(raw(TEXTS))
    cleaned = [(row, _clean_text(text, raw(TEXTS), row)) for row, text in enumerate(TEXTS)]
    kept = [(str(row + 1), text) for row, (text, reason) in cleaned if reason is None]
    assert list(zip(captions.ids, captions.texts)) == kept
    skipped = Counter(reason for _, (_, reason) in cleaned if reason is not None)
    assert {item.reason: item.count for item in captions.skipped} == dict(skipped)


def test_caption_ids_number_captions_within_each_group():
    rng = np.random.default_rng(3)
    groups = [f"img{value}" for value in rng.integers(0, 40, size=400)]
    seen: Counter = Counter()
    expected = []
    for group in groups:
        expected.append(f"{group}#{seen[group]}")
        seen[group] += 1
    assert to_caption_set(raw([f"text {row}" for row in range(400)], groups=groups)).ids == expected
    # a group left empty falls back to the row number, the others keep counting
    mixed = to_caption_set(raw(["a", "b", "c"], groups=["g", "", "g"]))
    assert mixed.ids == ["g#0", "2", "g#1"]


def test_texts_digest_hashes_each_text_then_a_nul():
    captions = to_caption_set(raw(["één", "b", "c\u00e9"]))
    digest = hashlib.sha256()
    for text in ["één", "b", "c\u00e9"]:
        digest.update(text.encode("utf-8"))
        digest.update(b"\x00")
    assert captions.texts_digest() == digest.hexdigest()


def test_profile_without_companion_lists_differs_only_there():
    rng = np.random.default_rng(0)
    captions = caption_set([f"caption {i}" for i in range(60)], [i // 3 for i in range(60)])
    embeddings = fake_embeddings(rng.standard_normal((60, 8)))
    full = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=3, device="cpu", progress=False).to_dict()
    lean = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=3, device="cpu", progress=False,
                         companion_lists=False).to_dict()
    assert full["companions"]["top_ids"] and lean["companions"] is None
    for key in full:
        if key not in ("companions", "provenance"):
            assert lean[key] == full[key], key
