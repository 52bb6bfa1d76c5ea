"""Benchmark: how long a user waits before the first embedding, beside how long encoding takes.

Builds random-weight checkpoints itself (no weights downloaded or carried) in a
temporary folder. Needs capgeo's dependencies, open_clip_torch (with ftfy and wcwidth)
and polars among them: a machine without them needs their wheels carried. capgeo is
imported from this checkout, installed or not.
  vit-l-14    an open_clip ViT-L-14-sized CLIP state dict (both towers), config beside it
  longclip-l  a Long-CLIP-L-sized state dict (OpenAI key layout, both towers, two 248-row
              positional tables, as Long-CLIP's own model code saves it)

and runs ``capgeo encode CAPTIONS --encoder CHECKPOINT`` as a fresh process for each:
  cold      empty cache folder (nothing remembered: weights hashed, model built, all encoded)
  no-cache  the same command again with --no-cache (weight fingerprint remembered, all encoded)
  hit       the same command again on the cold run's cache (every vector from the cache)

Before them, a throwaway run (its own cache folder) compiles the Python bytecode that an
installed environment has (``PYTHONPYCACHEPREFIX`` points every run at one folder, so it
works where site-packages is read-only); ``--no-warm-up`` leaves it out, and then "cold"
also pays for compiling every module (6.3 s of a 20 s cold start on the H200 image, whose
site-packages ship without .pyc).

The wall time of each process (process start to exit, vectors written) is printed
beside the encoding time measured in this process with the model already loaded
(tokenising + forward), so start-up / encoding is visible.

    python bench/bench_startup.py                                   # CPU, small towers, 256 captions
    python bench/bench_startup.py --device cuda --limit 0 --text-layers 12 --vision-layers 24
                                                                    # the H200 DOCCI case: full sizes, 5,100 captions

On CPU the defaults keep it short (4 text / 2 vision layers, 256 captions); the
file sizes printed say how large the checkpoints were. Goals (issue 15): on the
GPU DOCCI case with Long-CLIP-L, cold end to end < 8 s and a cache hit < 2 s; on
CPU a cache hit of the DOCCI captions with a Long-CLIP-L-sized checkpoint < 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CAPTIONS = ROOT.parent / "shared" / "data" / "docci-test" / "docci_test.json"
#: used when the shared captions are not beside the checkout (a copy on a lent machine): 300 DOCCI captions
FALLBACK_CAPTIONS = ROOT / "data" / "docci_sample.jsonlines"
MODELS = ("vit-l-14", "longclip-l")
# ViT-L-14: text tower 768 wide, 12 heads, 12 layers; vision tower 1024 wide, 24 layers, patch 14
VIT_L_14 = {"embed_dim": 768, "quick_gelu": True,
            "vision_cfg": {"image_size": 224, "layers": 24, "width": 1024, "patch_size": 14},
            "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 768, "heads": 12, "layers": 12}}
LONGCLIP_CONTEXT = 248


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    parser.add_argument("--captions", type=Path, default=DEFAULT_CAPTIONS,
                        help="caption file capgeo can read (default: the shared DOCCI test captions, else the "
                             "repository's 300-caption DOCCI sample)")
    parser.add_argument("--limit", type=int, default=256, help="first N captions; 0 = all (default 256)")
    parser.add_argument("--text-layers", type=int, default=4, help="text tower depth (ViT-L-14 / Long-CLIP-L: 12)")
    parser.add_argument("--vision-layers", type=int, default=2, help="vision tower depth (ViT-L-14: 24)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--workdir", type=Path, default=None, help="where checkpoints and caches go (default: temp)")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="skip the throwaway first run that compiles Python bytecode (then 'cold' also pays "
                             "for compiling every module, as the very first start after an install without .pyc)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", dest="json_out", type=Path, default=None, help="also write the results here")
    # internal: one cold start, step by step, in a fresh process (see cold_timeline)
    parser.add_argument("--timeline-of", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timeline-cache", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = [name.strip().lower() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in args.models if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    return args


def model_config(args) -> dict:
    config = json.loads(json.dumps(VIT_L_14))
    config["text_cfg"]["layers"] = args.text_layers
    config["vision_cfg"]["layers"] = args.vision_layers
    return config


def random_state_dict(config: dict, seed: int) -> dict:
    """A random state dict with exactly the keys and shapes of open_clip's CLIP for ``config``.

    The model is built on the meta device (no memory, no init cost); tensors are then drawn
    directly, so a 1.7 GB checkpoint takes seconds, not the minute a full init would.
    """
    import open_clip
    import torch

    with torch.device("meta"):
        model = open_clip.CLIP(**config)
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, meta in model.state_dict().items():
        if key == "logit_scale":
            state[key] = torch.tensor(4.6052)
        elif key.endswith(("ln_1.weight", "ln_2.weight", "ln_final.weight", "ln_pre.weight", "ln_post.weight")):
            state[key] = torch.ones(meta.shape)
        elif "positional_embedding" in key:
            state[key] = torch.randn(meta.shape, generator=generator) * 0.5  # positions must matter
        else:
            state[key] = torch.randn(meta.shape, generator=generator) * 0.02
    return state


def write_checkpoints(args, folder: Path) -> dict[str, Path]:
    import torch

    config = model_config(args)
    paths = {}
    if "vit-l-14" in args.models:
        state = random_state_dict(config, args.seed)
        path = folder / "vit-l-14-random.pt"
        torch.save(state, path)
        # the config beside the checkpoint tells capgeo the model (see capgeo/encoders/openclip.py)
        path.with_suffix(".json").write_text(json.dumps(config))
        paths["vit-l-14"] = path
        del state
    if "longclip-l" in args.models:
        long_config = json.loads(json.dumps(config))
        long_config["text_cfg"]["context_length"] = LONGCLIP_CONTEXT
        state = random_state_dict(long_config, args.seed + 1)
        generator = torch.Generator().manual_seed(args.seed + 2)
        state["positional_embedding_res"] = torch.randn(state["positional_embedding"].shape, generator=generator) * 0.5
        path = folder / "longclip-L-random.pt"   # "longclip" in the name: capgeo reads it as Long-CLIP
        torch.save(state, path)
        paths["longclip-l"] = path
        del state
    return paths


def run_capgeo(args, checkpoint: Path, cache: Path, output: Path, *extra: str) -> dict:
    """One `capgeo encode` process; its wall time and its own JSON summary."""
    summary_file = output.with_suffix(".json")
    command = [sys.executable, "-m", "capgeo", "encode", str(args.captions), "--encoder", str(checkpoint),
               "--device", args.device, "--cache-dir", str(cache), "-o", str(output), "--json", str(summary_file),
               *extra]
    if args.limit:
        command += ["--limit", str(args.limit)]
    result, wall = _timed_process(args, command, "capgeo encode", CAPGEO_CACHE=str(cache))
    summary = json.loads(summary_file.read_text())
    return {"wall_s": round(wall, 3), "origin": summary["origin"], "embed_s": summary["seconds"]}


def _timed_process(args, command: list[str], what: str, **environment: str):
    """Run ``command`` as a fresh process with this checkout importable: (result, wall seconds)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               **environment)
    if getattr(args, "bytecode_folder", None) is not None:
        # compiled modules go (and are found) here even where site-packages is read-only, and are
        # written even where the environment says not to (this machine sets PYTHONDONTWRITEBYTECODE;
        # the H200 image compiled its modules on every start): an install compiles them once
        env["PYTHONPYCACHEPREFIX"] = str(args.bytecode_folder)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{what} failed ({result.returncode}):\n{result.stderr.strip()}")
    return result, wall


