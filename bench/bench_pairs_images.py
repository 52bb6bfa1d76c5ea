"""Benchmark: the pairs section's exact pass (capgeo.findings.pairs.pair_pass) against a numpy brute
force of the same counts, at 100,000 image-caption pairs.

Both run in this one process on the same vectors, alternately: each of ``--repeat`` rounds runs
both, and the fastest run of each is kept, so a loaded machine slows both alike; the ratio is the
number to read. The counts are compared, and the run stops if any differs.

    python bench/bench_pairs_images.py                     # 100,000 captions of 20,000 images, width 64
    python bench/bench_pairs_images.py --pairs 20000 --width 256 --delta 0.05

capgeo  pair_pass: caption blocks against every image in float64, the entries at or above each
        image's lowest own threshold kept, per-pair counts by one sort (docs/pairs.md).
numpy   the straightforward way: image row blocks of the float64 matrix, each pair's row compared
        with its own thresholds (image -> text rank, false negatives), then caption column blocks
        compared with each caption's alignment (text -> image rank).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: images per row block of the brute force (its pair rows: IMAGE_BLOCK * per_image x N float64)
IMAGE_BLOCK = 64
#: captions per column block of the brute force's text -> image ranks
CAPTION_BLOCK = 2048


def synthetic(n_pairs: int, per_image: int, width: int, noise: float = 1.0, seed: int = 0):
    """Images, and captions near their image: alignments spread so that false negatives exist (fewer
    with a smaller ``noise``)."""
    rng = np.random.default_rng(seed)
    n_images = n_pairs // per_image
    images = rng.standard_normal((n_images, width))
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    codes = np.repeat(np.arange(n_images), per_image)
    spread = 3 * noise / np.sqrt(width) * rng.uniform(0.3, 1.2, (n_pairs, 1))
    text = images[codes] + spread * rng.standard_normal((n_pairs, width))
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    return images.astype(np.float32), text.astype(np.float32), codes


def brute_force(images, text, codes, delta):
    from capgeo.findings.pairs import TIE

    n, n_images = len(text), len(images)
    images64 = images.astype(np.float64)
    text64 = text.astype(np.float64)
    alignment = np.empty(n)
    image_rank = np.empty(n, dtype=np.int64)
    false_negatives = np.empty(n, dtype=np.int64)
    for first in range(0, n_images, IMAGE_BLOCK):
        last = min(first + IMAGE_BLOCK, n_images)
        scores = images64[first:last] @ text64.T
        mine = np.flatnonzero((codes >= first) & (codes < last))
        alignment[mine] = scores[codes[mine] - first, mine]
        scores[codes[mine] - first, mine] = -np.inf
        rows = scores[codes[mine] - first]
        image_rank[mine] = (rows > alignment[mine, None] + TIE).sum(axis=1)
        false_negatives[mine] = (rows >= alignment[mine, None] - delta - TIE).sum(axis=1)
    text_rank = np.empty(n, dtype=np.int64)
    for start in range(0, n, CAPTION_BLOCK):
        columns = np.arange(start, min(start + CAPTION_BLOCK, n))
        scores = images64 @ text64[columns].T
        scores[codes[columns], columns - start] = -np.inf
        text_rank[columns] = (scores > alignment[columns] + TIE).sum(axis=0)
    return alignment, text_rank, image_rank, false_negatives


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--per-image", type=int, default=5)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--delta", type=float, default=0.0)
    parser.add_argument("--noise", type=float, default=1.0,
                        help="caption noise around its image: 1 leaves many false negatives, 0.5 few")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    from capgeo.findings.pairs import pair_pass

    images, text, codes = synthetic(args.pairs, args.per_image, args.width, args.noise)
    print(f"{len(text):,} pairs, {len(images):,} images, width {args.width}, delta {args.delta:g}")
    best = {"capgeo": float("inf"), "numpy": float("inf")}
    for _ in range(args.repeat):
        started = time.perf_counter()
        done = pair_pass(text, images, codes, delta=args.delta, progress=False)
        best["capgeo"] = min(best["capgeo"], time.perf_counter() - started)
        started = time.perf_counter()
        alignment, text_rank, image_rank, false_negatives = brute_force(images, text, codes, args.delta)
        best["numpy"] = min(best["numpy"], time.perf_counter() - started)
        if not np.allclose(done.alignment, alignment, rtol=0, atol=1e-13):
            sys.exit("alignment: capgeo and numpy differ by more than 1e-13")
        for name, ours, theirs in (("text rank", done.text_rank, text_rank),
                                   ("image rank", done.image_rank, image_rank),
                                   ("false negatives", done.false_negatives, false_negatives)):
            if not np.array_equal(ours, theirs):
                sys.exit(f"{name}: capgeo and numpy differ at {int((ours != theirs).sum())} pairs")
    print(f"counts equal: text->image R@1 {(done.text_rank < 1).mean():.3f}, {int(done.false_negatives.sum()):,} "
          f"false-negative rows over {int((done.false_negatives > 0).sum()):,} pairs")
    print(f"capgeo pair_pass   {best['capgeo']:8.2f} s")
    print(f"numpy brute force  {best['numpy']:8.2f} s")
    print(f"ratio capgeo/numpy {best['capgeo'] / best['numpy']:8.2f}")


if __name__ == "__main__":
    main()
