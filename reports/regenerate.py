"""Rebuild the example reports in reports/ and the README screenshot docs/report.png.

    python reports/regenerate.py            # from the repository root, with capgeo installed

Runs exactly these capgeo commands (in one process, so the encoder loads once),
with the embedded default encoder (all-MiniLM-L6-v2) on the samples in data/:

    capgeo report data/docci_sample.jsonlines --truncation --save-profile reports/docci_sample.profile.json --output reports/docci_sample.html
    capgeo report data/coco_sample.json --save-profile reports/coco_sample.profile.json --output TMP/coco_sample.html

(only the DOCCI page is kept: each page inlines the same plotly.js bundle; the COCO and
compare pages are redrawn from the saved profiles by `capgeo report` / `capgeo compare`)

then opens reports/docci_sample.html in headless Chromium (Debian: apt-get install
chromium) and saves a 1280x1800 screenshot of its top as docs/report.png. Results
are deterministic for the seed (0) apart from dates. Takes a few minutes on a laptop CPU.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = [
    ["report", "data/docci_sample.jsonlines", "--truncation", "--save-profile", "reports/docci_sample.profile.json",
     "--output", "reports/docci_sample.html"],
    ["report", "data/coco_sample.json", "--save-profile", "reports/coco_sample.profile.json",
     "--output", "TMP/coco_sample.html"],
]
SCREENSHOT_OF = "reports/docci_sample.html"
SCREENSHOT = "docs/report.png"


def main() -> int:
    os.chdir(ROOT)  # paths in the reports' provenance stay relative to the repository
    from capgeo.cli import main as capgeo

    with tempfile.TemporaryDirectory() as scratch:
        for arguments in COMMANDS:
            arguments = [argument.replace("TMP/", scratch + "/") for argument in arguments]
            print("capgeo " + " ".join(arguments), flush=True)
            capgeo(arguments, standalone_mode=False)

    from capgeo._atomic import atomic_open
    from capgeo.report.chromium import find_chromium, open_page

    if find_chromium() is None:
        print(f"Chromium not found: {SCREENSHOT} left as it is (apt-get install chromium)", file=sys.stderr)
        return 0
    page = open_page(SCREENSHOT_OF, width=1280, height=1800)
    if page.errors or page.external_requests:
        print(f"{SCREENSHOT_OF}: errors {page.errors}, requests {page.external_requests}", file=sys.stderr)
        return 1
    with atomic_open(SCREENSHOT, "wb") as handle:
        handle.write(page.screenshot)
    print(f"Wrote {SCREENSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
