"""Caption-map benchmark: `capgeo map`'s work on N = 100,000 captions (goal: under 90 s on 2 cores).

Times, in one process, on clustered synthetic embeddings of width 384 (all-MiniLM-L6-v2's;
5 captions per image): the PCA to 50 dimensions plus openTSNE (capgeo.map.project), and the
whole map section (capgeo.map.dataset_map: the exact pairwise pass for each caption's hardest
companion and the near-duplicate sets, then the projection). With ``--umap`` it also times
umap-learn on the same PCA output, the alternative docs/report.md weighs (needs umap-learn).
Prints wall and CPU seconds (all threads): on a shared machine the wall time says more about
the other jobs than about the map.

    python bench/bench_map.py                   # N = 100,000
    python bench/bench_map.py --n 20000 --umap  # quicker, with the umap-learn baseline
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--umap", action="store_true", help="also time umap-learn on the same input")
    parser.add_argument("--projection-only", action="store_true", help="skip the pairwise pass (dataset_map)")
    args = parser.parse_args()

    import numpy as np
    import polars as pl

    from capgeo.captions.model import CaptionSet
    from capgeo.map import dataset_map, project

    rng = np.random.default_rng(args.seed)
    images = args.n // 5
    centres = rng.standard_normal((images // 20, args.width), dtype=np.float32)   # 20 images per topic
    topic = rng.integers(0, centres.shape[0], images)
    image = np.repeat(topic, 5)[:args.n]
    vectors = centres[image] + 0.8 * rng.standard_normal((args.n, args.width), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    groups = [f"img{i // 5}" for i in range(args.n)]
    print(f"N = {args.n:,} captions of {images:,} images, width {args.width}", flush=True)

    started, cpu = time.perf_counter(), time.process_time()
    project(vectors, seed=args.seed)
    print(f"PCA + openTSNE: {time.perf_counter() - started:.1f} s wall, {time.process_time() - cpu:.1f} s CPU",
          flush=True)

    if args.umap:
        import umap

        from capgeo.map import PCA_DIMENSIONS, _principal_components

        started, cpu = time.perf_counter(), time.process_time()
        centred = vectors.astype(np.float64) - vectors.astype(np.float64).mean(axis=0)
        reduced = _principal_components(centred, PCA_DIMENSIONS)
        # random_state makes umap-learn deterministic, and single-threaded
        umap.UMAP(random_state=args.seed).fit_transform(reduced)
        print(f"PCA + umap-learn (random_state set): {time.perf_counter() - started:.1f} s wall, "
              f"{time.process_time() - cpu:.1f} s CPU", flush=True)

    if not args.projection_only:
        table = pl.DataFrame({"caption_id": [f"c{i}" for i in range(args.n)], "group_id": groups,
                              "split": [None] * args.n, "text": [f"caption {i}" for i in range(args.n)]},
                             schema={"caption_id": pl.String, "group_id": pl.String, "split": pl.String,
                                     "text": pl.String})
        captions = CaptionSet(table, __import__("pathlib").Path("synthetic"), "test")
        started, cpu = time.perf_counter(), time.process_time()
        dataset_map(captions, vectors, seed=args.seed, progress=False)
        print(f"whole map section (pairwise pass + sets + projection): {time.perf_counter() - started:.1f} s wall, "
              f"{time.process_time() - cpu:.1f} s CPU", flush=True)


if __name__ == "__main__":
    main()
