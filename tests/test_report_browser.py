"""The reports in a real browser: headless Chromium (Debian package `chromium`) over the DevTools pipe.

Checks: no JavaScript errors, no network requests, every plotly figure drawn,
caption text not executed, the expand button works, and a non-blank screenshot.
Skipped when Chromium is not installed (CI installs it: apt-get install chromium).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

from _report_fixtures import REPO_DATA, make_full_profile, real_report_input, typed
from capgeo.report.build import build_compare, build_report
from capgeo.report.compare import COMPARE_FIGURE_IDS, COMPARE_OPTIONAL_FIGURE_IDS
from capgeo.report.single import FIGURE_IDS, HARDEST_NEGATIVE_FIGURE_ID, OPTIONAL_FIGURE_IDS

# the DevTools client lives in tools/, beside the script that takes the README screenshot, outside the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from chromium import find_chromium, open_page  # noqa: E402

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(find_chromium() is None,
                       reason="headless Chromium is not installed (Debian: apt-get install -y chromium)"),
]

#: clicks the first "Show all N words" button
EXPAND_FIRST = "document.querySelector('button.expand').click()"


def assert_clean(report, figure_ids):
    assert report.errors == [], report.errors
    assert report.external_requests == [], report.external_requests
    assert [url for url in report.requests if url.startswith("file:")] == [report.url]
    assert report.state["plotly"], "plotly.js did not load"
    assert sorted(report.state["figures"]) == sorted(figure_ids)
    assert sorted(report.state["drawn"]) == sorted(figure_ids), "some figures were not drawn"


def assert_not_blank(png: bytes, width: int = 1280, height: int = 2000):
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (width, height)
    pixels = np.asarray(image, dtype=np.float64)
    assert pixels.std() > 20, "screenshot is (almost) one colour"
    assert len(np.unique(pixels.reshape(-1, 3)[::7], axis=0)) > 200, "screenshot has too few colours to hold figures"


@pytest.mark.skipif(not (REPO_DATA / "docci_sample.jsonlines").exists(), reason="data/docci_sample.jsonlines is missing")
def test_real_report_loads_offline_without_errors(tmp_path):
    path = build_report(real_report_input("docci"), tmp_path / "docci.html", command="capgeo report docci")
    report = open_page(path, action=EXPAND_FIRST)
    assert_clean(report, FIGURE_IDS + OPTIONAL_FIGURE_IDS)
    assert report.state["sections"][:3] == ["alerts", "headline", "summary"]
    assert "gallery" in report.state["sections"] and report.state["marks"] > 50
    # one long caption expanded by its button
    assert report.state["clamped"] == report.state["expand_buttons"] - 1
    assert_not_blank(report.screenshot)


def test_hostile_captions_are_shown_not_run(tmp_path):
    path = build_report(typed(make_full_profile()), tmp_path / "fixture.html")
    report = open_page(path, screenshot=False)
    assert_clean(report, FIGURE_IDS + (HARDEST_NEGATIVE_FIGURE_ID,))
    assert report.state["title"] == "capgeo report: fixture.jsonl", "caption text ran as script"
    assert not any(url.endswith("/x") for url in report.requests), "an <img> from caption text was loaded"


@pytest.mark.skipif(not (REPO_DATA / "coco_sample.json").exists(), reason="data/coco_sample.json is missing")
def test_compare_page_loads_offline_without_errors(tmp_path):
    profiles = [real_report_input("docci").profile, real_report_input("coco").profile]
    path = build_compare(profiles, tmp_path / "compare.html")
    report = open_page(path)
    assert_clean(report, COMPARE_FIGURE_IDS + COMPARE_OPTIONAL_FIGURE_IDS)
    assert_not_blank(report.screenshot)


def assert_first_screen(report, height: int):
    """The verdict and the headline numbers come first and end above the fold, before any table."""
    boxes = report.state["boxes"]
    assert report.state["sections"][:2] == ["alerts", "headline"]
    assert boxes["alerts"]["bottom"] <= boxes["headline"]["top"] < boxes["headline"]["bottom"] <= height, boxes
    assert report.state["first_table_top"] >= boxes["headline"]["bottom"]


@pytest.mark.slow
@pytest.mark.skipif(not (REPO_DATA / "docci_sample.jsonlines").exists(), reason="data/docci_sample.jsonlines is missing")
def test_the_first_screen_of_a_1400_by_900_window_holds_the_verdict_and_headline_numbers(tmp_path):
    path = build_report(real_report_input("docci"), tmp_path / "docci.html", command="capgeo report docci")
    assert_first_screen(open_page(path, width=1400, height=900, screenshot=False), 900)
    # a profile that fires many alerts (the fixture's) keeps them above the fold too
    path = build_report(typed(make_full_profile()), tmp_path / "fixture.html")
    assert_first_screen(open_page(path, width=1400, height=900, screenshot=False), 900)
