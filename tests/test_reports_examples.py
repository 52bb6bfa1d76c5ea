"""The committed examples in reports/ match the code: the example page is what `capgeo report`
draws today from the committed profile, section for section, and the other profile still draws."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from capgeo.cli import main

REPORTS = Path(__file__).resolve().parents[1] / "reports"
PROFILES = sorted(REPORTS.glob("*.profile.json"))


class PageOutline(HTMLParser):
    """What a reader sees of a page, without plotly's bundle or dates: its sections (id and
    heading), its figures, its alerts and the summary table's rows (label and value)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections: list[list[str]] = []
        self.figures: list[str] = []
        self.alerts: list[str] = []
        self.summary_rows: list[list[str]] = []
        self._in_h2 = False
        self._cell: list[str] | None = None
        self._in_summary = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append([attrs.get("id", ""), ""])
            self._in_summary = attrs.get("id") == "summary"
        elif tag == "h2":
            self._in_h2 = True
        elif tag == "div" and "data-figure" in attrs:
            self.figures.append(attrs["data-figure"])
        elif tag == "li" and "data-alert" in attrs:
            self.alerts.append(attrs["data-alert"])
        elif tag == "tr" and self._in_summary:
            self.summary_rows.append([])
        elif tag in ("th", "td") and self._in_summary and self.summary_rows:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False
        elif tag == "section":
            self._in_summary = False
        elif tag in ("th", "td") and self._cell is not None:
            self.summary_rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._in_h2 and self.sections:
            self.sections[-1][1] += data
        if self._cell is not None:
            self._cell.append(data)


def outline(page: str) -> PageOutline:
    parser = PageOutline()
    parser.feed(page)
    return parser


def test_every_committed_page_has_its_profile():
    pages = sorted(REPORTS.glob("*.html"))
    assert len(pages) <= 1, "keep at most one example page: each inlines the same plotly.js bundle"
    for page in pages:
        assert (REPORTS / f"{page.stem}.profile.json").exists(), page


@pytest.mark.parametrize("page", sorted(REPORTS.glob("*.html")), ids=lambda path: path.name)
def test_example_page_is_what_the_code_draws_from_its_profile(page, tmp_path):
    redrawn = tmp_path / page.name
    result = CliRunner().invoke(main, ["report", str(REPORTS / f"{page.stem}.profile.json"), "-o", str(redrawn)])
    assert result.exit_code == 0, result.output
    committed, fresh = outline(page.read_text(encoding="utf-8")), outline(redrawn.read_text(encoding="utf-8"))
    assert len(committed.sections) >= 8 and committed.summary_rows  # the parser found the page's parts
    assert fresh.sections == committed.sections
    assert fresh.figures == committed.figures
    assert fresh.alerts == committed.alerts
    assert fresh.summary_rows == committed.summary_rows


def test_committed_profiles_compare_on_one_page(tmp_path):
    assert len(PROFILES) >= 2
    for path in PROFILES:
        assert json.loads(path.read_text(encoding="utf-8"))["schema"] == "capgeo.profile/1"
    output = tmp_path / "compare.html"
    result = CliRunner().invoke(main, ["compare", *map(str, PROFILES), "-o", str(output)])
    assert result.exit_code == 0, result.output
    drawn = outline(output.read_text(encoding="utf-8"))
    assert {"summary", "distributions", "buckets"} <= {section_id for section_id, _ in drawn.sections}
    assert drawn.figures


def test_dataset_options_given_for_a_saved_profile_are_named_as_ignored(tmp_path):
    profile = REPORTS / "coco_sample.profile.json"
    result = CliRunner().invoke(main, ["report", str(profile), "--limit", "5", "--batch-size", "8",
                                       "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert f"Note: {profile} is a saved profile, drawn as it is; ignored: --limit, --batch-size" in result.stderr
    assert outline((tmp_path / "r.html").read_text(encoding="utf-8")).summary_rows[1] == \
        ["Captions / groups (images)", "300 / 60"]  # drawn from the profile, not cut to 5 captions
    # and the options its sections were made with, or that need the dataset (they passed silently)
    result = CliRunner().invoke(main, ["report", str(profile), "--truncation", "--seed", "3", "--n-batches", "7",
                                       "--format", "csv", "-o", str(tmp_path / "r2.html")])
    assert result.exit_code == 0, result.output
    assert "ignored: --format, --seed, --n-batches, --truncation" in result.stderr


@pytest.mark.parametrize("damage", [{"pairwise": [1]}, {"dataset": {"n_captions": "x"}}, {"batches": {"a": 1}},
                                    {"batches": [1, 2]}])
def test_a_saved_profile_of_the_wrong_shape_is_one_error_line(tmp_path, damage):
    """A profile that passes the schema check but has sections of another shape gave tracebacks."""
    profile = json.loads((REPORTS / "coco_sample.profile.json").read_text(encoding="utf-8"))
    profile.update(damage)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(profile))
    for command in (["report", str(path), "-o", str(tmp_path / "r.html")],
                    ["compare", str(path), str(REPORTS / "coco_sample.profile.json"), "-o", str(tmp_path / "c.html")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "does not have the shape" in errors[0] and "Traceback" not in result.output
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "c.html").exists()


def test_a_saved_profile_with_a_huge_edge_is_one_error_line(tmp_path):
    """1e308 is valid JSON and a valid float; drawing it overflowed (OverflowError) into a traceback."""
    profile = json.loads((REPORTS / "coco_sample.profile.json").read_text(encoding="utf-8"))
    profile["pairwise"]["histogram"]["edges"][0] = 1e308
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(profile))
    result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: ") and "does not have the shape" in result.output
    assert not (tmp_path / "r.html").exists()


def test_the_examples_folder_stays_small():
    """One page and the saved profiles: the folder held 7 MB of mostly repeated plotly bundles."""
    size = sum(path.stat().st_size for path in REPORTS.iterdir() if path.is_file())
    assert size <= 6 * 2 ** 20, f"reports/ holds {size / 2 ** 20:.2f} MiB"
