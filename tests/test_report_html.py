"""The report's HTML: well-formed, every section and figure, escaping, highlights, compare, atomic writes.

These tests use a brute-force fixture profile (tests/_report_fixtures.py) that follows
docs/profile-schema.md; tests/test_report_e2e.py runs the real pipeline on real data.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from _report_fixtures import NASTY_CAPTIONS, make_full_profile, make_profile, typed
from capgeo.errors import CapgeoError
from capgeo.geometry.typed_profile import BatchExample, BatchStatistics, DupesExample, Histogram
from capgeo.report import figures
from capgeo.report.build import build_compare, build_report, is_profile_file, save_profile
from capgeo.report.compare import COMPARE_FIGURE_IDS, profile_labels, render_compare
from capgeo.report.html import LONG_CAPTION_WORDS, CaptionIds, caption_html, highlight, plotly_javascript
from capgeo.report.single import FIGURE_IDS, HARDEST_NEGATIVE_FIGURE_ID, render_report

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SECTIONS = ("summary", "alerts", "lengths", "distributions", "buckets", "batch-matrix", "gamma", "gallery", "provenance")


class StrictParser(HTMLParser):
    """Checks that every non-void element is closed in order; records ids, marks and attributes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.attributes: list[tuple[str, str, str]] = []
        self.marks: list[str] = []
        self._mark_depth = 0
        self._mark_text: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            self.attributes.append((tag, name, value or ""))
            if name == "id":
                self.ids.append(value)
        if tag == "script":
            self.scripts += 1
        if tag == "mark":
            self._mark_depth += 1
            self._mark_text = []
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()
        if tag == "mark":
            self._mark_depth -= 1
            self.marks.append("".join(self._mark_text))

    def handle_data(self, data):
        if self._mark_depth:
            self._mark_text.append(data)


def parse(page: str) -> StrictParser:
    parser = StrictParser()
    parser.feed(page)
    parser.close()
    assert parser.errors == []
    assert parser.stack == [], f"unclosed elements: {parser.stack}"
    return parser


