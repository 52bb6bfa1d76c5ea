"""CLIP's BPE tokenisation, the same ids as open_clip's ``SimpleTokenizer.encode``, faster.

open_clip's tokenizer re-encodes every word of every caption to bytes, runs its
(cached) BPE, splits the result and looks each piece up: per word, several
Python-level steps. Captions repeat their words a lot, so here each distinct
word is turned into its ids once (by the tokenizer's own ``byte_encoder``,
``bpe`` and ``encoder``) and a caption becomes one dict lookup per word. The
cleaning (ftfy, HTML unescaping, whitespace, lower case) and the word split are
the tokenizer's own, so the ids are identical by construction; the tests check
that on every shared caption.
"""

from __future__ import annotations

WORD_MEMO_LIMIT = 500_000  # distinct words remembered (a few tens of MB at most)


class WordMemoBpe:
    """``encode(text)`` -> the ids ``tokenizer.encode(text)`` gives (no start/end tokens)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._words: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        tokenizer, words = self.tokenizer, self._words
        ids: list[int] = []
        for word in tokenizer.pat.findall(tokenizer.clean_fn(text)):
            found = words.get(word)
            if found is None:
                found = self._word_ids(word)
                if len(words) >= WORD_MEMO_LIMIT:
                    words.clear()
                words[word] = found
            ids.extend(found)
        return ids

    def _word_ids(self, word: str) -> tuple[int, ...]:
        tokenizer = self.tokenizer
        as_bytes = "".join(tokenizer.byte_encoder[byte] for byte in word.encode("utf-8"))
        return tuple(tokenizer.encoder[piece] for piece in tokenizer.bpe(as_bytes).split(" "))
