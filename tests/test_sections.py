"""The section registry (capgeo.sections): every entry resolves, each renderer draws its section's typed
result, and the page and the terminal draw the optional sections in the order, and with the notes,
they had when each was wired by hand."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from capgeo.geometry.typed_profile import Leak, Pairs, Profile
from capgeo.report.single import render_report
from capgeo.sections import SECTIONS, missing_notes, resolve
from capgeo.terminal.profile import print_profile

ROOT = Path(__file__).resolve().parents[1]
#: the page's parts in their order for a profile holding every optional section (the figures first)
PAGE_ORDER = ["alerts", "headline", "summary", "distributions", "hardest-negative", "buckets", "batch-matrix",
              "lengths", "truncation", "gamma", "gallery", "map", "leak", "pairs", "provenance"]


def _pairs_section() -> Pairs:
    """A real pairs section of 12 images and 24 captions, computed by the entry's own function."""
    from capgeo.captions import load_captions
    from capgeo.images.vectors import from_array

    rng = np.random.default_rng(0)
    images = rng.standard_normal((12, 16))
    codes = np.repeat(np.arange(12), 2)
    text = images[codes] + 0.6 * rng.standard_normal((24, 16))
    text = (text / np.linalg.norm(text, axis=1, keepdims=True)).astype(np.float32)
    captions = load_captions([{"id": f"c{k}", "group": f"img{g}", "text": f"caption {k} of image {g}"}
                              for k, g in enumerate(codes)], id_column="id", group_column="group", text_column="text")
    compute = resolve(next(entry for entry in SECTIONS if entry.name == "pairs").compute)
    section = compute(captions, text, from_array(captions, images, "images.npy", width=16), batch_size=4,
                      n_batches=3)
    assert isinstance(section, Pairs)
    return section


@pytest.fixture(scope="module")
def complete() -> Profile:
    """A saved profile (its dupes, gamma, map and truncation sections) with a leak and a pairs section."""
    saved = Profile.from_dict(json.loads((ROOT / "reports" / "docci_sample.profile.json").read_text()))
    leak = Leak.from_dict({"threshold": 0.9, "train_ids_to_drop": ["a"],
                           "evals": [{"source": "eval.jsonl", "n_leaked": 0, "n_captions": 3, "share_leaked": 0.0,
                                      "n_exact": 0, "pairs": []}]})
    return dataclasses.replace(saved, leak=leak, pairs=_pairs_section())


def test_every_entry_names_a_profile_field_and_resolves():
    fields = {field.name for field in dataclasses.fields(Profile)}
    assert [entry.name for entry in SECTIONS] == ["truncation", "gamma", "dupes", "map", "leak", "pairs"]
    assert len({entry.element_id for entry in SECTIONS}) == len(SECTIONS)
    for entry in SECTIONS:
        assert entry.name in fields and entry.title
        assert entry.lede or entry.lede_from, entry.name
        for reference in (entry.compute, entry.html, entry.terminal, entry.lede_from):
            if reference is not None:
                assert callable(resolve(reference)), reference
        if entry.script:
            assert isinstance(resolve(entry.script), str) and resolve(entry.script)


def test_importing_the_registry_imports_no_layer():
    """The typed profile (geometry) reaches its writers through the registry: importing it must load
    nothing above geometry, nor anything heavy."""
    script = ("import sys, capgeo.sections; "
              "print(sorted(m for m in sys.modules if m.startswith('capgeo.') or m in ('numpy', 'rich', 'plotly')))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "['capgeo.sections']"


def test_each_html_renderer_draws_its_sections_typed_result(complete):
    for entry in SECTIONS:
        section = getattr(complete, entry.name)
        body = entry.page_html(section)
        assert isinstance(body, str) and len(body) > 100, entry.name
        assert entry.lede_for(section), entry.name
        assert entry.page_html(None) is None


def test_each_terminal_renderer_draws_its_sections_typed_result(complete):
    for entry in SECTIONS:
        out = io.StringIO()
        entry.print_terminal(complete, Console(file=out, width=120, color_system=None))
        assert bool(out.getvalue().strip()) == (entry.terminal is not None), entry.name
    gamma_line = io.StringIO()
    resolve(SECTIONS[1].terminal)(complete.gamma, Console(file=gamma_line, width=120), profile=complete)
    assert gamma_line.getvalue().startswith(f"Suggested gamma: {complete.gamma.suggested_gamma:.2f}")


def test_the_page_draws_the_sections_in_their_order(complete):
    page = render_report(complete, created="T")
    assert re.findall(r'<section id="([^"]+)"', page) == PAGE_ORDER
    assert page.count(f"<script>{resolve('capgeo.map:SEARCH_SCRIPT')}</script>") == 1   # the map's search, once
    # a section whose renderer finds nothing to draw is left out, not drawn empty
    empty = dataclasses.replace(complete, truncation=dataclasses.replace(complete.truncation, per_length=()))
    assert 'id="truncation"' not in render_report(empty, created="T")


def test_the_terminal_draws_gamma_then_pairs_then_the_verdict(complete):
    out = io.StringIO()
    print_profile(complete, Console(file=out, width=120, color_system=None))
    text = out.getvalue()
    assert text.index("Suggested gamma:") < text.index("Pairs: 24 image-caption pairs") < text.index("Verdict:")


def test_missing_sections_are_noted_in_the_order_they_always_were(complete):
    bare = complete.without("dupes").without("map").without("gamma")
    notes = ["Near-duplicate gallery: the profile has no dupes section.",
             "Caption map: the profile has no map section (`capgeo report DATA` adds one).",
             "Gamma diagnostics: the profile has no gamma section."]
    assert missing_notes(bare, []) == notes
    said = "Gamma diagnostics: left out (--no-gamma)."
    assert missing_notes(bare, [said]) == [said, *notes[:2]]
    assert missing_notes(complete, []) == []
    page = render_report(bare, notes=[said], created="T")
    notes_at = page.index('<section id="notes"')
    assert [page.index(note[:30], notes_at) for note in (said, *notes[:2])] == \
        sorted(page.index(note[:30], notes_at) for note in (said, *notes[:2]))
    assert notes[2] not in page
