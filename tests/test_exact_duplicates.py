"""Exact duplicates on hand-made texts, checked against a plain-Python count."""

from __future__ import annotations

import itertools
import unicodedata

import pytest

from capgeo.captions.exact_duplicates import EXAMPLE_TEXT_CHARS, find_exact_duplicates


def reference(texts, groups):
    """Pairs of identical normalised texts, by brute force over all pairs."""
    keys = [" ".join(unicodedata.normalize("NFKC", text).lower().split()) for text in texts]
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


def test_long_example_texts_are_cut():
    text = "word " * 200
    result = find_exact_duplicates([text, text.upper()], ["1", "2"], ["a", "b"])
    assert len(result["examples"][0]["text"]) == EXAMPLE_TEXT_CHARS + 1
