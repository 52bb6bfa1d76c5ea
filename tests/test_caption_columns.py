"""A CaptionSet read record by record keeps its columns as lists: its table, built when first asked
for, its group codes and its summary are those of the table the loader used to build at once."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import polars as pl

from capgeo.captions import load_captions, summarize_captions
from capgeo.captions.model import COLUMNS


def _records(seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for row in range(rng.randrange(2, 60)):
        record = {"caption": rng.choice(["a dog", " a cat ", "two birds", "\u00e9t\u00e9", "\U0001f415 runs", "   "])}
        if rng.random() < 0.8:
            record["image"] = rng.choice(["b", "a", "c", "d", 7, "e\u0301"])
        if rng.random() < 0.6:
            record["split"] = rng.choice(["train", "test", None])
        records.append(record)
    records.append({"caption": "one caption that is kept", "image": "z"})
    return records


def _reference_codes(groups: list[str]) -> np.ndarray:
    """The codes as the table gave them: numpy's sorted unique names, renumbered by first appearance."""
    _, first, inverse = np.unique(np.array(groups, dtype=object), return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse].astype(np.int64)


@pytest.mark.parametrize("seed", range(5))
def test_the_columns_are_the_table_the_loader_built(tmp_path, seed):
    path = tmp_path / "captions.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in _records(seed)), encoding="utf-8")
    captions = load_captions(path)
    texts, ids, groups, splits = captions.texts, captions.ids, captions.groups, captions.splits
    assert captions._table is None  # nothing has asked for the table yet
    assert len({len(texts), len(ids), len(groups), len(splits), len(captions)}) == 1
    assert np.array_equal(captions.group_codes, _reference_codes(groups))
    assert captions.n_groups == len(set(groups))
    summary = summarize_captions(captions)
    rows = [captions.row(position) for position in range(len(captions))]
    assert captions._table is None

    table = captions.table
    assert table.columns == list(COLUMNS) and all(dtype == pl.String for dtype in table.dtypes)
    assert table.to_dict(as_series=False) == {"caption_id": ids, "group_id": groups, "split": splits, "text": texts}
    assert captions.table is table
    assert rows == [table.row(position, named=True) for position in range(table.height)]
    per_group = table.group_by("group_id", maintain_order=True).len()["len"].to_list()
    assert summary["n_groups"] == len(per_group) and summary["captions_per_group"]["max"] == max(per_group)
    assert sum(summary["splits"].values()) in (0, len(captions))


def test_the_lists_handed_out_are_copies(tmp_path):
    path = tmp_path / "captions.txt"
    path.write_text("a dog\na cat\n")
    captions = load_captions(path)
    captions.texts.append("a bird")
    captions.ids.clear()
    assert captions.texts == ["a dog", "a cat"] and len(captions.ids) == 2
    assert captions.splits == [None, None] and summarize_captions(captions)["splits"] == {}


def test_a_table_given_is_read_as_before():
    from pathlib import Path

    from capgeo.captions.model import CaptionSet

    table = pl.DataFrame({"caption_id": ["x", "y", "z"], "group_id": ["g2", "g1", "g2"], "split": [None, "a", None],
                          "text": ["a", "b", "c"]})
    captions = CaptionSet(table, Path("t"), "test")
    assert (captions.texts, captions.ids, captions.splits) == (["a", "b", "c"], ["x", "y", "z"], [None, "a", None])
    assert captions.group_codes.tolist() == [0, 1, 0] and captions.n_groups == 2 and len(captions) == 3
    assert captions.row(1) == {"caption_id": "y", "group_id": "g1", "split": "a", "text": "b"}
    assert captions.table is table