def in_process_encoding(args, checkpoint: Path, texts: list[str], cache: Path) -> dict:
    """Load once (fingerprint remembered in ``cache``), then time tokenising, and tokenising with
    the forward, with the model loaded."""
    import numpy as np

    from capgeo.encoders.registry import get_encoder

    started = time.perf_counter()
    encoder = get_encoder(str(checkpoint), device=args.device, cache_dir=cache)
    getattr(encoder, "model", None)  # builds the model where loading is lazy
    encoder.token_counts(texts[:1])  # and the tokenizer
    load = time.perf_counter() - started
    encoder.encode(texts[:64])  # warm-up: kernels, allocator
    _clear_token_memo(encoder)
    started = time.perf_counter()
    counts = encoder.token_counts(texts)
    tokenize = time.perf_counter() - started
    _clear_token_memo(encoder)
    started = time.perf_counter()
    encoder.encode(texts)
    _synchronize(args.device)
    encode = time.perf_counter() - started
    # the same again: every batch shape has been run once now, so what the first run paid per
    # new shape (kernel selection, lazy loading, attention plans) shows as the difference
    _clear_token_memo(encoder)
    started = time.perf_counter()
    encoder.encode(texts)
    _synchronize(args.device)
    again = time.perf_counter() - started
    return {"load_s": round(load, 3), "tokenize_s": round(tokenize, 3), "encode_s": round(encode, 3),
            "encode_again_s": round(again, 3),
            # tokens the model sees: a 77-token tower cuts longer captions
            "mean_tokens": round(float(np.minimum(counts, encoder.info.context_length).mean()), 1)}


