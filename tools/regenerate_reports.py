"""Rebuild the example report and saved profiles in reports/ and the README screenshot docs/report.png.

    python tools/regenerate_reports.py      # from the repository root, with capgeo installed

Runs exactly these capgeo commands (in one process, so the encoder loads once),
with the embedded default encoder (all-MiniLM-L6-v2) on the samples in data/:

    capgeo report data/docci_sample.jsonlines --truncation --save-profile reports/docci_sample.profile.json --output TMP/docci_sample.html
    capgeo report data/coco_sample.json --save-profile reports/coco_sample.profile.json --output TMP/coco_sample.html
    capgeo report reports/coco_sample.profile.json --output reports/coco_sample.html

The profiles are rewritten as compact JSON (same content, no indentation: half the bytes) before
the last command, which draws the kept page from its saved profile, as tests/test_reports_examples.py
redraws it (a page drawn from the dataset adds notes on the batch sizes that a profile does not hold).
Only the COCO page is kept (each page inlines the same compressed plotly.js bundle, and reports/
holds 6 MB at most); the DOCCI and compare pages are redrawn from the saved profiles by `capgeo report`
/ `capgeo compare`. The DOCCI page is opened in headless Chromium (Debian: apt-get install
chromium) and a 1280x1800 screenshot of its top saved as docs/report.png. Results are
deterministic for the seed (0) apart from dates. Takes a few minutes on a laptop CPU.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = [
    ["report", "data/docci_sample.jsonlines", "--truncation", "--save-profile", "reports/docci_sample.profile.json",
     "--output", "TMP/docci_sample.html", "--force"],
    ["report", "data/coco_sample.json", "--save-profile", "reports/coco_sample.profile.json",
     "--output", "TMP/coco_sample.html", "--force"],
]
DRAWN = ["report", "reports/coco_sample.profile.json", "--output", "reports/coco_sample.html", "--force"]
PROFILES = ["reports/docci_sample.profile.json", "reports/coco_sample.profile.json"]
SCREENSHOT_OF = "TMP/docci_sample.html"
SCREENSHOT = "docs/report.png"


def main() -> int:
    os.chdir(ROOT)  # paths in the reports' provenance stay relative to the repository
    sys.path.insert(0, str(ROOT / "tools"))
    from capgeo._atomic import atomic_open
    from capgeo.cli import main as capgeo
    from chromium import find_chromium, open_page

    with tempfile.TemporaryDirectory() as scratch:
        for arguments in COMMANDS:
            arguments = [argument.replace("TMP/", scratch + "/") for argument in arguments]
            print("capgeo " + " ".join(arguments), flush=True)
            capgeo(arguments, standalone_mode=False)
        for path in PROFILES:
            profile = json.loads(Path(path).read_text(encoding="utf-8"))
            with atomic_open(path) as handle:
                handle.write(json.dumps(profile, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n")
        print("capgeo " + " ".join(DRAWN), flush=True)
        capgeo(DRAWN, standalone_mode=False)
        if find_chromium() is None:
            print(f"Chromium not found: {SCREENSHOT} left as it is (apt-get install chromium)", file=sys.stderr)
            return 0
        shown = SCREENSHOT_OF.replace("TMP/", scratch + "/")
        page = open_page(shown, width=1280, height=1800)
    if page.errors or page.external_requests:
        print(f"{SCREENSHOT_OF}: errors {page.errors}, requests {page.external_requests}", file=sys.stderr)
        return 1
    with atomic_open(SCREENSHOT, "wb") as handle:
        handle.write(page.screenshot)
    print(f"Wrote {SCREENSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