class CaptionText(HTMLParser):
    """Text content of every <p class="caption"> element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self._inside = False

    def handle_starttag(self, tag, attrs):
        if tag == "p" and "caption" in (dict(attrs).get("class") or "").split():
            self._inside = True
            self.texts.append("")

    def handle_endtag(self, tag):
        if tag == "p":
            self._inside = False

    def handle_data(self, data):
        if self._inside:
            self.texts[-1] += data


def caption_texts(page: str) -> list[str]:
    parser = CaptionText()
    parser.feed(page)
    return parser.texts


@pytest.fixture(scope="module")
def full_profile():
    return make_full_profile()


@pytest.fixture(scope="module")
def full_page(full_profile):
    return render_report(typed(full_profile), command="capgeo report data/x.jsonl -o r.html")


def outside_plotly(page: str) -> str:
    """The page without the inlined plotly.js (its source mentions URLs it never loads here)."""
    return re.sub(r'<script id="plotly-js">.*?</script>', "", page, count=1, flags=re.S)


# ------------------------------------------------------------------ structure


def test_report_is_well_formed_with_every_section_and_figure(full_page):
    parser = parse(full_page)
    for section in SECTIONS:
        assert section in parser.ids, f"section {section} missing"
    for figure_id in FIGURE_IDS + (HARDEST_NEGATIVE_FIGURE_ID,):
        assert figure_id in parser.ids, f"figure {figure_id} missing"
        assert re.search(rf'Plotly\.newPlot\(\s*"{figure_id}"', full_page), f"figure {figure_id} is never drawn"
    assert full_page.startswith("<!DOCTYPE html>")


def test_plotly_is_inlined_exactly_once_and_nothing_external(full_page):
    source = plotly_javascript()
    assert full_page.count(source[:400]) == 1
    assert full_page.count('<script id="plotly-js">') == 1
    rest = outside_plotly(full_page)
    parser = parse(rest)
    for tag, name, value in parser.attributes:
        if name in ("src", "href"):
            assert not re.match(r"\s*(https?:)?//", value), f"<{tag} {name}={value}> would load from the network"
    assert "<link" not in rest and "@import" not in rest and "<img" not in rest
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", rest)
    assert "cdn.plot.ly" not in rest


def test_summary_numbers_come_from_the_profile(full_profile, full_page):
    pairwise = full_profile["pairwise"]
    hardest = full_profile["hardest_companion"]
    assert f"{pairwise['mean']:.3f} ± {pairwise['std']:.3f}" in full_page
    assert f"{hardest['mean']:.3f} (N = {hardest['count']:,})" in full_page
    lengths = full_profile["lengths"]
    assert f"{lengths['n_truncated']:,} ({100 * lengths['share_truncated']:.1f}%)" in full_page
    for entry in full_profile["batches"]:
        edge, share = entry["buckets"]["edges"][-1], entry["buckets"]["shares"][-1]
        row = f"In-batch negatives >={edge:g}, B={entry['batch_size']}</th><td class=\"num\">{100 * share:.1f}%</td>"
        assert row in html.unescape(full_page)
    gamma = full_profile["gamma"]
    low, high = gamma["suggested_range"]
    assert f"Suggested gamma</th><td class=\"num\">{gamma['suggested_gamma']:.2f} (range {low:.2f}-{high:.2f})" \
        in full_page


def test_missing_sections_are_left_out_and_explained():
    profile, _ = make_profile()
    page = render_report(typed(profile))
    parser = parse(page)
    assert "gallery" not in parser.ids and "gamma" not in parser.ids and "fig-gamma" not in parser.ids
    assert "notes" in parser.ids
    assert "has no dupes section" in page and "has no gamma section" in page
    for figure_id in ("fig-lengths", "fig-cosines", "fig-buckets", "fig-batch"):
        assert figure_id in parser.ids


def test_bare_profile_without_optional_sections_still_renders():
    profile, _ = make_profile()
    for key in ("lengths", "within_group", "exact_duplicates", "near_duplicates", "companions", "options"):
        profile.pop(key)
    for entry in profile["batches"]:
        entry.pop("example")
    parser = parse(render_report(typed(profile)))
    assert "fig-lengths" not in parser.ids and "fig-batch" not in parser.ids
    assert "fig-cosines" in parser.ids and "summary" in parser.ids


# ------------------------------------------------------------------ escaping and highlights


def test_caption_text_is_escaped(full_page):
    assert '<script>document.title="pwned"</script>' not in full_page and "<img" not in full_page
    assert "&lt;" in full_page and "&quot;" in full_page and "&#x27;" in full_page
    rest = outside_plotly(full_page)
    # the only script elements are the page's own: plotly figures and the expand-button script
    assert rest.count("<script") == len(FIGURE_IDS) + 2   # and the hardest-negative figure
    # every caption reads back character for character from the page's text
    shown = caption_texts(full_page)
    for text in NASTY_CAPTIONS:
        assert text in shown


def test_highlight_spans_land_on_the_same_characters_after_escaping(full_profile):
    """Every <mark> holds exactly text[start:end] of its span, for HTML specials and non-Latin scripts."""
    for row in full_profile["dupes"]["pairs"] + [n for e in full_profile["dupes"]["examples"] for n in e["neighbours"]]:
        for text, spans in ((row["text_a"], row["spans_a"]), (row["text_b"], row["spans_b"])):
            parser = parse(f"<div>{highlight(text, spans)}</div>")
            assert parser.marks == [text[s["start"]:s["end"]] for s in sorted(spans, key=lambda s: s["start"])]


def test_highlight_of_hand_made_spans():
    text = 'a <b> & "c" café 東京 दुकानें'
    spans = [{"start": 2, "end": 5, "kind": "shared"}, {"start": 8, "end": 11, "kind": "only_a"},
             {"start": 12, "end": 16, "kind": "shared"}, {"start": 17, "end": 19, "kind": "only_b"},
             {"start": 20, "end": 27, "kind": "shared"}]
    rendered = highlight(text, spans)
    assert rendered.startswith('a <mark class="shared" title="shared word">&lt;b&gt;</mark> &amp; ')
    parser = parse(f"<p>{rendered}</p>")
    assert parser.marks == ["<b>", '"c"', "café", "東京", "दुकानें"]
    # removing the tags and unescaping gives the caption back, character for character
    assert html.unescape(re.sub(r"<[^>]+>", "", rendered)) == text


def test_highlight_skips_overlapping_and_out_of_range_spans():
    text = "red red dog"
    spans = [{"start": 0, "end": 7, "kind": "shared"}, {"start": 4, "end": 7, "kind": "shared"},
             {"start": 8, "end": 99, "kind": "shared"}, {"start": 5, "end": 5, "kind": "shared"}]
    rendered = highlight(text, spans)
    assert rendered.count("<mark") == 1
    assert html.unescape(re.sub(r"<[^>]+>", "", rendered)) == text


def test_very_long_caption_is_clamped_with_full_text_kept():
    words = [f"w{i}<&>" for i in range(5000)]
    text = " ".join(words)
    spans = [{"start": text.index("w4999"), "end": text.index("w4999") + 5, "kind": "shared"}]
    rendered = caption_html(text, spans, CaptionIds())
    parser = parse(f"<div>{rendered}</div>")
    assert 'class="caption clamped"' in rendered and "Show all 5000 words" in rendered
    assert parser.marks == ["w4999"]
    assert html.unescape(re.sub(r"<[^>]+>", "", rendered.split("<button")[0])) == text
    short = caption_html("a short caption", [], CaptionIds())
    assert "clamped" not in short and len("a short caption".split()) <= LONG_CAPTION_WORDS


def test_gallery_query_marks_words_shared_with_any_neighbour(full_profile, full_page):
    from capgeo.geometry.typed_profile import DupesPair
    from capgeo.report.gallery import merged_query_spans

    example = full_profile["dupes"]["examples"][0]
    merged = merged_query_spans(DupesExample.from_dict(example).neighbours)
    for span in merged:
        shared_with = [n for n in example["neighbours"]
                       if any(s["start"] == span["start"] and s["kind"] == "shared" for s in n["spans_a"])]
        assert (span["kind"] == "shared") == bool(shared_with)
    assert "Near-duplicate gallery" in full_page and "neighbour 3" in full_page


# ------------------------------------------------------------------ figures


def test_rebin_preserves_counts_and_matches_a_coarse_histogram():
    rng = np.random.default_rng(1)
    values = np.clip(rng.normal(0.6, 0.1, size=5000), -1, 1)
    fine_edges = np.linspace(-1, 1, 4001)
    fine, _ = np.histogram(values, bins=fine_edges)
    edges, counts = figures.rebin(Histogram.from_dict({"edges": fine_edges.tolist(), "counts": fine.tolist()}), width=0.01)
    assert counts.sum() == values.size
    coarse, _ = np.histogram(values, bins=edges)
    np.testing.assert_array_equal(counts, coarse)
    assert np.allclose(np.diff(edges), 0.01)


def test_heatmap_annotates_the_largest_off_diagonal_value(full_profile):
    example = full_profile["batches"][-1]["example"]
    matrix = example["cosine"]
    best = max((matrix[i][j], i, j) for i in range(len(matrix)) for j in range(len(matrix)) if i != j)
    figure = figures.batch_heatmap_figure(BatchExample.from_dict(example))
    annotation = figure.layout.annotations[0]
    assert annotation.x != annotation.y and matrix[annotation.y][annotation.x] == best[0]
    assert f"max {best[0]:.3f}" in annotation.text


def test_length_and_distribution_figures_mark_limits_and_means(full_profile):
    lengths = figures.caption_length_figure(typed(full_profile).lengths)
    assert any(shape.x0 == full_profile["lengths"]["max_tokens"] for shape in lengths.layout.shapes)
    assert lengths.layout.xaxis.title.text and lengths.layout.yaxis.title.text
    assert sum(lengths.data[0].y) == full_profile["lengths"]["n"]
    cosines = figures.cosine_distribution_figure([("x", typed(full_profile).pairwise, typed(full_profile).hardest_companion)])
    marked = sorted(shape.x0 for shape in cosines.layout.shapes)
    assert marked == sorted([full_profile["pairwise"]["mean"], full_profile["hardest_companion"]["mean"]])
    for trace in cosines.data:  # each curve's shares sum to 100% (every value drawn once)
        assert abs(sum(trace.y[::2]) - 100) < 1e-6


def test_bucket_bars_stack_to_the_profile_shares(full_profile):
    figure = figures.bucket_composition_figure([("x", typed(full_profile).batches)])
    totals = np.sum([trace.y for trace in figure.data], axis=0)
    np.testing.assert_allclose(totals, 100)
    for index, entry in enumerate(full_profile["batches"]):
        np.testing.assert_allclose([trace.y[index] for trace in figure.data], np.array(entry["buckets"]["shares"]) * 100)


def test_buckets_of_profiles_with_other_edges_stack_from_easiest_to_hardest(full_profile):
    """A profile made with --buckets 0.8,0.9 beside the default edges: its "cosine <0.8" was first
    seen last, so it was stacked on top in the hardest colour."""
    import copy

    other = copy.deepcopy(full_profile["batches"])
    for entry in other:
        entry["buckets"] = {"kind": "absolute", "edges": [0.8, 0.9], "labels": ["<0.8", "0.8-0.9", ">=0.9"],
                            "shares": [0.73, 0.25, 0.02]}
    figure = figures.bucket_composition_figure([("default", typed(full_profile).batches),
                                                ("other", [BatchStatistics.from_dict(entry) for entry in other])])
    # each trace's range in the "other" profile's bar (the last), among those it has
    ranges = [[float(v) if v else bound for v, bound in zip(trace.customdata[-1].split(" to "), (-np.inf, np.inf))]
              for trace in figure.data if trace.y[-1] > 0]
    assert [r[0] for r in ranges] == sorted(r[0] for r in ranges)
    drawn = [trace for trace in figure.data if trace.y[-1] > 0]
    assert [trace.y[-1] for trace in drawn] == pytest.approx([73, 25, 2])  # "<0.8", the easiest, at the bottom
    colour_rank = [figures.BUCKET_COLOURS.index(trace.marker.color) for trace in drawn]
    assert colour_rank == sorted(colour_rank)  # and lighter than the harder buckets above it


def test_gamma_figure_marks_the_suggestion(full_profile):
    figure = figures.gamma_figure(typed(full_profile).gamma)
    assert any(shape.x0 == 0.375 and shape.x1 == 0.375 for shape in figure.layout.shapes)
    assert any(shape.x0 == 0.25 and shape.x1 == 0.625 for shape in figure.layout.shapes)


# ------------------------------------------------------------------ compare


def test_compare_of_datasets_of_different_sizes():
    small, _ = make_profile(n_groups=40, per_group=2, source="data/docci.jsonl")
    large, _ = make_profile(n_groups=150, per_group=1, seed=5, batch_sizes=(16, 32, 64), source="data/coco.json")
    page = render_compare([typed(small), typed(large)])
    parser = parse(page)
    for figure_id in COMPARE_FIGURE_IDS:
        assert figure_id in parser.ids
    assert "<th>docci.jsonl</th><th>coco.json</th>" in page
    assert '<th>Captions / groups (images)</th><td class="num">80 / 40</td><td class="num">150 / 150</td>' in page
    assert "different numbers of captions" in page
    # B=64 exists only for the larger profile: its row says so for the other
    assert "B=64" in page and "not computed" in page
    figure = figures.cosine_distribution_figure([("a", typed(small).pairwise, typed(small).hardest_companion),
                                                 ("b", typed(large).pairwise, typed(large).hardest_companion)])
    assert len(figure.data) == 4
    assert page.count(plotly_javascript()[:400]) == 1


def test_compare_labels_are_unique_and_name_the_encoder_when_needed():
    a, _ = make_profile(source="data/docci.jsonl")
    b, _ = make_profile(source="data/docci.jsonl")
    b["encoder"]["spec"] = "ViT-B-32"
    assert profile_labels([typed(a), typed(b)]) == ["minilm", "ViT-B-32"]
    c, _ = make_profile(source="data/coco.json")
    assert profile_labels([typed(a), typed(b), typed(c)]) == ["docci.jsonl · minilm", "docci.jsonl · ViT-B-32", "coco.json"]
    assert profile_labels([typed(a), typed(a)]) == ["docci.jsonl (1)", "docci.jsonl (2)"]


def test_compare_needs_two_profiles():
    a, _ = make_profile()
    with pytest.raises(CapgeoError, match="at least two"):
        render_compare([typed(a)])


# ------------------------------------------------------------------ files


def test_build_report_writes_atomically(tmp_path, monkeypatch, full_profile):
    target = tmp_path / "r.html"
    build_report(typed(full_profile), target)
    first = target.read_text(encoding="utf-8")
    assert first.rstrip().endswith("</html>")

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("capgeo.report.single.render_report", broken)
    with pytest.raises(RuntimeError):
        build_report(typed(full_profile), target)
    assert target.read_text(encoding="utf-8") == first
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_profile_files_are_told_apart_from_datasets(tmp_path, full_profile, repo_data):
    saved = save_profile(typed(full_profile), tmp_path / "p.json")
    assert is_profile_file(saved)
    assert not is_profile_file(repo_data / "coco_sample.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something-else"}))
    assert not is_profile_file(other)


def test_build_compare_writes_one_file(tmp_path):
    a, _ = make_profile()
    b, _ = make_profile(n_groups=60, per_group=1, seed=2)
    path = build_compare([typed(a), typed(b)], tmp_path / "c.html")
    parse(path.read_text(encoding="utf-8"))


def test_truncation_section_greys_what_the_encoder_did_not_see():
    profile, _ = make_profile()
    text = "A <red> car & a dog. Then much more text the encoder never saw."
    offset = text.index("Then")
    per_length = [{"max_tokens": length, "reference": length == 77, "n_cut": 3, "share_cut": 0.1,
                   "pairwise": {"mean": 0.5 + length / 1000, "quantiles": {}},
                   "hardest_companion": {"quantiles": {"p50": 0.8, "p90": 0.9}},
                   "near_duplicates": {"n_pairs": 100 - length, "n_truncation_only": 50 - length // 2}}
                  for length in (16, 32, 77)]
    caption = {"index": 0, "id": "c<1>", "group": "g", "text": text, "tokens": 30, "cut": True, "cut_offset": offset}
    profile["truncation"] = {"lengths": [16, 32, 77], "reference_length": 77, "threshold": 0.95,
                             "per_length": per_length,
                             "truncation_only_pairs": [{"max_tokens": 16, "cosine_at_length": 0.97, "cosine_full": 0.9,
                                                        "a": caption, "b": dict(caption, cut_offset=None)}]}
    page = render_report(typed(profile))
    parser = parse(page)
    assert {"truncation", "fig-truncation"} <= set(parser.ids)
    seen = html.escape(text[:offset])
    assert f'{seen}<span class="unseen" title="cut: the encoder did not see this">{html.escape(text[offset:])}</span>' in page
    assert "id c&lt;1&gt;" in page
    figure = figures.truncation_figure(typed(profile).truncation)
    assert list(figure.data[0].x) == [16, 32, 77] and figure.layout.xaxis.type == "log"
    assert list(figure.data[3].y) == [84, 68, 23]
    # the reference line sits at L=77 on the log axis (its label at log10(77): annotations take log10 there)
    assert any(shape.x0 == 77 for shape in figure.layout.shapes)
    assert any(abs(10 ** a.x - 77) < 1e-6 for a in figure.layout.annotations if "full context" in a.text)


def test_precomputed_vectors_have_unknown_context_and_logit_scale_not_zero_tokens():
    """Vectors from a file store context length 0 and no logit scale: the summary said '0 tokens'
    and 'none in checkpoint' where there is no tokenizer and no checkpoint."""
    from capgeo.report.summary import summary_rows

    profile, _ = make_profile()
    profile["encoder"] = {**profile["encoder"], "kind": "precomputed", "context_length": 0, "logit_scale": None}
    rows = dict(summary_rows(typed(profile)))
    assert rows["Context length"] == "unknown (precomputed vectors)"
    assert rows["Logit scale"] == "unknown (precomputed vectors)"
    clip, _ = make_profile()
    clip["encoder"] = {**clip["encoder"], "kind": "open_clip", "context_length": 77, "logit_scale": None}
    rows = dict(summary_rows(typed(clip)))
    assert rows["Context length"].startswith("77 tokens") and rows["Logit scale"] == "none in checkpoint"


def test_the_summary_states_the_median_length_and_the_logit_scale_behind_the_gamma(full_profile):
    """The median was rounded half to even (136.5 shown as 136, where the JSON and the terminal say
    136.5), and nothing said which s a gamma was found at (0.19 at s = 100, 0.96 at s = 20)."""
    import copy

    from capgeo.report.summary import summary_rows

    profile = copy.deepcopy(full_profile)
    profile["lengths"]["median"] = 136.5
    profile["gamma"]["logit_scale"], profile["gamma"]["logit_scale_source"] = 20.0, "--logit-scale"
    rows = dict(summary_rows(typed(profile)))
    assert "median 136.5," in rows["Caption length (tokens)"]
    assert rows["Logit scale s behind the gamma"] == "20 (--logit-scale)"
    profile.pop("gamma")
    assert "Logit scale s behind the gamma" not in dict(summary_rows(typed(profile)))


def test_a_truncation_result_does_not_claim_its_token_counts_are_unknown(full_profile):
    import copy

    from capgeo.report.summary import summary_rows

    profile = copy.deepcopy(full_profile)
    profile.pop("lengths")
    profile["truncation"] = {"tokens": {"mean": 120.0}}
    assert dict(summary_rows(typed(profile)))["Captions truncated by the encoder"] == \
        "not computed (see the truncation section)"
    profile.pop("truncation")
    assert dict(summary_rows(typed(profile)))["Captions truncated by the encoder"] == "unknown (no token counts)"


def test_a_profile_without_the_within_image_section_does_not_claim_one_caption_per_image():
    """A gamma or truncation profile has no within_group section: the summary said 'none: one
    caption per image' of a dataset with five captions per image."""
    from capgeo.report.summary import summary_rows

    profile, _ = make_profile()
    for key in ("within_group", "near_duplicates"):
        profile.pop(key)
    rows = dict(summary_rows(typed(profile)))
    assert rows["Mean cosine within an image (positives)"] == "not computed"
    assert rows["Near-duplicate pairs"] == "not computed"
    profile, _ = make_profile()
    profile["within_group"] = None  # every image has one caption
    assert dict(summary_rows(typed(profile)))["Mean cosine within an image (positives)"] == "none: one caption per image"