def cold_timeline(args, checkpoint: Path, cache: Path) -> dict:
    """A cold start split into its steps, in a fresh process with bytecode compiled: the steps
    `capgeo encode` takes, in its order, each timed to the next (a GPU synchronised after each).

    Without a profiler's overhead (which inflates the Python-heavy steps), so the
    steps add up to about the cold run's wall time.
    """
    command = [sys.executable, str(Path(__file__).resolve()), "--timeline-of", str(checkpoint),
               "--timeline-cache", str(cache), "--device", args.device, "--captions", str(args.captions),
               "--limit", str(args.limit)]
    result, wall = _timed_process(args, command, "cold timeline")
    steps = json.loads(result.stdout.strip().splitlines()[-1])
    return {"wall_s": round(wall, 3), "steps": steps}


def _timeline_child(args) -> int:
    """The child of :func:`cold_timeline`: prints one JSON line of (step, seconds)."""
    steps = []
    mark = [time.perf_counter()]

    def step(name):
        if args.device.startswith("cuda") and "torch" in sys.modules:
            sys.modules["torch"].cuda.synchronize()
        now = time.perf_counter()
        steps.append([name, round(now - mark[0], 3)])
        mark[0] = now

    sys.path.insert(0, str(ROOT))
    from capgeo.encoders.registry import get_encoder

    step("import capgeo")
    texts = load_texts(args)
    step("read captions")
    encoder = get_encoder(str(args.timeline_of), device=args.device, cache_dir=args.timeline_cache)
    step("fingerprint (weights hashed, open_clip imported meanwhile)")
    encoder.token_counts(texts)
    step("tokenize all captions")
    import torch

    step("import torch (if not yet)")
    if args.device.startswith("cuda"):
        torch.cuda.init()
        torch.empty(1, device=args.device)
        step("CUDA context")
    getattr(encoder, "model")
    step("build text tower (read weights, to device)")
    encoder.encode(texts[:64])
    step("first batch of 64 (first kernels)")
    encoder.encode(texts[64:])
    step("the other captions")
    print(json.dumps(steps))
    return 0


