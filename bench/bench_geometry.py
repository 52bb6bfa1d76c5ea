"""Benchmark: capgeo's pairwise pass against faiss k-NN search alone and numpy brute force.

Same vectors (N random unit vectors of width 768 by default, or a .npy file of
embeddings), same k. Each method runs in a fresh subprocess so its peak memory
(VmHWM from /proc/self/status, which sees torch's and faiss's native allocations)
is its own; this process prints seconds, peak memory and the ratios.

    python bench/bench_geometry.py                      # N = 20,000, width 768, k = 10
    python bench/bench_geometry.py --n 5000 --embeddings vectors.npy

Methods:
  capgeo  scan_pairs: top-k other-group companions + negatives and same-group histograms
          (+ in-batch statistics at B=128 when capgeo.geometry.inbatch is present)
  faiss   IndexFlatIP add + search(k + 1): the k nearest neighbours only, no histogram
  numpy   blockwise float32 matmul + argpartition (k + 1) per row, no histogram
  capgeo-one-product
          the same pass with the fixed arithmetic shape off: one product per tile (its
          arithmetic block set to the tile), which is what the fixed 256-row shape costs
          against (`--methods capgeo,capgeo-one-product` measures it, issue #31 item 6)
  capgeo-torch, capgeo-torch-one-product
          the same two for the torch engine (what cuda, mps, tf32 and bf16 run) on the CPU at
          fp32: fixed-shape arithmetic blocks (capgeo.defaults.ARITHMETIC_BLOCKS["cpu"]), or
          one block per tile
Seconds are wall time; CPU seconds (user + system) show the work done when other
jobs share the cores. "data MB" is the worker's peak after loading the vectors and
importing its library (torch alone is ~600 MB of resident libraries).
Goal: capgeo no slower than 1.2x faiss's search alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_RATIO = 1.2


def peak_memory_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds() -> float:
    """User + system CPU time of this process: the work done, whatever else shares the cores."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_vectors(args):
    import numpy as np

    if args.embeddings:
        vectors = np.load(args.embeddings).astype(np.float32)[: args.n]
    else:
        vectors = np.random.default_rng(args.seed).standard_normal((args.n, args.width), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # captions come in groups of 5 consecutive ones, like COCO
    groups = np.arange(len(vectors)) // 5
    return np.ascontiguousarray(vectors), groups


def run_capgeo(vectors, groups, args) -> dict:
    from capgeo.geometry.pairwise import scan_pairs

    started = time.perf_counter()
    scan = scan_pairs(vectors, groups, top_k=args.k, block_size=args.block_size, device="cpu", progress=False)
    result = {"pairs_in_histogram": int(scan.negatives.n + scan.same_group.n),
              "scan_seconds": time.perf_counter() - started}
    try:
        from capgeo.geometry.inbatch import inbatch_statistics
    except ImportError:
        result["inbatch"] = False
    else:
        # the default batch, or every image of a smaller set (as capgeo's own batch-size rule does)
        import numpy as np

        inbatch_statistics(vectors, groups, min(128, int(np.unique(groups).size)), n_batches=200, seed=0)
        result["inbatch"] = True
    return result


def run_faiss(vectors, groups, args) -> dict:
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    index.search(vectors, args.k + 1)
    return {"threads": faiss.omp_get_max_threads()}


def run_numpy(vectors, groups, args) -> dict:
    import numpy as np

    n, k = len(vectors), args.k + 1
    neighbours = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, args.block_size):
        block = vectors[start:start + args.block_size] @ vectors.T
        part = np.argpartition(-block, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(block, part, 1), axis=1)
        neighbours[start:start + len(block)] = np.take_along_axis(part, order, 1)
    return {}


def run_capgeo_one_product(vectors, groups, args) -> dict:
    from capgeo.geometry import cpu_pass

    cpu_pass.ARITHMETIC_BLOCK = args.block_size  # one arithmetic block per tile: no fixed shape
    return run_capgeo(vectors, groups, args)


def run_capgeo_torch(vectors, groups, args) -> dict:
    from capgeo.geometry import pairwise

    pairwise.runs_on_numpy = lambda device, precision="fp32": False  # the torch engine, on the CPU
    return run_capgeo(vectors, groups, args)


def run_capgeo_torch_one_product(vectors, groups, args) -> dict:
    from capgeo.defaults import ARITHMETIC_BLOCKS

    ARITHMETIC_BLOCKS["cpu"] = args.block_size  # one arithmetic block per tile: no fixed shape
    return run_capgeo_torch(vectors, groups, args)


METHODS = {"capgeo": run_capgeo, "capgeo-one-product": run_capgeo_one_product, "faiss": run_faiss,
           "numpy": run_numpy, "capgeo-torch": run_capgeo_torch,
           "capgeo-torch-one-product": run_capgeo_torch_one_product}


