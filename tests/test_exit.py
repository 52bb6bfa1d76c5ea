"""How the command line ends: the interpreter's own garbage collections at exit are left out (they
walked every object of numpy, polars and the result: 0.1-0.2 s of a 1 s profile), and everything
else an exit does still happens: atexit handlers, the exit status, every output whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from capgeo.__main__ import COLLECTION_THRESHOLDS
from capgeo.captions import load_captions
from capgeo.pipeline import profile_dataset

SCRIPT = textwrap.dedent("""
    import atexit, gc, sys
    # registered first, so it runs last: after capgeo's own handlers
    atexit.register(lambda: sys.stderr.write(f"FROZEN {gc.get_freeze_count()} THRESHOLDS {gc.get_threshold()}\\n"))
    from capgeo.__main__ import run
    sys.argv = ["capgeo", *sys.argv[1:]]
    run()
""")


def _command(tmp_path, *arguments):
    env = {**os.environ, "CAPGEO_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-c", SCRIPT, *arguments], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=600)


def _dataset(tmp_path):
    rows = np.random.default_rng(3).standard_normal((60, 12)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", rows / np.linalg.norm(rows, axis=1, keepdims=True))
    (tmp_path / "captions.jsonl").write_text("".join(json.dumps({"image_id": f"im{i // 3}", "caption": f"caption {i}"})
                                                     + "\n" for i in range(60)))


def _without_provenance(profile: dict) -> dict:
    return {key: value for key, value in profile.items() if key != "provenance"}


def test_a_profile_ends_with_its_output_whole_and_atexit_handlers_run(tmp_path, monkeypatch):
    _dataset(tmp_path)
    monkeypatch.chdir(tmp_path)  # the paths in the result as the command line names them
    done = _command(tmp_path, "profile", "captions.jsonl", "--encoder", "vectors:vectors.npy", "--batch-size", "16",
                    "--device", "cpu", "--json", "out.json")
    assert done.returncode == 0, done.stderr
    assert "Verdict" in done.stdout  # the terminal summary is flushed before the process ends
    frozen = int(done.stderr.rsplit("FROZEN ", 1)[1].split()[0])
    assert frozen > 0  # the objects left at exit are outside the interpreter's last collections
    # the command ran with the command line's thresholds, not Python's
    assert done.stderr.rsplit("THRESHOLDS ", 1)[1].split("\n")[0] == str(COLLECTION_THRESHOLDS)
    written = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    direct = profile_dataset(load_captions("captions.jsonl"), "vectors:vectors.npy", device="cpu", batch_sizes=(16,),
                             use_cache=False).to_dict()
    assert _without_provenance(written) == _without_provenance(json.loads(json.dumps(direct)))


def test_a_failing_command_keeps_its_exit_status_and_error_line(tmp_path):
    done = _command(tmp_path, "profile", "missing.jsonl")
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("Error:")], done.stderr
    assert "Traceback" not in done.stderr and "FROZEN" in done.stderr
