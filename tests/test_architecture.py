"""The shape issue #47 gave the package, held by the source itself: results are typed (no finding
returns a dict), renderers read typed results only, and no function takes a long list of loose
parameters (option objects carry each concern). docs/architecture.md describes the whole."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "capgeo"
#: more loose parameters than this and a function takes an options object instead
MAX_PARAMETERS = 8


def _functions(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(PACKAGE.parent), node


def parameter_count(function: ast.FunctionDef) -> int:
    """Parameters a caller can pass, ``self``/``cls`` not counted; ``*args`` and ``**kwargs`` one each."""
    arguments = function.args
    names = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
    count = len(names) + (arguments.vararg is not None) + (arguments.kwarg is not None)
    return count - (bool(arguments.args) and arguments.args[0].arg in ("self", "cls"))


def test_parameter_count_counts_what_a_caller_passes():
    tree = ast.parse("class C:\n    def m(self, a, *rest, b=1, **more): pass\ndef f(a, /, b, *, c): pass")
    function, method = sorted((node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)),
                              key=lambda node: node.name)
    assert (parameter_count(method), parameter_count(function)) == (4, 3)


def test_no_function_takes_more_than_eight_parameters():
    long = [f"{path}:{node.lineno} {node.name} ({parameter_count(node)})" for path, node in _functions(PACKAGE)
            if parameter_count(node) > MAX_PARAMETERS]
    assert long == [], "group these parameters into an options object (docs/architecture.md)"


def test_no_finding_returns_a_dict():
    # a finding's result is a frozen class; only its to_dict() (the JSON edge) gives a dict. The
    # caption map is a finding computed in its own package (it needs openTSNE)
    returning = [f"{path}:{node.lineno} {node.name}" for folder in ("findings", "map")
                 for path, node in _functions(PACKAGE / folder)
                 if node.returns is not None and node.name != "to_dict"
                 and ast.unparse(node.returns).split(" | ")[0] == "dict"]
    assert returning == []


def test_renderers_read_typed_results_only():
    # JSON is read once where it arrives (Profile.from_dict, load_typed_profile), not in each renderer
    untyped = []
    for folder in ("report", "terminal"):
        for path, node in _functions(PACKAGE / folder):
            annotations = [argument.annotation for argument in node.args.args + node.args.kwonlyargs]
            if any(annotation is not None and "| dict" in ast.unparse(annotation) for annotation in annotations):
                untyped.append(f"{path}:{node.lineno} {node.name}")
            if any(isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("as_profile", "as_section")
                   for call in ast.walk(node)):
                untyped.append(f"{path}:{node.lineno} {node.name} converts")
    assert untyped == []
