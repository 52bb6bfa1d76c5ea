"""Benchmark: reading captions from webdataset shards, against plain tarfile iteration over the same shards.

Writes --shards shards of --samples samples each, laid out as img2dataset writes them
(key.jpg of --image-kb random bytes, key.txt, key.json), into a temporary folder it removes after.
Then, alternating, --repeats times each (the best time counts):

  tarfile    ``for member in tarfile.open(shard): if .txt: extractfile(member).read()``, every shard:
             the least a reader of these captions must do
  capgeo     ``read_webdataset`` (samples grouped, .txt and .json read, captions gathered)
  load       ``load_captions(folder)``: the above plus the checked CaptionSet every command gets

and prints seconds, samples/s and capgeo's speed as a share of tarfile's (goal: >= 50%). Memory:
the peak of Python allocations (tracemalloc) while reading shards of 1 KB and of --image-kb images,
which must not grow with the image size.

    python bench/bench_load_webdataset.py                                # 20 shards x 2,000 samples, 20 KB images
    python bench/bench_load_webdataset.py --shards 100 --samples 10000   # the issue's 20 GB size
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GOAL = 0.5


def write_shards(folder: Path, shards: int, samples: int, image_bytes: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    image = os.urandom(image_bytes)  # one random image reused: its bytes are never looked at
    for s in range(shards):
        with tarfile.open(folder / f"{s:05d}.tar", "w") as archive:
            for k in range(s * samples, (s + 1) * samples):
                key = f"{k:09d}"
                caption = f"a photo of sample {k}, a dog running across a wide green field on a sunny day"
                meta = {"url": f"https://example.org/{k}.jpg", "key": key, "status": "success",
                        "caption": caption, "width": 256, "height": 256}
                for suffix, data in (("jpg", image), ("txt", caption.encode()), ("json", json.dumps(meta).encode())):
                    info = tarfile.TarInfo(f"{key}.{suffix}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))


def plain_tarfile(shards: list[Path]) -> int:
    count = 0
    for shard in shards:
        with tarfile.open(shard) as archive:
            for member in archive:
                if member.name.endswith(".txt"):
                    archive.extractfile(member).read()
                    count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--samples", type=int, default=2000, help="samples per shard")
    parser.add_argument("--image-kb", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where to write the shards (default: a temp folder)")
    args = parser.parse_args()

    from capgeo.captions import load_captions
    from capgeo.captions.tabular import ColumnChoice
    from capgeo.captions.webdataset import find_shards, read_webdataset

    root = Path(tempfile.mkdtemp(prefix="capgeo-wds-", dir=args.folder))
    try:
        folder = root / "shards"
        started = time.perf_counter()
        write_shards(folder, args.shards, args.samples, args.image_kb * 1000)
        shards = find_shards(folder)
        size = sum(shard.stat().st_size for shard in shards)
        n = args.shards * args.samples
        print(f"{args.shards} shards x {args.samples:,} samples, {args.image_kb} KB images: {size / 1e9:.2f} GB "
              f"of tar, written in {time.perf_counter() - started:.1f} s")
        sides = {
            "tarfile": lambda: plain_tarfile(shards),
            "capgeo": lambda: len(read_webdataset(shards, ColumnChoice(), folder, progress=False).texts),
            "load": lambda: len(load_captions(folder).texts),
        }
        best = {name: float("inf") for name in sides}
        for _ in range(args.repeats):
            for name, side in sides.items():
                started = time.perf_counter()
                count = side()
                best[name] = min(best[name], time.perf_counter() - started)
                assert count == n, (name, count, n)
        for name, seconds in best.items():
            print(f"  {name:8s} {seconds:7.2f} s  {n / seconds:12,.0f} samples/s")
        share = best["tarfile"] / best["capgeo"]
        print(f"capgeo reads captions at {share:.0%} of plain tarfile's speed (goal >= {GOAL:.0%}): "
              f"{'ok' if share >= GOAL else 'BELOW GOAL'}; load_captions at {best['tarfile'] / best['load']:.0%}")

        peaks = {}
        for image_kb in (1, args.image_kb):
            small = root / f"memory-{image_kb}"
            write_shards(small, 2, min(args.samples, 2000), image_kb * 1000)
            tracemalloc.start()
            read_webdataset(find_shards(small), ColumnChoice(), small, progress=False)
            peaks[image_kb] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            shutil.rmtree(small)
        print("peak Python memory while reading: " + ", ".join(
            f"{kb} KB images {peak / 1e6:.2f} MB" for kb, peak in peaks.items()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
