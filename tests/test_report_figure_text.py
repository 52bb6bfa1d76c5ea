"""What a reader sees in the figures: user strings shown literally, labels that do not print over each
other, axes that fit the data, display bins on one grid, and page text that is true of the page.

Regression tests for problems found by opening reports in a browser (compare pages with three
profiles, hostile labels and caption ids, precomputed vectors, narrow screens, right-to-left captions).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from _report_fixtures import make_full_profile, make_profile, typed
from capgeo.errors import CapgeoError
from capgeo.geometry.typed_profile import BatchExample, BatchStatistics, Gamma, Histogram
from capgeo.report import figures
from capgeo.report.compare import render_compare
from capgeo.report.gallery import LEGEND, PAIR_LEGEND
from capgeo.report.html import CaptionIds, caption_html
from capgeo.report.single import render_report

HOSTILE = "R&D <i>v2</i><br>%{y} &lt;"


def test_plotly_text_escapes_plotly_markup_and_templates():
    text = figures.plotly_text(HOSTILE)
    assert "<" not in text and ">" not in text and "%{" not in text
    # plotly decodes exactly these entities back to the characters the user wrote
    decoded = text.replace("&#37;", "%").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert decoded == HOSTILE


def test_labels_and_caption_ids_reach_the_figures_escaped():
    a, _ = make_profile(source="data/a.jsonl")
    b, _ = make_profile(source="data/b.jsonl", seed=3)
    series = [(HOSTILE, typed(a).pairwise, typed(a).hardest_companion), ("plain", typed(b).pairwise,
                                                                          typed(b).hardest_companion)]
    names = [trace.name for trace in figures.cosine_distribution_figure(series).data]
    assert all("<i>" not in name and "<br>" not in name for name in names)
    assert any(name.startswith(figures.plotly_text(HOSTILE) + ": all pairs (mean ") for name in names)
    lengths = figures.length_overlay_figure([(HOSTILE, typed(a).lengths), ("plain", typed(b).lengths)])
    assert lengths.data[0].name == figures.plotly_text(HOSTILE) and "%{" not in lengths.data[0].hovertemplate[:40]
    bars = figures.bucket_composition_figure([(HOSTILE, typed(a).batches), ("plain", typed(b).batches)])
    assert all(x.startswith(figures.plotly_text(HOSTILE) + "<br>B=") for x in bars.data[0].x[:len(a["batches"])])

    example = copy.deepcopy(a["batches"][0]["example"])
    size = len(example["cosine"])
    example["caption_ids"] = [f"<i>id{i}</i>&amp;" for i in range(size)]
    heatmap = figures.batch_heatmap_figure(BatchExample.from_dict(example))
    assert "<i>" not in heatmap.layout.annotations[0].text
    assert all("<i>" not in label for label in heatmap.data[0].x + heatmap.data[0].y)
    assert heatmap.data[0].x[3] == "3 · " + figures.plotly_text(example["caption_ids"][3])


def test_overlaid_means_are_in_the_legend_not_printed_over_each_other():
    """Compare pages put each mean in its line's legend entry: printed beside the lines, the labels of close
    means (three profiles, two kinds each) overlapped."""
    profiles = [make_profile(source=f"data/{name}.jsonl", seed=seed)[0] for seed, name in enumerate("abc")]
    figure = figures.cosine_distribution_figure([(p["dataset"]["source"], typed(p).pairwise,
                                                  typed(p).hardest_companion) for p in profiles])
    assert not [a for a in figure.layout.annotations if a.text.startswith("mean ")]
    names = [trace.name for trace in figure.data]
    for profile in profiles:
        label = profile["dataset"]["source"]
        for kind, section in (("all pairs", "pairwise"), ("hardest companion", "hardest_companion")):
            assert f"{label}: {kind} (mean {profile[section]['mean']:.3f})" in names
    single = figures.cosine_distribution_figure([("a", typed(profiles[0]).pairwise,
                                                  typed(profiles[0]).hardest_companion)])
    labels = [a for a in single.layout.annotations if a.text.startswith("mean ")]
    assert [a.xanchor for a in labels] == ["right", "left"]   # one dataset: the means beside their lines


def test_hardest_negative_figure_draws_the_headline_batch_beside_the_hardest_companion():
    profiles = [make_profile(source=f"data/{name}.jsonl", seed=seed)[0] for seed, name in enumerate("ab")]
    overlay = figures.hardest_negative_figure([(p["dataset"]["source"], typed(p).hardest_companion, typed(p).batches)
                                               for p in profiles])
    first_b = profiles[0]["batches"][0]["batch_size"]
    assert len(overlay.data) == 4   # per profile: hardest companion and the headline batch size only
    assert overlay.data[1].name.startswith(f"data/a.jsonl: hardest in-batch negative, B={first_b} (mean ")
    single = figures.hardest_negative_figure([("a", typed(profiles[0]).hardest_companion,
                                               typed(profiles[0]).batches)])
    assert len(single.data) == 1 + len(profiles[0]["batches"])
    # each line's shares sum to 100% of its values: one count per caption, or per batch row
    for trace in single.data:
        assert sum(trace.y[::2]) == pytest.approx(100)
    saved_before = copy.deepcopy(profiles[0]["batches"])
    for entry in saved_before:
        entry["hardest_in_batch"].pop("histogram")
    assert figures.hardest_in_batch_entries([BatchStatistics.from_dict(entry) for entry in saved_before]) == []


def test_bucket_legend_is_beside_the_bars_not_under_the_tick_labels():
    profiles = [make_profile(source=f"data/a-rather-long-dataset-name-{i}.jsonl", seed=i)[0] for i in range(3)]
    figure = figures.bucket_composition_figure([(p["dataset"]["source"], typed(p).batches) for p in profiles])
    assert figure.layout.legend.orientation in (None, "v")
    assert figure.layout.xaxis.tickangle == 0


def test_heatmap_axes_span_exactly_the_batch():
    example = make_full_profile()["batches"][0]["example"]
    size = len(example["cosine"])
    figure = figures.batch_heatmap_figure(BatchExample.from_dict(example))
    assert tuple(figure.layout.xaxis.range) == (-0.5, size - 0.5)
    assert tuple(figure.layout.yaxis.range) == (size - 0.5, -0.5)  # row 0 at the top


def test_gamma_target_line_is_drawn_once_for_all_batch_sizes():
    gamma = make_full_profile()["gamma"]
    assert len(gamma["batches"]) >= 2
    targets = {entry["suggestion"]["target_share"] for entry in gamma["batches"]}
    figure = figures.gamma_figure(Gamma.from_dict(gamma))
    target_labels = [a for a in figure.layout.annotations if a.text.startswith("target")]
    assert len(target_labels) == len(targets)


def _fine_histogram(values, start, stop, width=0.0005):
    edges = np.round(np.arange(start, stop + width / 2, width), 4)
    counts, _ = np.histogram(values, bins=edges)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def test_rebinned_histograms_share_one_grid_and_full_width_bins():
    rng = np.random.default_rng(4)
    pairwise = _fine_histogram(rng.uniform(-0.24, 0.86, 4000), -0.25, 0.881)
    hardest = _fine_histogram(rng.uniform(0.30, 0.87, 500), 0.2965, 0.881)
    for histogram in (pairwise, hardest):
        edges, counts = figures.rebin(Histogram.from_dict(histogram))
        assert counts.sum() == sum(histogram["counts"])  # nothing lost
        np.testing.assert_allclose(np.diff(edges), 0.01, atol=1e-9)  # the last bin too
        np.testing.assert_allclose(edges / 0.01, np.round(edges / 0.01), atol=1e-6)  # on the 0.01 grid
        # each merged bin holds exactly the values of its range
        fine_edges, fine_counts = np.array(histogram["edges"]), np.array(histogram["counts"])
        for left, right, count in zip(edges[:-1], edges[1:], counts):
            inside = (fine_edges[:-1] >= left - 1e-9) & (fine_edges[1:] <= right + 1e-9)
            assert fine_counts[inside].sum() == count


def _vectors_profile(profile: dict) -> dict:
    profile = copy.deepcopy(profile)
    profile["lengths"] = {"known": False, "n": profile["dataset"]["n_captions"], "mean": None, "median": None,
                          "p95": None, "p99": None, "min": None, "max": None, "context_length": None,
                          "max_tokens": None, "n_truncated": None, "share_truncated": None, "histogram": None}
    return profile


def test_compare_of_precomputed_vectors_leaves_out_the_length_figure():
    a, _ = make_profile(source="data/a.jsonl")
    b, _ = make_profile(source="data/b.jsonl", seed=2)
    page = render_compare([typed(_vectors_profile(a)), typed(_vectors_profile(b))])
    assert 'id="lengths"' not in page and "fig-compare-lengths" not in page
    mixed = render_compare([typed(_vectors_profile(a)), typed(b)])  # one profile with lengths: drawn, for that one
    assert "fig-compare-lengths" in mixed


def test_compare_does_not_claim_different_sizes_for_a_profile_without_companions():
    a, _ = make_profile(source="data/a.jsonl")
    gamma_only = copy.deepcopy(a)
    del gamma_only["hardest_companion"]
    assert "different numbers of captions" not in render_compare([typed(a), typed(gamma_only)])


def test_report_of_precomputed_vectors_says_why_lengths_are_missing():
    page = render_report(typed(_vectors_profile(make_full_profile())))
    assert 'id="lengths"' not in page
    assert "token counts are unknown" in page


def test_near_duplicate_alert_does_not_point_to_a_gallery_the_page_may_not_have():
    from capgeo.report.alerts import near_duplicate_caption_alert

    profile, _ = make_profile()
    profile["near_duplicates"] = {**profile.get("near_duplicates", {}), "share_captions_hardest_above": 0.5,
                                  "n_captions_hardest_above": 40, "threshold": 0.9}
    alert = near_duplicate_caption_alert(typed(profile, check=False))
    assert alert is not None and "gallery" not in alert.message and "capgeo dupes" in alert.message


def test_captions_take_their_direction_from_their_text():
    assert 'dir="auto"' in caption_html("قطة سوداء على كرسي أحمر.", [], CaptionIds())
    assert 'dir="auto"' in caption_html(" ".join(["كلمة"] * 500), [], CaptionIds())


def test_leak_legend_does_not_speak_of_queries():
    assert "query" not in PAIR_LEGEND and "query" in LEGEND
    from capgeo.geometry.typed_profile import Leak
    from capgeo.report.leak import leak_html

    leak = Leak.from_dict({"threshold": 0.9, "train_ids_to_drop": [], "evals": []})
    assert PAIR_LEGEND in leak_html(leak) and "query" not in leak_html(leak)


def test_compare_table_scrolls_instead_of_breaking_words():
    a, _ = make_profile(source="data/a.jsonl")
    b, _ = make_profile(source="data/b.jsonl", seed=2)
    page = render_compare([typed(a), typed(b)])
    assert '<div class="scroll"><table class="compare">' in page
    assert "table.compare th, table.compare td { overflow-wrap:normal" in page


def test_compare_checks_the_label_count_before_encoding(tmp_path, monkeypatch, repo_data):
    from capgeo.report import build

    def must_not_encode(*args, **kwargs):
        raise AssertionError("encoded before the labels were checked")

    monkeypatch.setattr(build, "report_dataset", must_not_encode)
    sources = [repo_data / "docci_sample.jsonlines", repo_data / "coco_sample.json"]
    with pytest.raises(CapgeoError, match="--label given 1 times for 2 profiles"):
        build.write_compare(sources, tmp_path / "c.html", build.CompareOptions(labels=["only-one"]),
                            load_options={"limit": 10})
    with pytest.raises(CapgeoError, match="--label given 3 times for 4 profiles"):
        build.write_compare(sources, tmp_path / "c.html",
                            build.CompareOptions(encoders=["default", "minilm"], labels=["a", "b", "c"]),
                            load_options={"limit": 10})


def test_report_and_compare_refuse_another_capgeo_result_in_one_line(tmp_path):
    from click.testing import CliRunner

    from capgeo.cli import main

    other = tmp_path / "dupes.json"
    other.write_text('{"schema": "capgeo.dupes/1", "pairs": []}\n')
    profile = tmp_path / "p.json"
    a, _ = make_profile(source="data/a.jsonl")
    import json

    profile.write_text(json.dumps(a))
    for args in (["report", str(other), "-o", str(tmp_path / "r.html")],
                 ["compare", str(other), str(profile), "-o", str(tmp_path / "c.html")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert "a capgeo.dupes/1 result, not a profile" in result.output and "caption" not in result.output.lower()
