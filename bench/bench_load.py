"""Benchmark: reading parquet shards through capgeo against polars reading the same columns.

Writes N captions in S parquet shards into a temporary folder (columns: caption, id and an
unused 200-byte column), then runs each reader as a fresh process and reports its wall time
(imports done before the clock starts), its CPU time (all threads: steadier than wall time on a
machine others share) and peak memory (ru_maxrss, the process's whole resident
peak, interpreter and imports included):
  polars   pl.scan_parquet(shards).select("caption", "id").collect()
  capgeo   capgeo.captions.load_captions(folder)
Each reader runs --rounds times, the two alternating, and the medians are compared: the
ratios capgeo/polars are measured in the one run (on a loaded machine one pair of runs can be
off by a third either way). With --coco FILE it also times
load_captions on that file (the shared COCO Karpathy test set), median of --repeat runs in
one process, to compare loaders of single files between checkouts (run it once per checkout).

    python bench/bench_load.py --captions 1000000          # 1M captions in 100 shards
    python bench/bench_load.py --captions 10000000         # the issue's size: ~2 GB of shards
    python bench/bench_load.py --captions 0 --coco ../shared/data/coco-karpathy-test/mscoco_test.json

The shards are removed afterwards (--keep FOLDER writes them there and keeps them; a --keep
folder that already holds shards is read as it is, without writing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (imports, the read timed): each reader's libraries are imported before its clock starts
POLARS = ("import glob, polars as pl",
          "frame = pl.scan_parquet(sorted(glob.glob(folder + '/*.parquet'))).select('caption', 'id').collect()")
CAPGEO = ("from capgeo.captions import load_captions", "frame = load_captions(folder)")
MEASURED = """
import resource, sys, time
setup, timed, folder = sys.argv[1:]
exec(setup)
start, cpu = time.perf_counter(), time.process_time()
exec(timed)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
print('RESULT', seconds, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(frame))
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captions", type=int, default=1_000_000, help="captions in all (0: no shard benchmark)")
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--keep", type=Path, default=None,
                        help="write the shards here and keep them (shards already there are reused)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each reader, alternating (median taken)")
    parser.add_argument("--coco", type=Path, default=None, help="also time load_captions on this file")
    parser.add_argument("--repeat", type=int, default=5)
    return parser.parse_args(argv)


def write_shards(folder: Path, n: int, shards: int) -> None:
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(0)
    words = np.array("a the dog cat red blue small large photo of on in with near street field man woman".split())
    per = -(-n // shards)
    for index in range(shards):
        start, stop = index * per, min(n, (index + 1) * per)
        if start >= stop:
            break
        picks = rng.integers(0, len(words), size=(stop - start, 10))
        captions = [" ".join(row) for row in words[picks]]
        # 200 random bytes a row (as hex text), so the column neither compresses nor dictionary-encodes
        unused = pl.Series(np.frombuffer(rng.bytes(100 * (stop - start)), dtype="S100")).bin.encode("hex")
        pl.DataFrame({"caption": captions, "id": [f"c{i}" for i in range(start, stop)],
                      "unused": unused}).write_parquet(folder / f"part-{index:05d}.parquet")


def measure(code: tuple[str, str], folder: Path, n: int) -> tuple[float, float, float]:
    """(seconds of the read, CPU seconds of the read (all threads), peak resident MiB of the process)
    of one fresh process reading ``folder``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", MEASURED, *code, str(folder)], capture_output=True, text=True,
                         env=env, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("RESULT"))
    _, seconds, cpu, peak_kib, rows = line.split()
    assert int(rows) == n, (rows, n)
    return float(seconds), float(cpu), int(peak_kib) / 1024


def bench_shards(args) -> dict:
    folder = args.keep or Path(tempfile.mkdtemp(prefix="capgeo-bench-load-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        if args.keep is not None and any(folder.glob("*.parquet")):
            print(f"reusing the shards in {folder}", flush=True)
        else:
            write_shards(folder, args.captions, args.shards)
        size = sum(path.stat().st_size for path in folder.glob("*.parquet"))
        print(f"{args.captions:,} captions in {len(list(folder.glob('*.parquet')))} shards, {size / 2**20:,.0f} MiB, "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        runs = {"polars": [], "capgeo": []}
        for _ in range(max(1, args.rounds)):
            runs["polars"].append(measure(POLARS, folder, args.captions))
            runs["capgeo"].append(measure(CAPGEO, folder, args.captions))
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    def median(name: str, index: int) -> float:
        return statistics.median(run[index] for run in runs[name])

    polars_s, capgeo_s = median("polars", 0), median("capgeo", 0)
    polars_cpu, capgeo_cpu = median("polars", 1), median("capgeo", 1)
    polars_mib, capgeo_mib = median("polars", 2), median("capgeo", 2)
    result = {"captions": args.captions, "shards": args.shards, "rounds": len(runs["polars"]),
              "polars_s": round(polars_s, 3), "capgeo_s": round(capgeo_s, 3), "time_ratio": round(capgeo_s / polars_s, 2),
              "time_ratio_per_round": [round(c[0] / p[0], 2) for p, c in zip(runs["polars"], runs["capgeo"])],
              "polars_cpu_s": round(polars_cpu, 3), "capgeo_cpu_s": round(capgeo_cpu, 3),
              "cpu_ratio": round(capgeo_cpu / polars_cpu, 2),
              "polars_peak_mib": round(polars_mib), "capgeo_peak_mib": round(capgeo_mib),
              "memory_ratio": round(capgeo_mib / polars_mib, 2)}
    print(json.dumps(result))
    return result


def bench_coco(args) -> None:
    sys.path.insert(0, str(ROOT))
    from capgeo.captions import load_captions

    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        captions = load_captions(args.coco)
        times.append(time.perf_counter() - started)
    print(json.dumps({"file": str(args.coco), "captions": len(captions), "median_s": round(statistics.median(times), 3),
                      "min_s": round(min(times), 3)}))


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.captions:
        bench_shards(args)
    if args.coco:
        bench_coco(args)


if __name__ == "__main__":
    main()
