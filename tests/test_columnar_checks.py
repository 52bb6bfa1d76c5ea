"""The column-wise checks of polars columns (captions/clean.py) against the row-by-row rules and
plain Python: the first and last characters, distinct ids, and whole caption sets."""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

from capgeo.captions import load_captions
from capgeo.captions.clean import (
    RawCaptions,
    _all_distinct,
    _as_lists,
    _checked_caption_set,
    _columnar_caption_set,
    _cut_hash,
    _printable_edges,
)
from capgeo.errors import DataError

PRINTABLE = {chr(code) for code in range(0x21, 0x7F)}
EDGE_CASES = ["", None, "a", "ab", "a b", " a", "a ", "\t", "é", "aé", "éa", "\x7f", "a\x7f", "!", "~", "~!",
              "\u200b", "a\u200b", "🙂", "a🙂", "🙂a", "\x00a", "a\x00", "\x80", "a\u00a0", "Ω.", "x" * 40 + "é",
              "é" + "x" * 40, "x" * 40, " " * 20 + "x"]


def test_printable_edges_is_the_first_and_last_character_test():
    frame = pl.DataFrame({"text": EDGE_CASES}, schema={"text": pl.String})
    found = frame.select(_printable_edges(pl.col("text"))).to_series().to_list()
    expected = [bool(text) and text[0] in PRINTABLE and text[-1] in PRINTABLE for text in EDGE_CASES]
    assert found == expected


def _cut(values: pl.Series) -> pl.Series:
    return values.to_frame("id").select(_cut_hash(pl.col("id"))).to_series()


def test_all_distinct_agrees_with_a_set_where_cut_hashes_meet():
    # 200,000 ids share some 32-bit cut hashes (about n**2 / 2**33 pairs): the string test must clear them
    ids = [f"img{index:07d}_{random.Random(index).random():.6f}" for index in range(200_000)]
    values = pl.Series(ids)
    cut = _cut(values).to_numpy()
    hashes = values.to_frame("id").select(pl.col("id").hash(seed=0)).to_series().to_numpy()
    assert (cut == (hashes & 0xFFFFFFFF)).all()  # the low 32 bits
    assert len(np.unique(cut)) < len(cut), "the case needs cut hashes that meet"
    assert _all_distinct(values, _cut(values)) is True
    doubled = pl.Series(ids + [ids[12345]])
    assert _all_distinct(doubled, _cut(doubled)) is False
    # a duplicate whose cut hash is also shared with another id
    meeting = np.flatnonzero(np.isin(cut, cut[np.flatnonzero(np.bincount(np.unique(cut, return_inverse=True)[1]) > 1)]))
    repeated = pl.Series(ids + [ids[int(meeting[0])]])
    assert _all_distinct(repeated, _cut(repeated)) is False


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_columnar_caption_set_equals_the_row_rules(seed):
    rng = random.Random(seed)
    pieces = ["a cat", "  padded  ", "", "\u200b", "trailing é", "ünïcode", "ok.", "\t", "x"]
    n = 400
    texts = [rng.choice(pieces) + (str(rng.randrange(5)) if rng.random() < 0.5 else "") for _ in range(n)]
    texts[rng.randrange(n)] = None
    groups = [f"g{rng.randrange(60)}" for _ in range(n)]
    splits = [rng.choice(["train", "test"]) for _ in range(n)]
    for ids in (None, [f"c{index}" for index in range(n)]):
        for split, limit in ((None, None), ("test", None), (None, 50), ("train", 7)):
            raw = RawCaptions(source="mem", format="parquet", texts=pl.Series(texts, dtype=pl.String),
                              where=lambda row: f"row {row + 1}", ids=None if ids is None else pl.Series(ids),
                              groups=pl.Series(groups), splits=pl.Series(splits), fields=["caption"])
            columnar = _columnar_caption_set(raw, split=split, limit=limit)
            assert columnar is not None  # the column-wise path took it, not the row rules
            rows = _checked_caption_set(_as_lists(raw), split=split, limit=limit)
            assert columnar.table.equals(rows.table)
            assert columnar.table.schema == rows.table.schema
            assert columnar.skipped == rows.skipped


def test_duplicate_id_in_shards_is_named(tmp_path):
    pl.DataFrame({"caption": ["a", "b"], "id": ["x", "y"]}).write_parquet(tmp_path / "part-0.parquet")
    pl.DataFrame({"caption": ["c", "d"], "id": ["z", "x"]}).write_parquet(tmp_path / "part-1.parquet")
    with pytest.raises(DataError, match=r"duplicate caption id 'x' at part-0.parquet, row 1 and part-1.parquet, row 2"):
        load_captions(tmp_path)