def test_compare_lines_up_near_duplicates_and_an_undefined_margin_gamma():
    """A gamma-only profile beside a full one: the near-duplicate row was split in two by the threshold
    in its label (one "not computed" for each); an undefined margin-matched gamma read "not computed"."""
    from capgeo.report.compare import compare_table
    from capgeo.report.summary import summary_rows

    full, _ = make_profile()
    partial, _ = make_profile()
    partial.pop("near_duplicates")
    for entry in partial["batches"]:
        if entry.get("near_duplicate"):
            entry["near_duplicate"]["threshold"] = 0.6  # another --threshold: still one row per batch size
    table = compare_table([typed(full), typed(partial)], ["full", "gamma only"])
    assert table.count("Near-duplicate pairs") == 1
    batch_sizes = [entry["batch_size"] for entry in full["batches"] if entry.get("near_duplicate")]
    assert batch_sizes and all(table.count(f"Batches with a near-twin, B={size}<") == 1 for size in batch_sizes)
    row = table.split("Near-duplicate pairs", 1)[1].split("</tr>", 1)[0]
    assert row.count("not computed") == 1 and "pairs at cosine &gt;= " in row
    import numpy as np

    from capgeo.findings.gamma import gamma_section

    half = np.random.default_rng(0).normal(size=(50, 8))
    vectors = np.concatenate([half, -half]).astype(np.float32)  # mean negative cosine below 0
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    undefined, _ = make_profile()
    undefined["gamma"] = gamma_section(vectors, np.arange(100), batch_sizes=(8,), n_batches=20).to_dict()
    assert undefined["gamma"]["margin_matched_gamma"] is None
    # the summary gives one gamma, the headline; the margin view is in the gamma section
    assert "Margin-matched gamma" not in dict(summary_rows(typed(undefined)))
    assert dict(summary_rows(typed(undefined)))["Suggested gamma"].startswith(f"{undefined['gamma']['suggested_gamma']:.2f}")


def test_compare_labels_tell_apart_files_of_one_name():
    """a/t.txt and b/t.txt under two encoders were labelled "default (1)", "default (2)": nothing said
    which dataset was which."""
    from capgeo.report.compare import profile_labels

    def made(source, spec):
        return typed({"schema": "capgeo.profile/1", "dataset": {"source": source}, "encoder": {"spec": spec}})

    assert profile_labels([made("ca/t.txt", "default"), made("ca/t.txt", "m.pt"), made("cb/t.txt", "default"),
                           made("cb/t.txt", "m.pt")]) == ["ca/t.txt · default", "ca/t.txt · m.pt",
                                                          "cb/t.txt · default", "cb/t.txt · m.pt"]
    assert profile_labels([made("x/a/t.txt", "d"), made("y/a/t.txt", "d")]) == ["x/a/t.txt", "y/a/t.txt"]
    assert profile_labels([made("a.json", "d"), made("b.json", "d")]) == ["a.json", "b.json"]
    assert profile_labels([made("a.json", "d"), made("a.json", "e")]) == ["d", "e"]
