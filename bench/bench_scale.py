"""Scale benchmark: the exact pairwise pass at N = 100,000 captions of width 768.

Prints wall time and peak memory (VmHWM, which sees torch's native allocations), the
memory the vectors alone take, and the extrapolated time for 1,000,000 captions
(the pass is quadratic: N^2 / 2 dot products). As a baseline in the same process it
times one full-width tile matmul rate and the sampled estimate (2,000,000 pairs).

    python bench/bench_scale.py                 # N = 100,000 (minutes on 2 cores)
    python bench/bench_scale.py --n 20000       # quicker
"""

from __future__ import annotations

import argparse
import time

from bench_geometry import cpu_seconds, peak_memory_mb  # this folder: run as python bench/bench_scale.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--block-size", type=int, default=2048)
    parser.add_argument("--target", type=int, default=1_000_000, help="N to extrapolate the time to")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import numpy as np
    import torch

    from capgeo.geometry.estimate import estimate_pairs
    from capgeo.geometry.pairwise import scan_pairs

    vectors = np.random.default_rng(args.seed).standard_normal((args.n, args.width), dtype=np.float32)
    for start in range(0, args.n, 10_000):  # in chunks: no N x d temporary inflating the peak
        chunk = vectors[start:start + 10_000]
        chunk /= np.linalg.norm(chunk, axis=1, keepdims=True)
    groups = np.arange(args.n) // 5
    data_mb = peak_memory_mb()
    print(f"N = {args.n}, width = {args.width}, k = {args.k}, block = {args.block_size}, "
          f"torch threads = {torch.get_num_threads()}", flush=True)
    print(f"process peak memory with the vectors loaded: {data_mb:.0f} MB "
          f"(vectors alone {vectors.nbytes / 2**20:.0f} MB)", flush=True)

    # baseline: the matmul rate of one tile, to say how much of the pass is matmul
    tile = torch.from_numpy(vectors[: args.block_size])
    tile @ tile.T
    tile_seconds = float("inf")
    for _ in range(5):  # the fastest of five: other jobs only ever slow it down
        started = time.perf_counter()
        tile @ tile.T
        tile_seconds = min(tile_seconds, time.perf_counter() - started)
    n_blocks = -(-args.n // args.block_size)
    matmul_only = tile_seconds * n_blocks * (n_blocks + 1) / 2

    started, cpu_started = time.perf_counter(), cpu_seconds()
    scan = scan_pairs(vectors, groups, top_k=args.k, block_size=args.block_size, device="cpu", progress=None)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds() - cpu_started
    peak = peak_memory_mb()
    # CPU time says how much work the pass is when other jobs share the cores
    print(f"exact pass: {seconds:.1f} s wall, {cpu:.1f} s CPU, peak memory {peak:.0f} MB "
          f"(+{peak - data_mb:.0f} MB over the loaded vectors)", flush=True)
    print(f"  pairs: {scan.negatives.n:,} negatives + {scan.same_group.n:,} same-group; "
          f"mean negative cosine {scan.negatives.mean:.5f}", flush=True)
    print(f"  matmuls alone (timed tile x tiles): {matmul_only:.1f} s -> pass / matmul = "
          f"{seconds / matmul_only:.2f}x", flush=True)
    factor = (args.target / args.n) ** 2
    print(f"extrapolated exact pass for N = {args.target:,}: {seconds * factor:.0f} s "
          f"= {seconds * factor / 3600:.1f} h (x{factor:.0f}, quadratic); memory grows linearly: "
          f"vectors {args.target * args.width * 4 / 2**30:.1f} GiB + top-k {args.target * args.k * 12 / 2**20:.0f} MiB",
          flush=True)

    started = time.perf_counter()
    sampled = estimate_pairs(vectors, groups, n_pairs=2_000_000, top_k=0, device="cpu", progress=None)
    sampled_seconds = time.perf_counter() - started
    print(f"sampled distribution (2,000,000 pairs, no companions): {sampled_seconds:.1f} s, "
          f"mean {sampled.negatives.mean:.5f} +- {1.96 * sampled.bounds['mean_standard_error']:.5f} (95%), "
          f"exact {scan.negatives.mean:.5f}; CDF within +-{sampled.bounds['cdf_epsilon']:.5f} (DKW, 95%)", flush=True)


if __name__ == "__main__":
    main()
