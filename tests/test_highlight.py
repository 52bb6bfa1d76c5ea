"""Highlighting of shared and differing content words (capgeo.findings.highlight)."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

from capgeo.findings.highlight import (
    STOP_WORDS,
    highlight_pair,
    is_exact_duplicate,
    normalize_word,
    tokenize,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"real caption data not found at {DATA}")


def _words(spans, kind=None):
    return {span.word for span in spans if kind is None or span.kind == kind}


def _covered(text, spans):
    return [text[span.start:span.end] for span in spans]


# --------------------------------------------------------------------------- the normaliser


@pytest.mark.parametrize("singular, plural", [
    ("dog", "dogs"), ("bus", "buses"), ("berry", "berries"), ("box", "boxes"), ("church", "churches"),
    ("glass", "glasses"), ("horse", "horses"), ("house", "houses"), ("dish", "dishes"), ("tree", "trees"),
    ("cookie", "cookies"), ("tie", "ties"), ("banana", "bananas"), ("man", "men"), ("leaf", "leaves"),
    ("child", "children"), ("shoe", "shoes"), ("lens", "lenses"), ("canvas", "canvases"), ("bias", "biases"),
    ("quiz", "quizzes"), ("fez", "fezzes"),
])
def test_singular_and_plural_share_a_key(singular, plural):
    assert normalize_word(singular) == normalize_word(plural)
    assert normalize_word(singular.upper()) == normalize_word(plural)


@pytest.mark.parametrize("word", ["bus", "glass", "tennis", "gas", "grass", "cactus"])
def test_words_ending_in_s_that_are_not_plurals_keep_it(word):
    assert normalize_word(word).endswith("s")


@pytest.mark.parametrize("a, b", [("dog", "cat"), ("bus", "buss"), ("cafe", "café"), ("run", "running"),
                                  ("two", "2"), ("leaf", "leafy")])
def test_different_words_keep_different_keys(a, b):
    assert normalize_word(a) != normalize_word(b)


def test_possessives_and_curly_apostrophes():
    assert normalize_word("dog's") == normalize_word("dog\u2019s") == normalize_word("dogs") == "dog"
    assert [t.text for t in tokenize("the dogs' bowl")] == ["the", "dogs", "bowl"]
    assert [t.text for t in tokenize("don't stop")] == ["don't", "stop"]


def test_unicode_forms_case_and_compatibility_characters():
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert normalize_word(composed) == normalize_word(decomposed) == normalize_word("CAFÉ")
    assert normalize_word("\ufb01sh") == normalize_word("fish")  # the "fi" ligature, NFKC
    # accents are kept on purpose: café and cafe are different words
    assert normalize_word("café") != normalize_word("cafe")


# --------------------------------------------------------------------------- tokens and spans


def test_spans_index_the_original_text_with_accents_and_non_latin_scripts():
    text = "Un cafe\u0301 près du Straße — हिन्दी भाषा, 日本語の文章 and naïve Ωmega"
    tokens = tokenize(text)
    surfaces = [text[t.start:t.end] for t in tokens]
    assert surfaces == [t.text for t in tokens]
    # the decomposed accent and the Devanagari vowel signs stay inside their words
    assert "cafe\u0301" in surfaces and "हिन्दी" in surfaces and "भाषा" in surfaces
    assert "日本語の文章" in surfaces and "naïve" in surfaces and "Straße" in surfaces
    assert "—" not in "".join(surfaces) and "," not in "".join(surfaces)


def test_punctuation_and_hyphens_split_words_underscores_do_not():
    assert [t.text for t in tokenize("black-and-white photo_of (a) cat! ___ /x/")] == [
        "black", "and", "white", "photo_of", "a", "cat", "x"]


def test_case_and_punctuation_do_not_hide_shared_words():
    result = highlight_pair("A RED car, parked.", "the red Car is parked")
    assert set(result.shared) == {"red", "car", "parked"}
    assert result.only_a == () and result.only_b == ()
    assert result.jaccard == 1.0
    assert not result.exact_duplicate


def test_plurals_are_shared_and_listed_as_written():
    result = highlight_pair("Two dogs near buses and berries", "A dog near a bus with a berry")
    assert _words(result.spans_a, "shared") == {normalize_word(w) for w in ("dog", "bus", "berry")}
    assert result.shared == ("dogs", "buses", "berries")  # as first written in caption a
    assert result.only_a == ("two",)
    assert result.only_b == ()
    assert result.jaccard == pytest.approx(3 / 4)


def test_repeated_words_are_all_marked_and_counted_once():
    text_a = "A dog chases a dog past another dog."
    result = highlight_pair(text_a, "One dog sleeps.")
    dog_spans = [s for s in result.spans_a if s.word == "dog"]
    assert len(dog_spans) == 3 and all(s.kind == "shared" for s in dog_spans)
    assert [text_a[s.start:s.end] for s in dog_spans] == ["dog", "dog", "dog"]
    assert result.shared == ("dog",)
    # content words a: dog, chase(s), past; b: one, dog, sleep(s)  -> 1 shared of 5
    assert result.jaccard == pytest.approx(1 / 5)


def test_counting_words_are_content():
    result = highlight_pair("one giraffe", "two giraffes")
    assert result.shared == ("giraffe",) and result.only_a == ("one",) and result.only_b == ("two",)
    assert [span.kind for span in result.spans_a] == ["only_a", "shared"]


def test_stop_words_are_never_highlighted():
    result = highlight_pair("There is a cat on the mat with its toy", "It is on the mat and it is a cat")
    for text, spans in ((("There is a cat on the mat with its toy"), result.spans_a),
                        ("It is on the mat and it is a cat", result.spans_b)):
        for surface in _covered(text, spans):
            assert surface.casefold() not in STOP_WORDS
    assert set(result.shared) == {"cat", "mat"} and result.only_a == ("toy",)


def test_no_content_words_gives_zero_jaccard():
    result = highlight_pair("It is there.", "...")
    assert result.spans_a == () and result.spans_b == ()
    assert result.jaccard == 0.0


def test_exact_duplicate_ignores_case_and_whitespace_but_not_words():
    assert is_exact_duplicate("A  cat on\ta mat.", "a cat ON a mat.")
    assert is_exact_duplicate("caf\u00e9", "cafe\u0301")  # NFKC
    assert not is_exact_duplicate("A cat on a mat.", "A cat on a mat")  # punctuation counts
    assert highlight_pair("A cat.", "a  CAT.").exact_duplicate


# --------------------------------------------------------------------------- real captions

# an independent word finder for plain (mostly ASCII) captions
_SIMPLE_WORD = re.compile(r"[A-Za-z0-9\u00C0-\u024F]+(?:['\u2019][A-Za-z0-9\u00C0-\u024F]+)*")


def _is_stop(word):
    return word.casefold().replace("\u2019", "'").removesuffix("'s") in STOP_WORDS


def _content_keys(text):
    return {normalize_word(w) for w in _SIMPLE_WORD.findall(unicodedata.normalize("NFKC", text)) if not _is_stop(w)}


def _real_caption_pairs():
    docci = json.loads((DATA / "docci-test" / "docci_test.json").read_text(encoding="utf-8"))
    docci_texts = [row["caption"] for row in docci[:120]]
    coco = json.loads((DATA / "coco-karpathy-test" / "mscoco_test.json").read_text(encoding="utf-8"))
    coco_texts = [caption for row in coco[:60] for caption in row["captions"]]
    pairs = list(zip(docci_texts[::2], docci_texts[1::2]))
    pairs += list(zip(coco_texts[:-1], coco_texts[1:]))  # neighbours: often the same image, many shared words
    return pairs


@needs_data
def test_spans_on_real_docci_and_coco_captions():
    pairs = _real_caption_pairs()
    assert len(pairs) > 300
    n_shared = 0
    for text_a, text_b in pairs:
        result = highlight_pair(text_a, text_b)
        for text, spans, own in ((text_a, result.spans_a, "only_a"), (text_b, result.spans_b, "only_b")):
            starts = [s.start for s in spans]
            assert starts == sorted(starts)
            for previous, span in zip(spans, spans[1:]):
                assert previous.end <= span.start
            for span in spans:
                surface = text[span.start:span.end]
                assert span.kind in ("shared", own)
                assert normalize_word(surface) == span.word
                assert not _is_stop(surface)
                # a whole word of the original text, not a piece of one
                assert _SIMPLE_WORD.fullmatch(surface) or not surface.isascii()
                before = text[span.start - 1] if span.start else " "
                after = text[span.end] if span.end < len(text) else " "
                assert not before.isalnum() and not after.isalnum()
            # every content word found independently is covered by a span
            independent = [w for w in _SIMPLE_WORD.findall(text) if not _is_stop(w)]
            if text.isascii():
                assert [text[s.start:s.end] for s in spans] == independent
        shared_a, shared_b = _words(result.spans_a, "shared"), _words(result.spans_b, "shared")
        assert shared_a == shared_b
        # shared words really occur in both captions; only-words in one only
        keys_a, keys_b = _content_keys(text_a), _content_keys(text_b)
        assert shared_a <= keys_a & keys_b
        assert not (_words(result.spans_a, "only_a") & keys_b)
        assert not (_words(result.spans_b, "only_b") & keys_a)
        words_a, words_b = _words(result.spans_a), _words(result.spans_b)
        union = words_a | words_b
        assert result.jaccard == pytest.approx(len(words_a & words_b) / len(union) if union else 0.0)
        n_shared += len(shared_a)
    assert n_shared > 100  # the check above saw real shared words
