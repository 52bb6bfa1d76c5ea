r"""Which content words two captions share, and where they sit in each text.

What counts as a word
---------------------
A word is a run of word characters (Python's ``\w``: letters, digits and the
underscore) and combining marks (so decomposed accents and the vowel signs of
Indic scripts stay inside their word), optionally joined by inner apostrophes
(``'`` or ``’``): "dog's", "don't". Hyphens, slashes and all other punctuation
split words ("black-and-white" is three words); a run of underscores alone is
not a word. Scripts written without spaces (Chinese, Japanese, Thai) are not
segmented: a run such as "日本語の文章" is one word.

How words are matched (the normaliser, :func:`normalize_word`)
-------------------------------------------------------------
1. Unicode NFKC, then ``str.casefold``, with "’" read as "'" ("Café" == "café", "ﬁsh" == "fish",
   "Straße" == "strasse"; a decomposed "cafe\u0301" == composed "café").
   Accents are kept: "café" and "cafe" are different words, because stripping
   them would merge distinct words in languages that use them.
2. A trailing possessive "'s" / "’s" is dropped ("dog's" -> "dog").
3. A few irregular plurals map to their singular (men, women, children, feet,
   teeth, mice, geese, leaves, knives, wolves, shelves, quizzes, ...).
4. Regular plurals: "-ies" -> "-y" (berries -> berry); else a final "-s" is
   dropped unless the word ends in "-ss", "-us" or "-is" or has 3 letters or
   fewer (dogs -> dog; glass, bus, tennis, gas stay), or is one of a few singulars
   ending in "-s" whose plural adds "-es" (lens, canvas, atlas, bias: lenses -> lens).
5. So that singulars and "-es" plurals meet, a final "-ie" becomes "-y"
   (cookie, cookies -> cooky) and a final "-e" after s, x, z, ch or sh is
   dropped (buses -> buse -> bus; horse, horses -> hors; boxes -> box).

The result is a matching key, not always a dictionary word ("hors"); spans
carry it as ``word``, and lists of shared/differing words show the lowercased
text as it first appears. No stemming beyond plurals: "running" and "run"
differ, as do "leaf" and "leafy".

Content words are all words except stop words (:data:`STOP_WORDS`, English
function words). Numbers are content: "two" and "2" tell captions apart (but
do not match each other).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from capgeo.captions.exact_duplicates import normalize_text
from capgeo.geometry.typed_profile import Span

#: English function words ignored when comparing captions. Counting words
#: ("one", "two") and colours are content: they are what tells captions apart.
STOP_WORDS = frozenset("""
a about above across after again against all almost along also although am among an and another any
are around as at away be because been before behind being below beneath beside besides between beyond
both but by can could did do does doing done down during each either else even ever every for from
further had has have having he her here hers herself him himself his how however i if in inside into
is it its itself just least less let like may me might more most much must my myself near neither no
nor not now of off on once only onto or other others our ours ourselves out outside over own per
quite rather same several shall she should since so some such than that the their theirs them
themselves then there these they this those though through throughout thus to too toward towards
under underneath until up upon us very via was we well were what whatever when where whereas whether
which while who whom whose why will with within without would yet you your yours yourself yourselves
don't doesn't isn't aren't wasn't weren't can't won't
""".split())

# irregular plurals common in captions; singular form on the right
IRREGULAR_PLURALS = {
    "men": "man", "women": "woman", "children": "child", "people": "person", "feet": "foot",
    "teeth": "tooth", "mice": "mouse", "geese": "goose", "leaves": "leaf", "knives": "knife",
    "wolves": "wolf", "shelves": "shelf", "halves": "half", "loaves": "loaf", "calves": "calf",
    "wives": "wife", "lives": "life", "scarves": "scarf", "oxen": "ox", "dice": "die",
    "quizzes": "quiz", "fezzes": "fez",  # the doubled z of these "-es" plurals
}

_APOSTROPHES = "'\u2019"
_SIBILANT_ENDINGS = ("s", "x", "z", "ch", "sh")
#: singulars ending in "-s" that rule 4 would cut (lens -> len) while their "-es" plural meets the
#: word itself (lenses -> lens): kept whole
SINGULARS_ENDING_IN_S = frozenset({"lens", "canvas", "atlas", "bias", "alias", "christmas", "pancreas"})


@functools.cache
def _word_pattern() -> re.Pattern:
    """Word characters (``\\w``) plus combining marks, joined by inner apostrophes.

    Python's ``\\w`` leaves out combining marks (category M), which would cut
    "cafe\u0301" and Devanagari words apart; the mark ranges are collected once.
    """
    ranges = []
    start = None
    for code in range(0x20000):
        is_mark = unicodedata.category(chr(code)).startswith("M")
        if is_mark and start is None:
            start = code
        elif not is_mark and start is not None:
            ranges.append((start, code - 1))
            start = None
    ranges.append((0xE0100, 0xE01EF))  # variation selectors supplement
    marks = "".join(f"\\U{a:08x}-\\U{b:08x}" if a != b else f"\\U{a:08x}" for a, b in ranges)
    # one character class (not an alternation): the regex engine tests it with a bitmap
    character = f"[\\w{marks}]"
    return re.compile(f"{character}+(?:[{_APOSTROPHES}]{character}+)*", re.UNICODE)


def _fold(word: str) -> str:
    """NFKC, casefold, and drop a trailing possessive 's."""
    folded = unicodedata.normalize("NFKC", word).casefold().replace("\u2019", "'")
    if len(folded) > 2 and folded.endswith("'s"):
        folded = folded[:-2]
    return folded


