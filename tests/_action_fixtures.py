"""Small synthetic caption sets and vectors for the per-caption, leak, dedup and negatives tests."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl

from capgeo.captions.model import CaptionSet


def caption_set(groups, texts=None, ids=None, source="synthetic") -> CaptionSet:
    """A CaptionSet with the given group id per caption."""
    n = len(groups)
    texts = texts or [f"caption {i} of {group}" for i, group in enumerate(groups)]
    ids = ids or [f"c{i:04d}" for i in range(n)]
    table = pl.DataFrame({"caption_id": ids, "group_id": list(groups), "split": [None] * n, "text": texts},
                         schema={"caption_id": pl.String, "group_id": pl.String, "split": pl.String,
                                 "text": pl.String})
    return CaptionSet(table, Path(source), "test")


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def embeddings(vectors, token_counts=None, max_tokens=77):
    """What embed() returns, for vectors computed by the test."""
    vectors = unit(vectors)
    counts = np.full(len(vectors), -1) if token_counts is None else np.asarray(token_counts)
    return SimpleNamespace(vectors=vectors, token_counts=counts, max_tokens=max_tokens, info=None)


def write_jsonl(path: Path, ids, groups, texts) -> Path:
    path.write_text("".join(json.dumps({"id": i, "image": g, "caption": t}) + "\n"
                            for i, g, t in zip(ids, groups, texts)), encoding="utf-8")
    return path


def brute_components(similarity, threshold):
    """Near-duplicate sets by union-find over every pair >= threshold."""
    parent = list(range(len(similarity)))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for a, b in zip(*np.nonzero(similarity >= threshold)):
        parent[root(a)] = root(b)
    sets = {}
    for i in np.unique(np.nonzero(similarity >= threshold)[0]):
        sets.setdefault(root(i), set()).add(int(i))
    return {frozenset(members) for members in sets.values()}


def vectors_dataset(folder: Path, n: int, width: int = 8, per_image: int = 2) -> tuple[Path, str]:
    """A jsonl of ``n`` captions (``per_image`` per image) and a ``vectors:`` spec of random vectors for them."""
    data = write_jsonl(folder / "d.jsonl", [f"c{i}" for i in range(n)], [f"g{i // per_image}" for i in range(n)],
                       [f"caption {i}" for i in range(n)])
    np.save(folder / "v.npy", np.random.default_rng(0).normal(size=(n, width)).astype(np.float32))
    return data, f"vectors:{folder / 'v.npy'}"
