"""Pair listings keep a bounded number of pairs whatever the data: `--skip-exact` leaves copies out
inside the pass (no deeper mining), counts the copies it skipped exactly, and --top is capped."""

import itertools

import numpy as np
import polars as pl
import pytest
from pathlib import Path

from capgeo.captions.model import CaptionSet
from capgeo.errors import CapgeoError
from capgeo.findings.dupes_options import PairListOptions
from capgeo.findings.duplicates import dupes_section, exact_copies_at_or_above, near_duplicate_pairs, text_codes


def captions_of(texts, groups):
    table = pl.DataFrame({"caption_id": [f"c{i}" for i in range(len(texts))],
                          "group_id": [f"g{g}" for g in groups], "split": [None] * len(texts), "text": list(texts)})
    return CaptionSet(table, Path("synthetic"), "test")


def test_copies_counted_per_text_match_a_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(10):
        n = 40
        vectors = rng.normal(size=(6, 8)).astype(np.float32)[rng.integers(0, 6, n)]
        vectors[:5] += 0.05  # some copies of one text with other vectors
        codes, groups = rng.integers(0, 4, n), rng.integers(0, 10, n)
        cutoff = float(rng.uniform(-0.5, 1.0))
        unit = vectors.astype(np.float64) / np.linalg.norm(vectors, axis=1, keepdims=True)
        expected = sum(1 for i, j in itertools.combinations(range(n), 2)
                       if codes[i] == codes[j] and groups[i] != groups[j] and unit[i] @ unit[j] >= cutoff)
        assert exact_copies_at_or_above(vectors, groups, codes, cutoff) == expected


def test_skip_exact_lists_the_best_pairs_that_are_not_copies():
    rng = np.random.default_rng(1)
    n = 120
    vectors = rng.normal(size=(n, 16)).astype(np.float32)
    texts = [f"caption {i}" for i in range(n)]
    for copy in range(60, 90):  # 30 exact copies (case and spaces differ) of caption 0, one vector
        texts[copy], vectors[copy] = "  CAPTION 0 ", vectors[0]
    groups = np.arange(n)
    captions = captions_of(texts, groups)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    section = dupes_section(captions, unit, pairs=PairListOptions(limit=5, skip_exact=True), examples=None).to_dict()
    codes = text_codes(texts)
    cosine = unit.astype(np.float64) @ unit.T.astype(np.float64)
    rows, columns = np.triu_indices(n, 1)
    keep = codes[rows] != codes[columns]
    order = np.argsort(-cosine[rows, columns][keep], kind="stable")[:5]
    expected = set(zip(rows[keep][order].tolist(), columns[keep][order].tolist()))
    assert {(pair["index_a"], pair["index_b"]) for pair in section["pairs"]} == expected
    assert not any(pair["exact_duplicate"] for pair in section["pairs"])
    assert section["n_exact_skipped"] == 31 * 30 // 2  # caption 0 and its 30 copies, all pairs


def test_a_top_limit_above_the_pair_cap_is_an_error():
    vectors = np.eye(4, dtype=np.float32)
    with pytest.raises(CapgeoError, match="at most 10 pairs"):
        near_duplicate_pairs(captions_of(["a", "b", "c", "d"], [0, 1, 2, 3]), vectors, limit=11, max_pairs=10)
