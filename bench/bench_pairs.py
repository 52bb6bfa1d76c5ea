"""Benchmark: `leak` and `dupes` pair listings against a numpy brute force of the same pairs.

Both sides run in this one process, on the same vectors, alternately: each of ``--repeat``
rounds runs both, and the fastest run of each is kept, so a loaded machine slows both alike;
the ratio is the number to read.

    python bench/bench_pairs.py --leak-threshold 0.9              # synthetic: 25,000 x 5,000, width 384
    python bench/bench_pairs.py --train train.npy --eval eval.npy # cached embeddings (.npy)

leak   capgeo.findings.leak's pass (capgeo.geometry.cross.scan_cross at the threshold less
       float32's margin, then the float64 re-score of the candidates) vs numpy: the eval x train
       float32 product in row blocks, np.nonzero(>= threshold - margin), the same float64 re-score.
dupes  capgeo.findings.duplicates.near_duplicate_pairs(threshold=0.9, limit=None) on the train
       vectors (as `capgeo dupes --threshold 0.9 --top 0`) vs numpy: the float32 upper triangle in
       row blocks, np.nonzero(>= 0.9) of different-group pairs, sorted by cosine.
Goal (issue #31 item 3): each within 1.3x of its brute force.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL_RATIO = 1.3
BLOCK = 2048


def clustered(n, width, seed, spread=0.35):
    """Unit vectors near n/5 centres: near-duplicates exist at 0.9 as in real caption sets."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(n // 5, 2), width))
    vectors = centres[rng.integers(0, len(centres), n)] + spread * rng.normal(size=(n, width)) / np.sqrt(width) * 4
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def leak_capgeo(train, evaluation, threshold):
    from capgeo.findings.leak import _cosines64
    from capgeo.geometry.cross import scan_cross

    margin = evaluation.shape[1] * 2.0 ** -22 + 1e-6
    scan = scan_cross(evaluation, train, threshold=threshold - margin, top_k=0, device="cpu", progress=False)
    cosine = _cosines64(evaluation, train, scan.pair_query, scan.pair_reference)
    return int((cosine >= threshold).sum())


def leak_numpy(train, evaluation, threshold):
    from capgeo.findings.leak import _cosines64

    margin = evaluation.shape[1] * 2.0 ** -22 + 1e-6
    rows, columns = [], []
    for start in range(0, len(evaluation), BLOCK):
        hit = np.nonzero(evaluation[start:start + BLOCK] @ train.T >= threshold - margin)
        rows.append(hit[0] + start)
        columns.append(hit[1])
    rows, columns = np.concatenate(rows), np.concatenate(columns)
    return int((_cosines64(evaluation, train, rows, columns) >= threshold).sum())


def dupes_capgeo(vectors, groups, threshold):
    from capgeo.captions.model import CaptionSet
    from capgeo.findings.duplicates import near_duplicate_pairs

    captions = _captions(groups)
    pairs = near_duplicate_pairs(captions, vectors, threshold=threshold, limit=None, device="cpu")
    assert isinstance(captions, CaptionSet)
    return len(pairs)


def dupes_numpy(vectors, groups, threshold):
    found = []
    for start in range(0, len(vectors), BLOCK):
        block = vectors[start:start + BLOCK] @ vectors[start:].T
        rows, columns = np.nonzero(block >= threshold)
        columns = columns + start
        rows = rows + start
        keep = (rows < columns) & (groups[rows] != groups[columns])
        found.append((rows[keep], columns[keep], block[rows[keep] - start, columns[keep] - start]))
    rows, columns, values = (np.concatenate(part) for part in zip(*found))
    order = np.lexsort((columns, rows, -values))
    return int(order.size)


_CAPTIONS = {}


def _captions(groups):
    import polars as pl

    from capgeo.captions.model import CaptionSet

    key = id(groups)
    if key not in _CAPTIONS:
        n = len(groups)
        table = pl.DataFrame({"caption_id": [f"c{i}" for i in range(n)], "group_id": [f"g{g}" for g in groups],
                              "split": [None] * n, "text": [f"caption {i}" for i in range(n)]})
        _CAPTIONS[key] = CaptionSet(table, Path("bench"), "bench")
    return _CAPTIONS[key]


def best_of_alternating(ours, theirs, repeat, *args):
    """The fastest of ``repeat`` rounds of each, every round running both one after the other, so
    that a slower minute on a shared machine slows both sides of the ratio."""
    times = {ours: [], theirs: []}
    results = {}
    for _ in range(repeat):
        for function in (ours, theirs):
            started = time.perf_counter()
            results[function] = function(*args)
            times[function].append(time.perf_counter() - started)
    return min(times[ours]), results[ours], min(times[theirs]), results[theirs]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, help=".npy of training-set vectors (default: synthetic)")
    parser.add_argument("--eval", type=Path, help=".npy of evaluation-set vectors (default: synthetic)")
    parser.add_argument("--n-train", type=int, default=25_000)
    parser.add_argument("--n-eval", type=int, default=5_000)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--leak-threshold", type=float, default=0.95)
    parser.add_argument("--dupes-threshold", type=float, default=0.9)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    train = np.load(args.train).astype(np.float32) if args.train else clustered(args.n_train, args.width, 1)
    if args.eval:
        evaluation = np.load(args.eval).astype(np.float32)
    else:  # noisy copies of training captions, as a leaked split has: cosines from ~1 down to ~0.85
        rng = np.random.default_rng(2)
        noise = rng.uniform(0, 0.03, (args.n_eval, 1)) * rng.normal(size=(args.n_eval, train.shape[1]))
        evaluation = (train[rng.integers(0, len(train), args.n_eval)] + noise).astype(np.float32)
    train /= np.linalg.norm(train, axis=1, keepdims=True)
    evaluation /= np.linalg.norm(evaluation, axis=1, keepdims=True)
    groups = np.arange(len(train)) // 5
    results = {"n_train": len(train), "n_eval": len(evaluation), "width": train.shape[1]}
    for name, ours, theirs, inputs in (
            ("leak", leak_capgeo, leak_numpy, (train, evaluation, args.leak_threshold)),
            ("dupes", dupes_capgeo, dupes_numpy, (train, groups, args.dupes_threshold))):
        ours(*inputs)  # warm: imports, first allocations
        seconds, found, numpy_seconds, numpy_found = best_of_alternating(ours, theirs, args.repeat, *inputs)
        ratio = seconds / numpy_seconds
        results[name] = {"capgeo_s": round(seconds, 3), "numpy_s": round(numpy_seconds, 3),
                         "ratio": round(ratio, 2), "pairs": found, "numpy_pairs": numpy_found,
                         "goal": GOAL_RATIO, "met": ratio <= GOAL_RATIO}
        print(f"{name:5}  capgeo {seconds:7.2f} s  numpy {numpy_seconds:7.2f} s  {ratio:4.2f}x "
              f"(goal {GOAL_RATIO}x)  pairs {found:,} / {numpy_found:,}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