@functools.lru_cache(maxsize=1 << 16)
def normalize_word(word: str) -> str:
    """The matching key of one word (see the module docstring for the rules)."""
    key = _fold(word)
    if key in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[key]
    if key in SINGULARS_ENDING_IN_S:
        return key
    if key.endswith("ies") and len(key) > 4:
        key = key[:-3] + "y"
    elif key.endswith("s") and len(key) > 3 and not key.endswith(("ss", "us", "is")):
        key = key[:-1]
    if key.endswith("ie") and len(key) > 3:
        key = key[:-2] + "y"
    elif key.endswith("e") and len(key) > 3 and key[:-1].endswith(_SIBILANT_ENDINGS):
        key = key[:-1]
    return key


@dataclass(frozen=True)
class Token:
    """One word of a caption: ``text[start:end]``, its matching key, and whether it is a stop word."""

    start: int
    end: int
    text: str
    word: str
    is_stop: bool

    @property
    def is_content(self) -> bool:
        return not self.is_stop


@functools.lru_cache(maxsize=1 << 16)
def is_stop_word(word: str) -> bool:
    """Stop words are judged on the folded text, before plural stripping ("does" is not "doe")."""
    return _fold(word) in STOP_WORDS


def tokenize(text: str) -> list[Token]:
    """Every word of ``text`` with its character offsets into ``text`` itself."""
    tokens = []
    for match in _word_pattern().finditer(text):
        word = match.group()
        if "_" in word and not any(ch.isalnum() for ch in word):
            continue  # "___" is decoration, not a word
        tokens.append(Token(match.start(), match.end(), word, normalize_word(word), is_stop_word(word)))
    return tokens


@functools.lru_cache(maxsize=65536)
def content_tokens(text: str) -> tuple[Token, ...]:
    """The content words of ``text`` (cached: one caption is often in many pairs)."""
    return tuple(token for token in tokenize(text) if token.is_content)


def is_exact_duplicate(text_a: str, text_b: str) -> bool:
    """Same text after NFKC, casefold and whitespace collapsing (punctuation counts): the rule of
    every command (:func:`capgeo.captions.exact_duplicates.normalize_text`)."""
    return normalize_text(text_a) == normalize_text(text_b)


def jaccard(words_a: set[str], words_b: set[str]) -> float:
    """|A & B| / |A | B| over content-word keys; 0.0 when neither caption has a content word."""
    union = words_a | words_b
    return len(words_a & words_b) / len(union) if union else 0.0


#: span kinds
SHARED, ONLY_A, ONLY_B = "shared", "only_a", "only_b"


@dataclass(frozen=True)
class PairHighlight:
    """Lexical comparison of two captions.

    ``shared``/``only_a``/``only_b`` list each word once, as its lowercased text
    where it first appears (in caption a for shared and only_a words), in order
    of appearance. Spans cover every occurrence, so repeated words are all marked.
    """

    spans_a: tuple[Span, ...]  # typed, as a dupes pair holds them (capgeo.geometry.typed_profile.Span)
    spans_b: tuple[Span, ...]
    shared: tuple[str, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    jaccard: float
    exact_duplicate: bool


def _display_words(tokens: tuple[Token, ...], keys: set[str]) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for token in tokens:
        if token.word in keys and token.word not in seen:
            seen[token.word] = unicodedata.normalize("NFKC", token.text).casefold()
    return tuple(seen.values())


def highlight_pair(text_a: str, text_b: str) -> PairHighlight:
    """Mark the content words two captions share and those only one of them has."""
    tokens_a, tokens_b = content_tokens(text_a), content_tokens(text_b)
    keys_a, keys_b = {t.word for t in tokens_a}, {t.word for t in tokens_b}
    shared = keys_a & keys_b
    spans_a = tuple(Span(t.start, t.end, SHARED if t.word in shared else ONLY_A, t.word) for t in tokens_a)
    spans_b = tuple(Span(t.start, t.end, SHARED if t.word in shared else ONLY_B, t.word) for t in tokens_b)
    return PairHighlight(
        spans_a=spans_a,
        spans_b=spans_b,
        shared=_display_words(tokens_a, shared),
        only_a=_display_words(tokens_a, keys_a - shared),
        only_b=_display_words(tokens_b, keys_b - shared),
        jaccard=jaccard(keys_a, keys_b),
        exact_duplicate=is_exact_duplicate(text_a, text_b),
    )
