"""Issue #29: the report and the terminal read typed results by attribute, not dicts by ``.get``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the ``.get(`` calls left are lookups whose key may be missing: click parameters a command may not
#: declare, the command table, suffix and bucket tables, span mappings
MOST_GETS = 19


def test_the_report_and_the_terminal_read_results_by_attribute():
    files = [path for folder in ("capgeo/report", "capgeo/cli") for path in sorted((ROOT / folder).glob("**/*.py"))]
    count = sum(len(re.findall(r"\.get\(", path.read_text(encoding="utf-8"))) for path in files)
    assert files and count <= MOST_GETS, f"{count} .get( calls in capgeo/report and capgeo/cli"