def worker(args) -> None:
    vectors, groups = load_vectors(args)
    # warm up the libraries (imports, thread pools) outside the timing
    if args.worker.startswith("capgeo-torch"):
        import torch  # noqa: F401
        import capgeo.geometry.pairwise  # noqa: F401
    elif args.worker.startswith("capgeo"):
        import capgeo.geometry.pairwise  # noqa: F401  (the CPU pass is numpy's: no torch to warm)
    elif args.worker == "faiss":
        import faiss  # noqa: F401
    baseline = peak_memory_mb()
    started, cpu_started = time.perf_counter(), cpu_seconds()
    extra = METHODS[args.worker](vectors, groups, args)
    seconds = time.perf_counter() - started
    print(json.dumps({"method": args.worker, "seconds": seconds, "cpu_seconds": cpu_seconds() - cpu_started,
                      "peak_mb": peak_memory_mb(),
                      "data_mb": baseline, "shape": list(vectors.shape), **extra}))


def over_data(run: dict) -> float:
    """Peak memory the method added to its loaded vectors and libraries (MB)."""
    return run["peak_mb"] - run["data_mb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--block-size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embeddings", help=".npy file of caption embeddings (first --n rows)")
    parser.add_argument("--methods", default="capgeo,faiss,numpy")
    parser.add_argument("--repeat", type=int, default=1, help="runs per method; the fastest counts")
    parser.add_argument("--worker", choices=sorted(METHODS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    forwarded = [f"--n={args.n}", f"--width={args.width}", f"--k={args.k}", f"--block-size={args.block_size}",
                 f"--seed={args.seed}"] + ([f"--embeddings={args.embeddings}"] if args.embeddings else [])
    methods = []
    for method in args.methods.split(","):
        if method == "faiss" and importlib.util.find_spec("faiss") is None:
            # README set-up installs capgeo without extras: say what the row needs instead of failing
            print("faiss not installed: its baseline row is left out (pip install faiss-cpu, or '.[faiss]')",
                  file=sys.stderr)
            continue
        methods.append(method)
    # rounds of every method in turn, so that a change of load on shared cores touches them alike
    runs: dict = {method: [] for method in methods}
    for _ in range(args.repeat):
        for method in methods:
            completed = subprocess.run([sys.executable, __file__, f"--worker={method}", *forwarded],
                                       capture_output=True, text=True)
            if completed.returncode != 0:  # say why, not only that the worker failed
                sys.exit(f"{method} worker failed:\n{completed.stderr[-3000:]}")
            runs[method].append(json.loads(completed.stdout.strip().splitlines()[-1]))
    results = {method: min(done, key=lambda run: run["seconds"]) for method, done in runs.items()}
    medians = {method: statistics.median(run["seconds"] for run in done) for method, done in runs.items()}

    if not results:
        sys.exit("no method left to run")
    n, width = results[next(iter(results))].get("shape", (args.n, args.width))  # --embeddings: the file's
    print(f"N = {n}, width = {width}, k = {args.k}, block = {args.block_size}")
    print(f"{'method':8s} {'seconds':>9s} {'CPU s':>9s} {'peak MB':>9s} {'data MB':>9s}")
    for method, run in results.items():
        print(f"{method:8s} {run['seconds']:9.2f} {run['cpu_seconds']:9.2f} {run['peak_mb']:9.0f} "
              f"{run['data_mb']:9.0f}  (median of {len(runs[method])}: {medians[method]:.2f} s)")
    for engine in ("capgeo", "capgeo-torch"):
        if engine in results and f"{engine}-one-product" in results:
            fixed, one = results[engine], results[f"{engine}-one-product"]
            print(f"{engine}: fixed-shape blocks / one product per tile: time {fixed['seconds'] / one['seconds']:.2f}x "
                  f"(medians {medians[engine] / medians[f'{engine}-one-product']:.2f}x), "
                  f"CPU time {fixed['cpu_seconds'] / one['cpu_seconds']:.2f}x")
    if "capgeo" in results:
        mine = results["capgeo"]
        for baseline in ("faiss", "numpy"):
            if baseline in results:
                other = results[baseline]
                print(f"capgeo / {baseline}: time {mine['seconds'] / other['seconds']:.2f}x, "
                      f"CPU time {mine['cpu_seconds'] / other['cpu_seconds']:.2f}x, "
                      f"peak memory {mine['peak_mb'] / other['peak_mb']:.2f}x, "
                      f"memory over the data {over_data(mine) / max(over_data(other), 1):.2f}x")
        if "faiss" in results:
            ratio = mine["seconds"] / results["faiss"]["seconds"]
            verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
            print(f"goal capgeo <= {GOAL_RATIO}x faiss search alone: {verdict} ({ratio:.2f}x); "
                  f"in-batch included: {mine.get('inbatch')}")


if __name__ == "__main__":
    main()
