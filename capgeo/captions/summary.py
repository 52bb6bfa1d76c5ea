"""What a loaded dataset holds, as a JSON-ready dict (what `capgeo info` prints)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from capgeo.captions.model import CaptionSet

#: example captions longer than this are cut for display
EXAMPLE_CHARS = 160
#: distinct captions-per-group values listed one by one before the rest are pooled
HISTOGRAM_BINS = 8


def summarize_captions(captions: CaptionSet) -> dict:
    """Format (and layout, for shards and data in memory: CaptionSet.layout, else None), counts, captions per group, splits, caption length in words, examples and skipped rows.

    Lengths count whitespace-separated words (``str.split``); percentiles use
    numpy's default linear interpolation.
    """
    texts = captions.texts
    words = np.fromiter(map(len, map(str.split, texts)), dtype=np.int64, count=len(texts))
    per_group = np.bincount(captions.group_codes)  # codes in first-seen order, shared with the profile
    return {
        "format": captions.format,
        "layout": captions.layout,
        "source": str(captions.source),
        "n_captions": len(texts),
        "n_groups": int(per_group.size),
        "captions_per_group": {
            "min": int(per_group.min()),
            "mean": round(float(per_group.mean()), 3),
            "max": int(per_group.max()),
            "histogram": _histogram(per_group),
        },
        "splits": _split_counts(captions.splits),
        "words_per_caption": {
            "mean": round(float(words.mean()), 2),
            "median": float(np.median(words)),
            "p95": round(float(np.percentile(words, 95)), 2),
            "max": int(words.max()),
        },
        "examples": _examples(captions),
        "skipped": [
            {"reason": item.reason, "count": item.count, "examples": list(item.examples)} for item in captions.skipped
        ],
    }


def _histogram(per_group: np.ndarray) -> dict[str, int]:
    """{captions per group: number of groups}; rare values beyond the first few pooled as '>=k'."""
    counts = Counter(per_group.tolist())
    values = sorted(counts)
    if len(values) <= HISTOGRAM_BINS:
        return {str(value): counts[value] for value in values}
    shown = values[: HISTOGRAM_BINS - 1]
    rest = values[HISTOGRAM_BINS - 1]
    histogram = {str(value): counts[value] for value in shown}
    histogram[f">={rest}"] = sum(counts[value] for value in values[HISTOGRAM_BINS - 1:])
    return histogram


def _split_counts(splits: list[str | None]) -> dict[str, int]:
    """Captions per split, most common first; {} when the dataset has no split field."""
    if all(split is None for split in splits):
        return {}
    counts = Counter("(none)" if split is None else split for split in splits)
    # most common first; ties by name so the order never changes between runs
    return {name: count for name, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))}


def _examples(captions: CaptionSet) -> list[dict]:
    """First, middle and last caption: a spread rather than three neighbours."""
    positions = sorted({0, len(captions) // 2, len(captions) - 1})
    examples = []
    for position in positions:
        row = captions.row(position)
        text = row["text"]
        if len(text) > EXAMPLE_CHARS:
            text = text[: EXAMPLE_CHARS - 1].rstrip() + "…"
        examples.append({"caption_id": row["caption_id"], "group_id": row["group_id"], "text": text})
    return examples
