"""What a new user sees first on the report page (issue 47, item 7): the verdict and the headline numbers
before any table, a caption-length axis that fits the data, exact copies once in the gallery, and the
batch matrix's label inside the matrix. tests/test_report_browser.py measures the first screen in Chromium."""

from __future__ import annotations

import dataclasses

import numpy as np

from capgeo.geometry.typed_profile import BatchExample, Dupes, DupesPair, Histogram, Lengths, as_profile
from capgeo.report import figures
from capgeo.report.gallery import ExactCopies, exact_copies_once, gallery_html
from capgeo.report.single import render_report

from _report_fixtures import make_full_profile


def test_the_page_opens_with_the_verdict_then_the_headline_numbers_then_the_first_table():
    page = render_report(as_profile(make_full_profile()), created="2026-01-01T00:00:00Z")
    main = page.split("<main>", 1)[1]
    alerts, headline, first_table = main.index('id="alerts"'), main.index('id="headline"'), main.index("<table")
    assert alerts < headline < first_table
    tiles = main[headline:first_table]
    assert "Suggested gamma" in tiles and "Mean hardest-companion cosine" in tiles and "Near-duplicate pairs" in tiles


def _lengths(counts, context_length, max_tokens=None) -> Lengths:
    edges = tuple(float(edge) for edge in range(0, 2 * len(counts) + 1, 2))
    return Lengths(histogram=Histogram(edges=edges, counts=tuple(counts)), context_length=context_length,
                   max_tokens=max_tokens, known=True, share_truncated=0.0)


def test_the_length_axis_ends_near_the_longest_caption_and_marks_the_context_only_in_range():
    short = [0] * 5 + [10, 20, 5] + [0] * 167   # 10-16 tokens on bins to 350
    figure = figures.caption_length_figure(_lengths(short, 350))
    low, high = figure.layout.xaxis.range
    assert low == 0 and 16 <= high <= 17 and not figure.layout.shapes
    assert "context limit 350 tokens, beyond the longest caption" in figure.layout.title.text
    near = [0] * 20 + [5, 5] + [0] * 20    # 40-44 tokens, context 64: within reach, marked
    figure = figures.caption_length_figure(_lengths(near, 64))
    assert [shape.x0 for shape in figure.layout.shapes] == [64] and 64 <= figure.layout.xaxis.range[1] <= 67
    cut = [0] * 30 + [5] * 20 + [3] + [0] * 100   # to 102 tokens, context 77: cut captions, axis to the data
    figure = figures.caption_length_figure(_lengths(cut, 77))
    assert [shape.x0 for shape in figure.layout.shapes] == [77] and 102 <= figure.layout.xaxis.range[1] <= 106


def _pair(a, b, text_a, text_b, cosine, exact):
    return DupesPair(id_a=a, id_b=b, group_a=f"img-{a}", group_b=f"img-{b}", text_a=text_a, text_b=text_b,
                     cosine=cosine, exact_duplicate=exact, spans_a=(), spans_b=())


def test_a_set_of_exact_copies_shows_once_and_two_copies_stay_a_pair():
    copy = "a red bus parked beside the station"
    pairs = [_pair("a", "b", copy, copy, 1.0, True), _pair("a", "c", copy, copy, 1.0, True),
             _pair("x", "y", "two dogs", "two dogs", 1.0, True), _pair("b", "c", copy, copy, 1.0, True),
             _pair("p", "q", "a cat on a mat", "a cat on the mat", 0.97, False)]
    entries = exact_copies_once(pairs)
    assert len(entries) == 3 and isinstance(entries[0], ExactCopies)
    assert entries[0].members == (("a", "img-a"), ("b", "img-b"), ("c", "img-c"))
    assert entries[1] is pairs[2] and entries[2] is pairs[4]
    page = gallery_html(Dupes(pairs=tuple(pairs)))
    assert page.count(copy) == 1 and "the same text in 3 captions of 3 images" in page
    assert page.count("two dogs") == 2   # a pair of copies is still a pair


def test_the_batch_matrix_label_stays_inside_the_matrix():
    size = 16
    rng = np.random.default_rng(0)
    for row, column in ((0, size - 1), (size - 1, 0), (size - 1, size - 2), (0, 1), (7, 8)):
        matrix = rng.uniform(0.2, 0.5, size=(size, size))
        matrix[row, column] = matrix[column, row] = 0.99
        cosine = [[None if i == j else float(matrix[i, j]) for j in range(size)] for i in range(size)]
        ids = [f"a-very-long-caption-identifier-{i:04d}" for i in range(size)]
        figure = figures.batch_heatmap_figure(BatchExample(cosine=tuple(map(tuple, cosine)), caption_ids=tuple(ids)))
        label = figure.layout.annotations[0]
        assert {label.x, label.y} == {row, column}
        # the text sits a quarter in from the edges, across from the cell, in data coordinates
        assert 0.2 * size <= label.ax <= 0.8 * size and 0.2 * size <= label.ay <= 0.8 * size
        assert abs(label.ax - label.x) >= size / 4 or abs(label.ay - label.y) >= size / 4
        assert all(len(part) <= figures.SHORT_ID + 2 for part in label.text.split("<br>"))


def test_the_provenance_of_a_saved_profile_keeps_its_fingerprint():
    profile = as_profile(make_full_profile())
    page = render_report(profile, created="2026-01-01T00:00:00Z")
    assert f"<code>{profile.dataset.fingerprint}</code>" in page or profile.dataset.fingerprint is None
    unfingerprinted = dataclasses.replace(profile, dataset=dataclasses.replace(
        profile.dataset, fingerprint=None, nulls=profile.dataset.nulls | {"fingerprint"}))
    assert "built in memory" in render_report(unfingerprinted, created="2026-01-01T00:00:00Z")
