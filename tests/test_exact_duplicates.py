"""Exact duplicates on hand-made texts, checked against a plain-Python count."""

from __future__ import annotations

import itertools
import unicodedata

import pytest

import polars as pl

from capgeo.captions.exact_duplicates import (EXAMPLE_TEXT_CHARS, find_exact_duplicates, normalize_text,
                                              normalized_texts)
from capgeo.findings.highlight import is_exact_duplicate
from capgeo.findings.leak import exact_twins
from capgeo.findings.per_caption import exact_duplicate_of

# characters where the shortcuts differ from the rule: casefold vs lower case (ß, ẞ, final sigma),
# NFKC (ligature, full-width, decomposed accent, no-break space), whitespace that Python splits on
# and a regex's \s does not (\x1c) or only Unicode-aware ones do (\u2003, \u3000)
TRICKY = ["a", "B", "ss", "SS", "ß", "ẞ", "Σ", "σ", "ς", "İ", "i\u0307", "ﬁ", "fi", "Ａ", "é", "e\u0301",
          " ", "  ", "\t", "\n", "\x0b", "\x1c", "\u00a0", "\u2003", "\u3000", ".", "🐕"]


def reference(texts, groups):
    """Pairs of identical normalised texts, by brute force over all pairs."""
    keys = [" ".join(unicodedata.normalize("NFKC", text).casefold().split()) for text in texts]
    cross = within = 0
    for i, j in itertools.combinations(range(len(texts)), 2):
        if keys[i] == keys[j]:
            if groups[i] == groups[j]:
                within += 1
            else:
                cross += 1
    return cross, within


def test_case_and_whitespace_variants_same_and_different_groups():
    texts = [
        "A dog on a sofa.",        # 0 g1
        "a  dog on a SOFA.",       # 1 g1: same group -> within
        "A dog\ton a sofa. ",      # 2 g2: other group -> cross with 0 and 1
        "Two cats.",               # 3 g3
        "two   cats.",             # 4 g4: cross
        "A dog on a sofa",         # 5 g5: no final period: different text
        "unique caption",          # 6 g6
    ]
    groups = ["g1", "g1", "g2", "g3", "g4", "g5", "g6"]
    ids = [f"c{i}" for i in range(len(texts))]
    result = find_exact_duplicates(texts, ids, groups)
    cross, within = reference(texts, groups)
    assert (cross, within) == (3, 1)
    assert result["n_pairs_cross_group"] == cross
    assert result["n_pairs_within_group"] == within
    assert result["n_pairs"] == cross + within
    assert result["n_sets"] == 2
    assert result["n_captions"] == 5
    assert result["n_redundant_captions"] == 3
    assert result["n_sets_cross_group"] == 2
    largest = result["examples"][0]
    assert largest["text"] == "a dog on a sofa."
    assert largest["caption_ids"] == ["c0", "c1", "c2"]
    assert largest["group_ids"] == ["g1", "g1", "g2"]
    assert result["examples"][1]["caption_ids"] == ["c3", "c4"]


def test_duplicates_only_within_one_group_are_not_cross_group():
    texts = ["Red bus.", "red bus.", "RED BUS.", "blue car"]
    groups = ["a", "a", "a", "b"]
    result = find_exact_duplicates(texts, ["1", "2", "3", "4"], groups)
    assert result["n_pairs_within_group"] == 3
    assert result["n_pairs_cross_group"] == 0
    assert result["n_sets_cross_group"] == 0


def test_unicode_compatibility_forms_are_unified():
    # NFKC folds the ligature and the full-width letters
    texts = ["ﬁne ｄａｙ", "fine day", "other"]
    result = find_exact_duplicates(texts, ["1", "2", "3"], ["a", "b", "c"])
    assert result["n_pairs_cross_group"] == 1


def test_no_duplicates_and_empty_input():
    assert find_exact_duplicates(["a", "b"], ["1", "2"], ["x", "y"])["n_sets"] == 0
    empty = find_exact_duplicates([], [], [])
    assert empty["n_pairs"] == 0 and empty["examples"] == []


@pytest.mark.parametrize("seed", [0, 1])
def test_random_texts_against_brute_force(seed):
    import random

    rng = random.Random(seed)
    words = ["a", "A", "dog", "DOG", "cat", " ", "  "]
    texts = ["".join(rng.choice(words) for _ in range(3)) + " x" for _ in range(120)]
    groups = [f"g{rng.randrange(40)}" for _ in texts]
    result = find_exact_duplicates(texts, [str(i) for i in range(120)], groups)
    cross, within = reference(texts, groups)
    assert result["n_pairs_cross_group"] == cross
    assert result["n_pairs_within_group"] == within


