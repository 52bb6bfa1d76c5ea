"""GPU benchmark of the all-pairs pass: capgeo against the raw matrix product + top-k, in one process.

For each N (default 100,000 and 1,000,000 synthetic unit vectors of width 768, five
captions per image) it times, on the same device and in the same process:

* raw fp32: ``X[rows] @ X.T`` + ``topk(k + 1)`` over every row, 8192-row blocks, TF32 off;
* raw bf16: the same with a bf16 copy of X (bf16 products and top-k);
* capgeo's exact pass, ``scan_pairs`` (fp32; tiles sized from the device), and its
  ``tf32`` / ``bf16`` precisions (companions exact: candidates near each caption's k-th
  re-scored from the float32 vectors, the pairs re-scored counted; the histogram's error
  is stated);

then the end-to-end ``capgeo profile --encoder vectors:EMB.npy --mode exact --no-gamma``
at ``--profile-n`` captions in a fresh process (vectors and a captions CSV written to a
temporary folder first), the steps around its pass each timed alone (a fresh process's
start-up, reading the captions, reading the vectors, moving them to the device), and an
extrapolation to 10,000,000 captions. Last, where the pass's time goes: one pass per
precision at ``--breakdown-n`` captions under torch.profiler, its operators by device time.

The raw products at large N are timed over their first ``--raw-rows`` rows and scaled
to all N rows (their cost is the same for every row block); the table says so.

    python bench/bench_gpu.py --json gpu.json              # H200: about 3-4 minutes
    python bench/bench_gpu.py --quick --json quick.json    # checks the script: about a minute on 2 CPU cores

Needs torch, numpy and capgeo's own dependencies (polars among them: carry its wheel to a machine
without it); capgeo is imported from this checkout, installed or not. The numbers are written to
--json after every stage, so a run stopped at a device's time limit keeps what it measured; a
stage that fails (the end-to-end profile, the breakdown) is reported and the run goes on.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))  # capgeo from this checkout (a lent GPU machine has it uninstalled)
RAW_BLOCK = 8192
TARGET_LARGE = 10_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated N (default 100000,1000000)")
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--precisions", default="fp32,tf32,bf16", help="capgeo precisions to time")
    parser.add_argument("--tf32-up-to", type=int, default=200_000,
                        help="time tf32 only up to this N (keeps the default run under 4 minutes on an H200)")
    parser.add_argument("--raw-rows", type=int, default=131_072,
                        help="rows of the raw products timed at large N (scaled to N; 0: all rows)")
    parser.add_argument("--profile-n", type=int, default=1_000_000, help="N of the end-to-end profile (0: skip)")
    parser.add_argument("--breakdown-n", type=int, default=200_000,
                        help="N of the passes timed operator by operator under torch.profiler (0: skip)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (2000,5000; profile 5000): checks the script in a minute on a CPU")
    parser.add_argument("--json", dest="json_path", default=None, help="also write the numbers to this file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.profile_n, args.breakdown_n = "2000,5000", 5_000, 2_000

    bench_started = time.perf_counter()
    if args.json_path:  # a path that cannot be written fails now, not after minutes of device time
        Path(args.json_path).write_text("{}\n")
    import torch

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sizes = [int(size) for size in args.sizes.split(",") if size]
    precisions = [name for name in args.precisions.split(",") if name]
    results = {"device": _device_name(device), "torch": torch.__version__, "width": args.width, "k": args.k,
               "captions_per_image": 5, "passes": [], "profile": None}
    print(f"device {results['device']}, torch {torch.__version__}, width {args.width}, k {args.k}", flush=True)

    def save() -> None:
        if args.json_path:
            results["bench_seconds"] = time.perf_counter() - bench_started
            Path(args.json_path).write_text(json.dumps(results, indent=2) + "\n")

    _warm_up(device, precisions)
    for n in sizes:
        vectors = _unit_vectors(n, args.width, args.seed, device)
        rows = n if args.raw_rows <= 0 else min(n, args.raw_rows)
        entry = {"n": n, "raw_rows_timed": rows}
        entry["raw_fp32_s"] = _raw_product_topk(vectors, args.k, rows, torch.float32)
        entry["raw_bf16_s"] = _raw_product_topk(vectors, args.k, rows, torch.bfloat16)
        if "tf32" in precisions and n <= args.tf32_up_to:  # tf32's own baseline, beside the issue's bf16 one
            entry["raw_tf32_s"] = _raw_product_topk(vectors, args.k, rows, torch.float32, tf32=True)
        for precision in precisions:
            if precision == "tf32" and n > args.tf32_up_to:
                continue
            entry[f"capgeo_{precision}"] = _capgeo_pass(vectors, args.k, precision)
        entry["ratio_fp32"] = entry["capgeo_fp32"]["seconds"] / entry["raw_fp32_s"] if "capgeo_fp32" in entry else None
        for precision in ("tf32", "bf16"):
            if f"capgeo_{precision}" in entry:
                entry[f"ratio_{precision}_to_raw_bf16"] = entry[f"capgeo_{precision}"]["seconds"] / entry["raw_bf16_s"]
        if "raw_tf32_s" in entry and "capgeo_tf32" in entry:
            entry["ratio_tf32_to_raw_tf32"] = entry["capgeo_tf32"]["seconds"] / entry["raw_tf32_s"]
        results["passes"].append(entry)
        _print_pass(entry)
        save()
        del vectors
        _free(device)

    if args.profile_n:
        results["profile"] = _end_to_end_profile(args.profile_n, args.width, args.seed, device)
        print(f"end to end: capgeo profile, N = {args.profile_n:,}, exact: {results['profile']['seconds']:.1f} s",
              flush=True)
        save()

    if args.breakdown_n:
        results["breakdown"] = _pass_breakdown(args.breakdown_n, args.width, args.k, args.seed, device, precisions)
        save()

    largest = max(results["passes"], key=lambda entry: entry["n"]) if results["passes"] else None
    if largest and "capgeo_fp32" in largest:
        factor = (TARGET_LARGE / largest["n"]) ** 2
        results["extrapolated_10m_fp32_s"] = largest["capgeo_fp32"]["seconds"] * factor
    results["bench_seconds"] = time.perf_counter() - bench_started
    _print_summary(results)
    print(f"whole benchmark: {results['bench_seconds']:.0f} s")
    if args.json_path:
        save()
        print(f"numbers written to {args.json_path}")


def _device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _warm_up(device, precisions=()) -> None:
    """cuBLAS and kernel start-up costs, and capgeo's own first-call costs (imports, the first tile of
    each precision), out of the first measurement."""
    import torch

    x = torch.randn(4096, 256, device=device)
    for dtype in (torch.float32, torch.bfloat16):
        y = x.to(dtype)
        torch.topk(y @ y.T, 11, dim=1)
    for precision in precisions:
        _capgeo_pass(_unit_vectors(4096, 64, 0, device), 10, precision)
    _sync(device)


def _unit_vectors(n, width, seed, device):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    vectors = torch.empty((n, width), dtype=torch.float32, device=device)
    for start in range(0, n, 262_144):  # in chunks: no second N x d temporary
        chunk = torch.randn((min(n, start + 262_144) - start, width), generator=generator, device=device)
        vectors[start:start + len(chunk)] = chunk / torch.linalg.vector_norm(chunk, dim=1, keepdim=True)
    return vectors


def _raw_product_topk(vectors, k, rows, dtype, tf32: bool = False) -> float:
    """Seconds for X[:rows] @ X.T + topk(k + 1) in 8192-row blocks, scaled to all N rows (``tf32``:
    float32 products with TF32 allowed)."""
    import torch

    device = vectors.device
    matrix = vectors if dtype == torch.float32 else vectors.to(dtype)
    n = matrix.shape[0]
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32  # plain fp32 unless asked, as capgeo's default
    try:
        with torch.inference_mode():
            _sync(device)
            started = time.perf_counter()
            for start in range(0, rows, RAW_BLOCK):
                product = matrix[start:min(rows, start + RAW_BLOCK)] @ matrix.T
                torch.topk(product, k + 1, dim=1)
                del product
            _sync(device)
            seconds = time.perf_counter() - started
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    del matrix
    _free(device)
    return seconds * n / rows


def _capgeo_pass(vectors, k, precision) -> dict:
    import numpy as np

    from capgeo.geometry.pairwise import scan_pairs

    groups = np.arange(vectors.shape[0]) // 5
    _sync(vectors.device)
    started = time.perf_counter()
    scan = scan_pairs(vectors, groups, top_k=k, device=vectors.device, precision=precision, progress=False)
    seconds = time.perf_counter() - started
    result = {"seconds": seconds, "block_size": scan.block_size, "tiles": scan.extra.get("tiles"),
              "mean": scan.negatives.mean, "std": scan.negatives.std}
    if "precision" in scan.extra:
        result["precision"] = scan.extra["precision"]
    del scan
    _free(vectors.device)
    return result


def _pass_breakdown(n, width, k, seed, device, precisions, rows=12) -> dict:
    """Each precision's pass at ``n`` under torch.profiler: its ``rows`` costliest operators by
    self device time (CPU time on a CPU). A failure is reported, not raised: it must not
    cost the rest of a run on a lent GPU."""
    import numpy as np
    from torch.profiler import ProfilerActivity, profile

    from capgeo.geometry.pairwise import scan_pairs

    vectors = _unit_vectors(n, width, seed, device)
    groups = np.arange(n) // 5
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    timed = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    breakdown = {"n": n, "measure": timed}
    for precision in precisions:
        try:
            with profile(activities=activities) as profiler:
                scan_pairs(vectors, groups, top_k=k, device=device, precision=precision, progress=False)
                _sync(device)
            events = [event for event in profiler.key_averages() if getattr(event, timed, 0) > 0]
            events.sort(key=lambda event: getattr(event, timed), reverse=True)
            total = sum(getattr(event, timed) for event in events) / 1e6
            top = [{"operator": event.key, "seconds": getattr(event, timed) / 1e6, "calls": event.count}
                   for event in events[:rows]]
            breakdown[precision] = {"total_s": total, "operators": top}
            print(f"where the {precision} pass's time goes at N = {n:,} ({timed.replace('_', ' ')}, "
                  f"{total:.2f} s in all):", flush=True)
            for entry in top:
                print(f"  {entry['seconds']:8.3f} s {entry['calls']:>7} calls  {entry['operator']}", flush=True)
        except Exception as error:  # noqa: BLE001 - a diagnostic: report it and go on
            breakdown[precision] = {"error": f"{type(error).__name__}: {error}"}
            print(f"breakdown of the {precision} pass failed: {error}", flush=True)
    del vectors
    _free(device)
    return breakdown


def _end_to_end_profile(n, width, seed, device) -> dict:
    """``capgeo profile`` from precomputed vectors in a fresh process; returns its wall time."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="capgeo-bench-") as folder:
        folder = Path(folder)
        vectors = _unit_vectors(n, width, seed, device).cpu().numpy()
        np.save(folder / "emb.npy", vectors)
        del vectors
        _free(device)
        with open(folder / "captions.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["image", "caption"])
            writer.writerows((f"img{row // 5}", f"synthetic caption number {row}") for row in range(n))
        # the command the issue timed (terminal output, no JSON of a million companion lists)
        command = [sys.executable, "-m", "capgeo", "profile", str(folder / "captions.csv"),
                   "--encoder", f"vectors:{folder / 'emb.npy'}", "--device", device.type, "--mode", "exact",
                   "--no-gamma"]
        environment = dict(os.environ, CAPGEO_CACHE=str(folder / "cache"),
                           PYTHONPATH=os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])))
        started = time.perf_counter()
        completed = subprocess.run(command, env=environment, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        try:  # a diagnostic: its failure must not cost the numbers already measured
            phases = _phases_outside_the_pass(folder, device, environment)
        except Exception as error:  # noqa: BLE001
            phases = {"error": f"{type(error).__name__}: {error}"}
            print(f"  timing the steps outside the pass failed: {phases['error']}", flush=True)
    result = {"n": n, "seconds": seconds, "command": "capgeo " + " ".join(command[3:]), "phases": phases}
    if completed.returncode != 0:
        print(completed.stderr[-4000:], file=sys.stderr)
        result["error"] = (completed.stderr.strip().splitlines() or ["exit code %d" % completed.returncode])[-1]
    return result


def _phases_outside_the_pass(folder: Path, device, environment) -> dict:
    """Seconds of the end-to-end profile's steps around the pass, each timed alone on the same
    files: a fresh process's start-up (imports and device set-up), reading the captions,
    reading and checking the vectors, moving them to the device."""
    import numpy as np

    from capgeo.captions import load_captions
    from capgeo.encoders.precomputed import PrecomputedEncoder
    from capgeo.geometry.pairwise import prepare_inputs

    phases = {}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, capgeo.cli.profile, capgeo.geometry.profile; "
                    f"torch.zeros(1, device={device.type!r}).sum().item()"], env=environment, check=True)
    phases["start_up_s"] = time.perf_counter() - started
    started = time.perf_counter()
    captions = load_captions(folder / "captions.csv")
    phases["captions_s"] = time.perf_counter() - started
    started = time.perf_counter()
    vectors = PrecomputedEncoder(folder / "emb.npy").align(captions.ids)
    phases["vectors_s"] = time.perf_counter() - started
    started = time.perf_counter()
    matrix, _, _ = prepare_inputs(vectors, np.asarray(captions.group_codes), device)
    _sync(device)
    phases["to_device_s"] = time.perf_counter() - started
    del matrix, vectors
    _free(device)
    print("  outside the pass, each step timed alone: " + ", ".join(
        f"{name[:-2].replace('_', ' ')} {value:.1f} s" for name, value in phases.items()), flush=True)
    return phases