def _clear_token_memo(encoder) -> None:
    # encode() should pay for its own tokenising, as in a real run
    memo = getattr(encoder, "_memo", None)
    if isinstance(memo, dict):
        memo.clear()
    if hasattr(encoder, "_bpe"):
        encoder._bpe = None  # and the per-word memo: a fresh process starts without it


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def load_texts(args) -> list[str]:
    from capgeo.captions import load_captions

    captions = load_captions(str(args.captions))
    texts = list(captions.texts)
    return texts[:args.limit] if args.limit else texts


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.captions.exists() and args.captions == DEFAULT_CAPTIONS and FALLBACK_CAPTIONS.exists():
        print(f"{DEFAULT_CAPTIONS} not found: using {FALLBACK_CAPTIONS.relative_to(ROOT)} (300 captions)", flush=True)
        args.captions = FALLBACK_CAPTIONS
    if not args.captions.exists():
        raise SystemExit(f"captions not found: {args.captions} (pass --captions FILE)")
    if args.timeline_of is not None:
        return _timeline_child(args)
    sys.path.insert(0, str(ROOT))
    import torch

    torch.manual_seed(args.seed)
    texts = load_texts(args)
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="capgeo-bench-startup-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        checkpoints = write_checkpoints(args, folder)
        print(f"device {args.device}; {len(texts)} captions from {args.captions}; text layers {args.text_layers}, "
              f"vision layers {args.vision_layers}; checkpoints written in {time.perf_counter() - started:.1f} s")
        args.bytecode_folder = folder / "bytecode"
        results = []
        for name, checkpoint in checkpoints.items():
            cache = folder / f"cache-{name}"
            row = {"model": name, "checkpoint_mb": round(checkpoint.stat().st_size / 2**20, 1)}
            if args.warm_up:
                # an installed environment has its modules compiled: a first run in a throwaway cache
                # folder compiles them (and nothing it remembers reaches the runs timed below)
                row["warm_up"] = run_capgeo(args, checkpoint, folder / f"warm-up-{name}", folder / f"{name}-warm.npy")
            row["cold"] = run_capgeo(args, checkpoint, cache, folder / f"{name}-cold.npy")
            row["no_cache"] = run_capgeo(args, checkpoint, cache, folder / f"{name}-nocache.npy", "--no-cache")
            row["hit"] = run_capgeo(args, checkpoint, cache, folder / f"{name}-hit.npy")
            row["cold_timeline"] = cold_timeline(args, checkpoint, folder / f"timeline-{name}")
            row["in_process"] = in_process_encoding(args, checkpoint, texts, cache)
            results.append(row)
            print_row(row)
    if args.json_out:
        args.json_out.write_text(json.dumps({"device": args.device, "captions": len(texts), "results": results},
                                            indent=2))
    return 0


def print_row(row: dict) -> None:
    inner = row["in_process"]
    encoding = inner["encode_s"]  # tokenising included
    print(f"\n{row['model']}  ({row['checkpoint_mb']} MB checkpoint, mean {inner['mean_tokens']} tokens)")
    if "warm_up" in row:
        print(f"  first start, compiling Python bytecode (throwaway cache, not counted below): "
              f"{row['warm_up']['wall_s']:.2f} s")
    print(f"  in process: load {inner['load_s']:.2f} s (model + tokenizer, fingerprint remembered); "
          f"then tokenize {inner['tokenize_s']:.2f} s, tokenize+forward {inner['encode_s']:.2f} s "
          f"({inner['encode_again_s']:.2f} s the second time, every batch shape seen)")
    timeline = row["cold_timeline"]
    print(f"  cold start step by step (a fresh process, {timeline['wall_s']:.2f} s in all; "
          f"{sum(seconds for _, seconds in timeline['steps']):.2f} s in these steps):")
    for name, seconds in timeline["steps"]:
        print(f"    {seconds:6.2f} s  {name}")
    for label in ("cold", "no_cache", "hit"):
        run = row[label]
        startup = run["wall_s"] - (inner["encode_s"] if run["origin"] != "cache" else 0.0)
        print(f"  {label:<8} process wall {run['wall_s']:6.2f} s  (origin {run['origin']:<7}; "
              f"start-up {startup:6.2f} s = {startup / max(encoding, 1e-9):5.1f} x encoding)")


if __name__ == "__main__":
    sys.exit(main())
