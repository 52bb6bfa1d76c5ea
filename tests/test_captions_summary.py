"""summarize_captions: every number checked against an independent computation."""

import json
import statistics
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from capgeo.captions import CaptionSet, Skipped, load_captions, summarize_captions


def _percentile(values, q):
    """Linear-interpolation percentile written out (numpy's default method)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def test_summary_of_a_hand_built_set():
    texts = ["one", "one two", "one two three", "a b c d", "x " * 20 + "y", "[bold]markup[/] stays text"]
    table = pl.DataFrame({
        "caption_id": [f"c{i}" for i in range(6)],
        "group_id": ["g1", "g1", "g1", "g2", "g3", "g3"],
        "split": ["train", "train", "test", "test", "test", None],
        "text": texts,
    })
    skipped = [Skipped("empty or whitespace-only caption", 2, ("line 3", "line 9"))]
    summary = summarize_captions(CaptionSet(table, Path("x.jsonl"), "jsonl", skipped))
    words = [len(text.split()) for text in texts]
    assert summary["format"] == "jsonl" and summary["source"] == "x.jsonl"
    assert summary["n_captions"] == 6 and summary["n_groups"] == 3
    assert summary["captions_per_group"] == {"min": 1, "mean": 2.0, "max": 3, "histogram": {"1": 1, "2": 1, "3": 1}}
    assert summary["splits"] == {"test": 3, "train": 2, "(none)": 1}
    assert summary["words_per_caption"]["mean"] == pytest.approx(statistics.mean(words), abs=0.01)
    assert summary["words_per_caption"]["median"] == statistics.median(words)
    assert summary["words_per_caption"]["p95"] == pytest.approx(_percentile(words, 95), abs=0.01)
    assert summary["words_per_caption"]["max"] == max(words)
    assert [example["caption_id"] for example in summary["examples"]] == ["c0", "c3", "c5"]
    assert summary["skipped"] == [{"reason": "empty or whitespace-only caption", "count": 2,
                                   "examples": ["line 3", "line 9"]}]
    json.dumps(summary, allow_nan=False)  # JSON-ready


def test_summary_of_real_coco(shared_data):
    path = shared_data / "coco-karpathy-test" / "mscoco_test.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    summary = summarize_captions(load_captions(path))
    words = [len(caption.split()) for record in records for caption in record["captions"]]
    assert summary["n_captions"] == len(words) == 25010
    assert summary["n_groups"] == 5000
    assert summary["captions_per_group"]["histogram"] == {"5": 4990, "6": 10}
    assert summary["captions_per_group"]["mean"] == pytest.approx(25010 / 5000, abs=1e-3)
    assert summary["splits"] == {"test": 25010}
    assert summary["words_per_caption"]["mean"] == pytest.approx(statistics.mean(words), abs=0.01)
    assert summary["words_per_caption"]["median"] == statistics.median(words)
    assert summary["words_per_caption"]["p95"] == pytest.approx(_percentile(words, 95), abs=0.01)
    assert summary["words_per_caption"]["max"] == max(words)


def test_histogram_pools_rare_large_groups(tmp_path):
    # groups of 1..12 captions: the first 7 sizes listed, the rest pooled
    rows = [{"image": f"g{size}", "caption": f"caption {k}"} for size in range(1, 13) for k in range(size)]
    path = tmp_path / "caps.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    histogram = summarize_captions(load_captions(path))["captions_per_group"]["histogram"]
    assert histogram == {**{str(size): 1 for size in range(1, 8)}, ">=8": 5}
    assert sum(histogram.values()) == 12


def test_long_examples_are_truncated(tmp_path):
    path = tmp_path / "caps.txt"
    path.write_text("word " * 200 + "\n", encoding="utf-8")
    [example] = summarize_captions(load_captions(path))["examples"]
    assert len(example["text"]) <= 160 and example["text"].endswith("…")
    assert Counter(example["text"].split())["word"] >= 30
