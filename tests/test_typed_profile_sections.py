"""The report's readers on typed sections: the same answer for a dict profile and its typed form,
word marks kept, partial profiles read without the schema check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capgeo.geometry.typed_profile import Distribution, Lengths, Profile, as_profile, as_section
from capgeo.report.alerts import alerts_for
from capgeo.report.figures import caption_length_figure, cosine_distribution_figure

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "reports").glob("*.profile.json"))


@pytest.fixture(scope="module", params=PROFILES, ids=[path.name for path in PROFILES])
def saved(request) -> dict:
    return json.loads(request.param.read_text())


def test_each_section_reads_back_to_its_json_object(saved):
    typed = Profile.from_dict(saved)
    written = typed.to_dict()
    for name, value in saved.items():
        assert written[name] == value, name
    assert isinstance(typed.lengths, Lengths) and typed.pairwise.mean == saved["pairwise"]["mean"]


def test_a_partial_profile_is_read_unchecked_when_asked():
    partial = {"schema": "capgeo.profile/1", "lengths": None}
    typed = as_profile(partial, check=False)
    assert typed.dataset is None and typed.lengths is None and typed.written_null("lengths")
    assert as_profile({"pairwise": {"mean": 0.25}}, check=False).pairwise == Distribution(mean=0.25)


def test_as_section():
    read = as_section({"mean": 0.5, "other": 1}, Distribution)
    assert read.mean == 0.5 and read.extra == {"other": 1} and read.count is None
    assert as_section(read, Distribution) is read
    assert as_section(None, Distribution) is None


def test_readers_agree_on_a_profile_read_checked_or_not_and_on_sections_read_alone(saved):
    """The renderers take typed results only: JSON is read once where it arrives, whole (checked, or
    unchecked for a partial profile) or a section alone, and each way draws alike."""
    typed = Profile.from_dict(saved)
    assert alerts_for(typed) == alerts_for(as_profile(saved, check=False))
    alone = caption_length_figure(Lengths.from_dict(saved["lengths"]))
    assert alone.to_dict() == caption_length_figure(typed.lengths).to_dict()
    series_alone = [("x", as_section(saved["pairwise"], Distribution), Distribution.from_dict(saved["hardest_companion"]))]
    series_typed = [("x", typed.pairwise, typed.hardest_companion)]
    assert cosine_distribution_figure(series_alone).to_dict() == cosine_distribution_figure(series_typed).to_dict()


def test_the_gallery_of_a_typed_profile_keeps_its_word_marks():
    """A typed profile holds spans as Span sections, not dicts: the page must still mark them."""
    import html

    from capgeo.report.single import render_report

    saved = json.loads((ROOT / "reports" / "docci_sample.profile.json").read_text())
    pair = saved["dupes"]["pairs"][0]
    shared = next(span for span in pair["spans_a"] if span["kind"] == "shared")
    word = pair["text_a"][shared["start"]:shared["end"]]
    page = render_report(Profile.from_dict(saved), created="T")
    assert f'<mark class="shared" title="shared word">{html.escape(word)}</mark>' in page


def test_dupes_parts_are_typed_and_write_their_nulls():
    """Spans, sets, totals and the dedup decision read into their classes and write back as read,
    nulls (a set's min_member_cosine, keep "first"'s seed, uncounted totals) included."""
    from capgeo.geometry.typed_profile import DedupDecision, Dupes, NearDuplicateSet, NearDuplicateTotals, Span

    data = {"pairs": [{"spans_a": [{"start": 0, "end": 3, "kind": "shared", "word": "dog"}]}],
            "components": [{"component": 1, "size": 2, "min_member_cosine": None, "ids": ["a", "b"]}],
            "near_duplicates": {"threshold": 0.95, "n_pairs": None, "more_than": 1000000,
                                "n_exact_duplicate_pairs": None},
            "dedup": {"keep": "first", "seed": None, "n_sets": 1, "dropped_ids": ["b"]}}
    dupes = Dupes.from_dict(data)
    assert dupes.pairs[0].spans_a == (Span(start=0, end=3, kind="shared", word="dog"),)
    assert isinstance(dupes.components[0], NearDuplicateSet) and dupes.components[0].ids == ("a", "b")
    assert isinstance(dupes.near_duplicates, NearDuplicateTotals) and isinstance(dupes.dedup, DedupDecision)
    assert dupes.near_duplicates.text() == ("Near-duplicates (cosine >= 0.95): more than 1,000,000 pairs of "
                                            "different images in all.")
    assert dupes.dedup.dropped_ids == ("b",) and dupes.dedup.seed is None
    assert json.dumps(dupes.to_dict()) == json.dumps(data)


def test_provenance_declares_every_key_a_profile_writes(saved):
    provenance = Profile.from_dict(saved).provenance
    assert provenance.extra == {} and provenance.created == saved["provenance"]["created"]
