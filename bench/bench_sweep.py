"""Benchmark: `capgeo gamma --sweep` on precomputed vectors against a plain torch loop of the same
adapter and loss.

    python bench/bench_sweep.py                        # synthetic: 5,000 image-text pairs, width 512
    python bench/bench_sweep.py --pairs 5000 --steps 300 --width 384

The sweep (capgeo.findings.gamma_sweep.gamma_sweep: 5 grid gammas and a rule gamma, 3 seeds, its
default steps and batch 128, with the held-out evaluation and the per-step saturation bookkeeping)
and the plain loop (for each gamma and seed: a zero-initialised residual linear adapter on the text
side, Adam, capgeo.HNCLIPLoss on random batches, no evaluation) run in this one process on the same
vectors, so a loaded machine slows both alike. The torch threads are the sweep's (one on a CPU)
for both.
Goal (issue #49 item 3): 5,000 pairs x 6 gammas x 3 seeds in under 10 minutes on the 2-core CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL_SECONDS = 600.0


def pairs(n, width, seed=0):
    """Image vectors and one caption each, the caption a noisy copy of its image."""
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(n, width))
    texts = images + 1.5 * rng.normal(size=(n, width))
    unit = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    return unit(texts), np.arange(n), unit(images)


def plain_loop(texts, images, gammas, seeds, steps, batch_size, device):
    """What a user would write: one adapter and Adam per (gamma, seed), HNCLIPLoss on random batches."""
    import torch
    from torch.nn import functional as F

    from capgeo import HNCLIPLoss

    texts, images = torch.as_tensor(texts, device=device), torch.as_tensor(images, device=device)
    for gamma in gammas:
        loss_fn = HNCLIPLoss(gamma, 100.0)
        for seed in seeds:
            generator = torch.Generator().manual_seed(seed)
            weight = torch.zeros(texts.shape[1], texts.shape[1], device=device, requires_grad=True)
            optimizer = torch.optim.Adam([weight], lr=1e-3)
            for _ in range(steps):
                rows = torch.randperm(len(texts), generator=generator)[:batch_size].to(device)
                text = F.normalize(texts[rows] + texts[rows] @ weight, dim=-1)
                loss = loss_fn(images[rows], text)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--steps", type=int, default=None, help="default: the sweep's")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()

    import torch

    from capgeo.device import default_device
    from capgeo.findings.gamma_sweep import SweepOptions, gamma_sweep

    device = args.device or default_device()
    options = SweepOptions(**({} if args.steps is None else {"steps": args.steps}))
    texts, codes, images = pairs(args.pairs, args.width)
    rule_gamma = 0.1   # a sixth gamma, as the rule's suggestion adds one
    plain_loop(texts, images, [0.5], [0], 2, 128, device)   # torch's first calls, outside both timings
    started = time.perf_counter()
    sweep = gamma_sweep(texts, codes, image_vectors=images, options=options, rule_gamma=rule_gamma,
                        device=device, progress=False)
    sweep_seconds = time.perf_counter() - started
    runs = len(sweep.gammas) * len(sweep.seeds)
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)   # the sweep's choice, so both sides run alike
    started = time.perf_counter()
    plain_loop(texts, images, sweep.gammas, sweep.seeds, options.steps, sweep.batch_size, device)
    plain_seconds = time.perf_counter() - started
    torch.set_num_threads(threads)
    steps = runs * options.steps
    print(f"{args.pairs:,} pairs, width {args.width}, {len(sweep.gammas)} gammas x {len(sweep.seeds)} seeds x "
          f"{options.steps} steps of B {sweep.batch_size} on {device}")
    print(f"sweep (with evaluation and saturation curves): {sweep_seconds:7.1f} s, "
          f"{1000 * sweep_seconds / steps:.1f} ms a step")
    print(f"plain torch loop (same adapter and loss):      {plain_seconds:7.1f} s, "
          f"{1000 * plain_seconds / steps:.1f} ms a step")
    print(f"ratio {sweep_seconds / plain_seconds:.2f}; goal: under {GOAL_SECONDS:.0f} s: "
          f"{'met' if sweep_seconds < GOAL_SECONDS else 'NOT met'}")


if __name__ == "__main__":
    main()