def sets_reference(texts, ids, groups, max_examples=5):
    """The section's sets and counts from a plain grouping of rows by normalised text."""
    keys = [" ".join(unicodedata.normalize("NFKC", text).casefold().split()) for text in texts]
    rows_of = {}
    for row, key in enumerate(keys):
        rows_of.setdefault(key, []).append(row)
    sets = sorted((rows for rows in rows_of.values() if len(rows) > 1), key=lambda rows: (-len(rows), rows[0]))
    images = [len({str(groups[row]) for row in rows}) for rows in sets]
    return {"n_sets": len(sets), "n_captions": sum(map(len, sets)),
            "n_redundant_captions": sum(len(rows) - 1 for rows in sets),
            "n_sets_cross_group": sum(count > 1 for count in images),
            "n_redundant_cross_group": sum(count - 1 for count in images),
            "examples": [{"text": keys[rows[0]], "caption_ids": [str(ids[row]) for row in rows],
                          "group_ids": [str(groups[row]) for row in rows]} for rows in sets[:max_examples]]}


@pytest.mark.parametrize("seed", range(6))
def test_every_field_against_a_plain_grouping(seed):
    """Sets of equal size are listed by first occurrence; numbers as ids and groups are written as text."""
    import random

    rng = random.Random(seed)
    n = rng.randrange(1, 90)
    texts = [rng.choice(["a dog", "A  DOG", "a cat", "ﬁsh", "fish", "a bird", "Straße", "STRASSE"]) + rng.choice(["", " x"])
             for _ in range(n)]
    ids = list(range(n))
    groups = [rng.randrange(max(1, n // 4)) for _ in range(n)]
    max_examples = rng.randrange(0, 7)
    result = find_exact_duplicates(texts, ids, groups, max_examples)
    assert {name: result[name] for name in sets_reference(texts, ids, groups)} == sets_reference(
        texts, ids, groups, max_examples)
    cross, within = reference(texts, groups)
    assert (result["n_pairs_cross_group"], result["n_pairs_within_group"]) == (cross, within)
    assert result["n_pairs"] == cross + within


def test_long_example_texts_are_cut():
    text = "word " * 200
    result = find_exact_duplicates([text, text.upper()], ["1", "2"], ["a", "b"])
    assert len(result["examples"][0]["text"]) == EXAMPLE_TEXT_CHARS + 1


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_keys_are_the_rule_on_tricky_texts(seed):
    import random

    rng = random.Random(seed)
    texts = ["".join(rng.choice(TRICKY) for _ in range(rng.randrange(1, 7))) for _ in range(400)]
    texts += ["plain ASCII\ttext  ", "  ", "Straße", "STRASSE"]
    expected = [" ".join(unicodedata.normalize("NFKC", text).casefold().split()) for text in texts]
    assert [normalize_text(text) for text in texts] == expected
    assert normalized_texts(pl.Series(texts, dtype=pl.String)).to_list() == expected


@pytest.mark.parametrize("seed", range(3))
def test_every_command_uses_one_exact_duplicate_rule(seed):
    """profile's counts, --per-caption's exact_duplicate_of, leak's exact twins and dupes' flag agree
    with a brute-force pairing by the rule ("Straße" == "STRASSE": casefold, not lower case)."""
    import random

    rng = random.Random(seed)
    texts = ["".join(rng.choice(TRICKY[:16]) for _ in range(3)) for _ in range(150)]
    texts += ["Eine Straße im Regen.", "EINE STRASSE IM REGEN.", "eine strasse im regen."]
    n = len(texts)
    keys = [" ".join(unicodedata.normalize("NFKC", text).casefold().split()) for text in texts]
    pairs = {(i, j) for i, j in itertools.combinations(range(n), 2) if keys[i] == keys[j]}
    assert {(n - 3, n - 2), (n - 3, n - 1), (n - 2, n - 1)} <= pairs

    ids = [f"c{i}" for i in range(n)]
    result = find_exact_duplicates(texts, ids, ids)  # every caption its own image
    assert result["n_pairs_cross_group"] == len(pairs)

    first_of = {}
    for i, key in enumerate(keys):
        first_of.setdefault(key, i)
    assert exact_duplicate_of(texts, ids) == [None if first_of[key] == i else ids[first_of[key]]
                                              for i, key in enumerate(keys)]

    eval_rows, train_rows = exact_twins(texts, texts)  # every pair both ways, and each text with itself
    twins = {(int(a), int(b)) for a, b in zip(eval_rows, train_rows) if a < b}
    assert twins == pairs

    assert {(i, j) for i, j in itertools.combinations(range(n), 2) if is_exact_duplicate(texts[i], texts[j])} == pairs