def _print_pass(entry: dict) -> None:
    scaled = "" if entry["raw_rows_timed"] == entry["n"] else f" (timed on {entry['raw_rows_timed']:,} rows, scaled)"
    tf32 = f", raw tf32 {entry['raw_tf32_s']:.2f} s" if "raw_tf32_s" in entry else ""
    print(f"N = {entry['n']:,}: raw fp32 {entry['raw_fp32_s']:.2f} s, raw bf16 {entry['raw_bf16_s']:.2f} s{tf32}{scaled}",
          flush=True)
    for key, value in entry.items():
        if key.startswith("capgeo_"):
            precision = value.get("precision", {})
            stated = "" if not precision else (
                f", {precision['product']}, cosine error <= {precision['cosine_error_bound']:.2g}, "
                f"{precision['pairs_rescored']:,} pairs "
                f"re-scored, {precision['rows_too_close_to_call']:,} tile rows too close to call")
            print(f"  capgeo {key[7:]}: {value['seconds']:.2f} s (block {value['block_size']}, "
                  f"{value['tiles']} tiles{stated})", flush=True)


def _print_summary(results: dict) -> None:
    print()
    print(f"Summary ({results['device']}, width {results['width']}, k {results['k']}, 5 captions per image)")
    header = f"{'N':>10} {'raw fp32':>9} {'raw bf16':>9} {'capgeo fp32':>12} {'x raw fp32':>10}"
    extra = sorted({key[7:] for entry in results["passes"] for key in entry
                    if key.startswith("capgeo_") and key != "capgeo_fp32"})
    for precision in extra:
        header += f" {'capgeo ' + precision:>12} {'x raw bf16':>10}"
        if precision == "tf32":  # the goal is against raw bf16; against its own product too
            header += f" {'x raw tf32':>10}"
    print(header)
    for entry in results["passes"]:
        line = f"{entry['n']:>10,} {entry['raw_fp32_s']:>8.2f}s {entry['raw_bf16_s']:>8.2f}s"
        fp32 = entry.get("capgeo_fp32")
        line += f" {fp32['seconds']:>11.2f}s {entry['ratio_fp32']:>9.2f}x" if fp32 else f" {'-':>12} {'-':>10}"
        for precision in extra:
            value = entry.get(f"capgeo_{precision}")
            line += (f" {value['seconds']:>11.2f}s {value['seconds'] / entry['raw_bf16_s']:>9.2f}x" if value
                     else f" {'-':>12} {'-':>10}")
            if precision == "tf32":
                ratio = entry.get("ratio_tf32_to_raw_tf32")
                line += f" {ratio:>9.2f}x" if ratio is not None else f" {'-':>10}"
        print(line)
    profile = results.get("profile")
    if profile:
        print(f"capgeo profile end to end, N = {profile['n']:,} (exact, from precomputed vectors): "
              f"{profile['seconds']:.1f} s" + (f"  ERROR {profile['error']}" if profile.get("error") else ""))
    if results.get("extrapolated_10m_fp32_s") is not None:
        seconds = results["extrapolated_10m_fp32_s"]
        print(f"exact fp32 pass at N = 10,000,000 (quadratic extrapolation): {seconds:.0f} s = {seconds / 60:.0f} min")


if __name__ == "__main__":
    main()
