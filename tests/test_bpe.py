"""capgeo's word-memo BPE gives exactly open_clip's SimpleTokenizer ids, on every shared caption."""

from __future__ import annotations

import pytest

from open_clip.tokenizer import SimpleTokenizer  # noqa: E402

from capgeo.captions import load_captions  # noqa: E402
from capgeo.encoders.bpe import WordMemoBpe  # noqa: E402

SHARED_SETS = ("docci-test/docci_test.json", "coco-karpathy-test/mscoco_test.json", "urban1k/Urban1k/caption")


@pytest.mark.slow
@pytest.mark.parametrize("relative", SHARED_SETS)
def test_ids_equal_open_clips_on_all_shared_captions(shared_data, relative):
    texts = load_captions(str(shared_data / relative)).texts
    assert len(texts) >= 1000
    reference = SimpleTokenizer()
    fast = WordMemoBpe(SimpleTokenizer())
    mismatches = [index for index, text in enumerate(texts) if fast.encode(text) != reference.encode(text)]
    assert mismatches == [], f"first differing caption: {texts[mismatches[0]]!r}"


@pytest.mark.parametrize("text", [
    "", "   ", "A  Café &amp; bar — “quoted” ﬁne print", "it's 12:30, they've gone!!", "日本語のキャプション 🚌",
    "<start_of_text> literal special tokens <end_of_text>", "mojibake: cafÃ© naÃ¯ve", "tab\tand\r\nnewline",
])
def test_ids_equal_open_clips_on_awkward_text(text):
    fast = WordMemoBpe(SimpleTokenizer())
    assert fast.encode(text) == SimpleTokenizer().encode(text)
    assert fast.encode(text) == fast.encode(text)          # the memo gives the same ids the second time


def test_other_clean_modes_are_followed():
    # tokenizers built with another cleaning function keep it (e.g. whitespace-only, case kept)
    reference = SimpleTokenizer(clean="whitespace")
    fast = WordMemoBpe(SimpleTokenizer(clean="whitespace"))
    text = "Keep The CASE of These Words"
    assert fast.encode(text) == reference.encode(text) != SimpleTokenizer().encode(text)
