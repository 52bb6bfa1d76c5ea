"""The package's import graph: no cycles, and no import runs back up the data flow
(captions -> encoders -> geometry -> findings -> report -> cli), counting imports made
inside functions too, since those run as soon as the function does."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "capgeo"
LAYERS = ("captions", "encoders", "geometry", "findings", "report", "cli")


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
