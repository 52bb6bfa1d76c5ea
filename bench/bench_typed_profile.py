"""Benchmark: the typed profile's codec (``Profile.from_dict`` / ``to_dict``) on a big profile.

Takes a saved profile (default reports/coco_sample.profile.json), gives it a synthetic
companions section of N captions (``--captions``, default 200,000, top-k lists of 5: the
million-entry lists the C-level shortcuts of capgeo.geometry.typed_profile are for), and
prints the best of ``--repeat`` reads and writes, and of round trips of the saved profiles
in reports/. Run it from a checkout (or with another checkout first on PYTHONPATH) to
compare two versions of the module on one machine.

    python bench/bench_typed_profile.py [--captions 200000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capgeo.geometry.typed_profile import Profile  # noqa: E402


def big_profile(base: dict, n: int, k: int = 5) -> dict:
    rng = random.Random(0)
    ids = [f"c{i}" for i in range(n)]
    return {**base, "companions": {
        "caption_id": ids, "hardest_id": [ids[(i + 1) % n] for i in range(n)],
        "hardest_cosine": [rng.random() for _ in range(n)], "top_k": k,
        "top_ids": [[ids[(i + j) % n] for j in range(1, k + 1)] for i in range(n)],
        "top_cosines": [[rng.random() for _ in range(k)] for _ in range(n)]}}


def best(repeat: int, work) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "reports" / "coco_sample.profile.json"))
    parser.add_argument("--captions", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    data = big_profile(json.loads(Path(args.profile).read_text(encoding="utf-8")), args.captions)
    typed = Profile.from_dict(data)
    assert typed.to_dict() == data
    saved = [json.loads(path.read_text(encoding="utf-8")) for path in sorted((ROOT / "reports").glob("*.profile.json"))]
    read = best(args.repeat, lambda: Profile.from_dict(data))
    write = best(args.repeat, typed.to_dict)
    trips = best(args.repeat, lambda: [Profile.from_dict(d).to_dict() for d in saved * 10])
    print(f"{args.captions:,}-caption companions: from_dict {read * 1000:.1f} ms, to_dict {write * 1000:.1f} ms; "
          f"{len(saved)} saved profiles x10 round trips {trips * 1000:.1f} ms (best of {args.repeat})")


if __name__ == "__main__":
    main()
