"""Benchmark: `capgeo truncation`'s encoding of several lengths against one full encode.

Same captions (the first --docci DOCCI test captions, default 128: long, like DCI's),
same process, no cache:

  full     one full-context encode (``encoder.encode``; CLIP towers run the trimmed forward)
  lengths  every length with ``embed_lengths`` (what `capgeo truncation` runs): one forward
           for a causal CLIP tower (the end token alone at each shorter length), and for
           any other encoder one pass per length over the captions that length cuts
  each     the encode per length that `truncation` ran before: ``encoder.encode(texts,
           max_tokens=L)`` at every length, the full context included

Encoders: random-weight CLIP text towers (no downloads) at context 77 (lengths 32, 64, 77)
and 248 (Long-CLIP's: 32, 64, 77, 128, 248), and the embedded default all-MiniLM-L6-v2
(context 256: 32, 64, 77, 128, 248, 256). Printed per encoder: seconds of each (best of
--repeats), the ratios to one full encode, the captions encoded per length, and the largest
absolute difference between ``embed_lengths``'s vectors and encoding each length directly.
Goals (issue #31): a CLIP tower's lengths within 2x one full encode; the default's within
the sum over lengths of the captions each cuts (``cut-only bound``: one full encode plus,
per length, an encode of just the captions it cuts, timed separately).

    python bench/bench_truncation.py                      # ViT-B-16 text tower (512 wide, 12 layers)
    python bench/bench_truncation.py --layers 4 --docci 64   # quicker
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_encode import TOWERS, build_encoder  # noqa: E402


def clip_encoder(args, context_length: int):
    """bench_encode's random-weight tower, on the CPU."""
    return build_encoder(argparse.Namespace(**vars(args), device="cpu"), context_length)[1]


def best(repeats: int, work):
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return min(times), result


def measure(label: str, encoder, texts, lengths, repeats: int) -> dict:
    import numpy as np

    from capgeo.encoders.lengths import embed_lengths

    context = encoder.info.context_length
    counts = encoder.token_counts(texts)        # tokenised once, before any timing (the memo keeps the ids)
    encoder.encode(texts[:4])                   # warm-up: the model built, first-call costs paid
    full_s, _ = best(repeats, lambda: encoder.encode(texts))
    lengths_s, by_length = best(repeats, lambda: embed_lengths(texts, encoder, lengths, use_cache=False,
                                                                progress=False))
    path = getattr(getattr(encoder, "last_stats", None), "path", "per length")
    each_s, direct = best(repeats, lambda: {length: encoder.encode(texts, max_tokens=length)
                                            for length in sorted({*lengths, context})})
    cut_only_s = full_s
    for length in sorted(lengths):
        cut = [text for text, count in zip(texts, counts) if count > length]
        if cut and length < context:
            cut_only_s += best(repeats, lambda: encoder.encode(cut, max_tokens=length))[0]
    difference = max(float(np.abs(by_length[length].vectors - direct[length]).max()) for length in direct)
    row = {
        "encoder": label, "captions": len(texts), "lengths": sorted({*lengths, context}), "path": path,
        "full_s": round(full_s, 3), "lengths_s": round(lengths_s, 3), "each_s": round(each_s, 3),
        "cut_only_bound_s": round(cut_only_s, 3),
        "lengths_over_full": round(lengths_s / full_s, 2), "each_over_full": round(each_s / full_s, 2),
        "cut_per_length": {int(length): int((counts > length).sum()) for length in sorted(lengths) if length < context},
        "max_abs_difference": difference,
    }
    print(f"{label}: {len(texts)} captions, lengths {row['lengths']} ({path})\n"
          f"  one full encode {full_s:.2f} s | all lengths {lengths_s:.2f} s = {row['lengths_over_full']:.2f}x | "
          f"encode per length {each_s:.2f} s = {row['each_over_full']:.2f}x | cut-only bound {cut_only_s:.2f} s\n"
          f"  captions cut per length {row['cut_per_length']}; max |difference| to direct encodes {difference:.2e}",
          flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(TOWERS), default="ViT-B-16")
    parser.add_argument("--layers", type=int, default=None, help="text tower depth (default: the model's)")
    parser.add_argument("--docci", type=int, default=128, help="DOCCI captions (default 128)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--skip-default", action="store_true", help="leave out the embedded default encoder")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    records = json.loads((SHARED_DATA / "docci-test" / "docci_test.json").read_text(encoding="utf-8"))
    texts = [record["caption"] for record in records[:args.docci]]
    from capgeo.findings.truncation import DEFAULT_LENGTHS

    rows = []
    for context in (77, 248):
        lengths = [length for length in DEFAULT_LENGTHS if length < context]
        rows.append(measure(f"CLIP tower, context {context}", clip_encoder(args, context), texts, lengths,
                            args.repeats))
    if not args.skip_default:
        from capgeo.encoders import get_encoder

        encoder = get_encoder(None)
        lengths = [length for length in DEFAULT_LENGTHS if length < encoder.info.context_length]
        rows.append(measure("embedded default all-MiniLM-L6-v2", encoder, texts, lengths, args.repeats))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
