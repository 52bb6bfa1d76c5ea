"""The package's import graph: no cycles, and no import runs back up the data flow
(captions -> encoders -> geometry -> findings -> report -> terminal -> cli), counting imports made
inside functions too, since those run as soon as the function does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "capgeo"
LAYERS = ("captions", "encoders", "geometry", "findings", "report", "terminal", "cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            targets.update(target for target in names if target in modules and target != name)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            # a package's __init__ re-exporting its own modules is not a cycle through them
            if node.startswith(target + "."):
                continue
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle():
    graph = import_graph()
    assert "capgeo.encoders.base" in graph["capgeo.encoders.minilm"]  # the graph sees imports
    assert find_cycle(graph) is None


def test_no_import_runs_back_up_the_data_flow():
    upward = sorted(f"{source} -> {target}" for source, targets in import_graph().items() for target in targets
                    if layer(source) is not None and layer(target) is not None and layer(target) > layer(source))
    assert upward == []


def test_help_imports_no_numerical_library():
    """`capgeo --help` and each command's --help read every option's default: those defaults live in
    capgeo.defaults, so listing them imports neither numpy nor polars (about a second here)."""
    import subprocess
    import sys

    from capgeo.cli import COMMANDS

    heavy = ("numpy", "polars", "torch", "plotly", "scipy", "open_clip")
    script = ("import sys; from click.testing import CliRunner; from capgeo.cli import main; "
              "names = sys.argv[1:]; result = CliRunner().invoke(main, names + ['--help']); "
              "assert result.exit_code == 0, result.output; "
              f"print(','.join(sorted(m for m in {heavy!r} if m in sys.modules)))")
    for command in ["", *COMMANDS]:
        loaded = subprocess.run([sys.executable, "-c", script, *([command] if command else [])],
                                capture_output=True, text=True, timeout=120)
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stdout.strip() == "", f"capgeo {command} --help imported {loaded.stdout.strip()}"


#: run in a fresh interpreter: records which capgeo module each import of a heavy library comes from (an
#: import statement calls builtins.__import__ even when the module is loaded, so every importer is seen),
#: the innermost capgeo code on the stack (a third-party module's import counts against its caller)
_WATCH_IMPORTS = r"""
import builtins, json, sys
HEAVY = ("torch", "open_clip", "transformers", "sentence_transformers", "scipy", "polars")
importers = {}
original = builtins.__import__

def capgeo_caller():
    innermost = None
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if innermost is None and (name == "capgeo" or name.startswith("capgeo.")):
            innermost = name
        frame = frame.f_back
    return innermost or "(outside capgeo)"

def watching(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name.split(".")[0] in HEAVY:
        importers.setdefault(name.split(".")[0], set()).add(capgeo_caller())
    return original(name, globals, locals, fromlist, level)

builtins.__import__ = watching
from capgeo.__main__ import run
sys.argv = ["capgeo", *sys.argv[1:]]
try:
    run()
except SystemExit as ended:
    assert not ended.code, ended.code
loaded = {name: sorted(importers.get(name, ())) for name in HEAVY if name in sys.modules}
sys.stderr.write("IMPORTS " + json.dumps(loaded) + "\n")
"""


def _profile_imports(arguments: list[str], cache: Path) -> dict[str, list[str]]:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "CAPGEO_CACHE": str(cache), "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run([sys.executable, "-c", _WATCH_IMPORTS, "profile", *arguments], capture_output=True,
                          text=True, timeout=600, env=env, cwd=PACKAGE.parent)  # -c puts the folder first
    assert done.returncode == 0, done.stderr
    return json.loads(done.stderr.rsplit("IMPORTS ", 1)[1])


def _check_cpu_profile_imports(loaded: dict[str, list[str]]) -> None:
    for name in ("open_clip", "transformers", "sentence_transformers"):
        assert name not in loaded, f"{name} imported by {loaded[name]}"
    # scipy's import takes most of a second; the exact pass and the gamma section need none of it
    assert "scipy" not in loaded, f"scipy imported by {loaded['scipy']}"
    # on a CPU the pass runs on numpy: torch's import alone is seconds
    assert "torch" not in loaded, f"torch imported by {loaded['torch']}"
    # captions read record by record (text, JSON lines, CSV) stay Python lists: polars' import is a fifth of a
    # second, as long as the pass over 5,000 captions
    assert "polars" not in loaded, f"polars imported by {loaded['polars']}"


def test_a_vectors_profile_imports_no_model_library_and_no_torch(tmp_path):
    """`capgeo profile --encoder vectors:FILE`, gamma and JSON included, on a machine without a GPU
    (no --device: the default device is found without torch)."""
    import os

    import numpy as np

    from capgeo.device import GPU_DEVICE_FILES

    if any(os.path.exists(path) for path in GPU_DEVICE_FILES):
        pytest.skip("this machine has a GPU: the default device is asked of torch")

    rows = np.random.default_rng(0).standard_normal((120, 16)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", rows / np.linalg.norm(rows, axis=1, keepdims=True))
    (tmp_path / "captions.txt").write_text("".join(f"caption number {i}\n" for i in range(120)))
    loaded = _profile_imports([str(tmp_path / "captions.txt"), "--encoder", f"vectors:{tmp_path / 'vectors.npy'}",
                               "--batch-size", "64", "--json", str(tmp_path / "p.json")],
                              tmp_path / "cache")
    _check_cpu_profile_imports(loaded)


def test_a_cache_hit_profile_imports_no_model_library_and_no_torch(tmp_path, monkeypatch):
    """A profile whose vectors are all in the cache (the embedded default encoder, written there by a stand-in
    for its model) builds no model: no sentence_transformers, transformers or open_clip, and on a CPU no torch."""
    import numpy as np

    from capgeo.captions import load_captions
    from capgeo.encoders import embed
    from capgeo.encoders.minilm import MiniLMEncoder

    def stand_in_vectors(self, texts, **options):
        rows = np.random.default_rng(len(texts)).standard_normal((len(texts), self.info.width))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)

    monkeypatch.setattr(MiniLMEncoder, "encode", stand_in_vectors)
    monkeypatch.setattr(MiniLMEncoder, "token_counts", lambda self, texts: np.asarray([len(t.split()) for t in texts]))
    (tmp_path / "captions.txt").write_text("".join(f"caption number {i}\n" for i in range(120)))
    assert embed(load_captions(tmp_path / "captions.txt"), None, cache_dir=tmp_path / "cache").origin == "encoded"
    loaded = _profile_imports([str(tmp_path / "captions.txt"), "--batch-size", "64", "--device", "cpu",
                               "--cache-dir", str(tmp_path / "cache")], tmp_path / "cache")
    _check_cpu_profile_imports(loaded)
