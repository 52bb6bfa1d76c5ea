"""The caption map (capgeo.map, `capgeo map`): what each point carries, against numpy brute force;
determinism for a seed; the stated sample; and the one Error line without openTSNE."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import caption_set, unit, write_jsonl
from capgeo import map as caption_map
from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.geometry.typed_profile import CaptionMap, Leak

openTSNE = pytest.importorskip("openTSNE", reason="the map extra (openTSNE) is not installed")


def planted(n_groups: int = 12, per_group: int = 2, width: int = 16, seed: int = 0):
    """Captions of n_groups images; captions 0 and 2 (images g0 and g1) nearly identical."""
    rng = np.random.default_rng(seed)
    vectors = np.repeat(rng.normal(size=(n_groups, width)), per_group, axis=0)
    vectors += 0.4 * rng.normal(size=vectors.shape)
    vectors[2] = vectors[0] + 1e-3 * rng.normal(size=width)
    groups = [f"g{i // per_group}" for i in range(n_groups * per_group)]
    return caption_set(groups), unit(vectors)


def brute_hardest(vectors: np.ndarray, groups) -> np.ndarray:
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    same = np.equal.outer(np.asarray(groups), np.asarray(groups))
    similarity[same] = -np.inf
    return similarity.max(axis=1)


def test_each_point_carries_its_caption_hardest_companion_set_and_leak():
    captions, vectors = planted()
    section = caption_map.dataset_map(captions, vectors, seed=3, leak=Leak(train_ids_to_drop=(captions.ids[5],)),
                                      progress=False)
    n = len(captions)
    assert section.n_points == n and not section.sampled
    assert len(section.x) == len(section.y) == n
    assert list(section.caption_ids) == list(captions.ids) and list(section.groups) == list(captions.groups)
    np.testing.assert_allclose(section.hardest_companion, brute_hardest(vectors, captions.groups), atol=1e-4)
    sets = section.near_duplicate_set
    assert sets[0] is not None and sets[0] == sets[2]
    assert sum(s is not None for s in sets) == 2
    assert list(section.leaked) == [i == 5 for i in range(n)]
    figure = caption_map.map_figure(section)
    assert figure.data[0].type == "scattergl"
    assert [trace.name.split(":")[0] for trace in figure.data[1:]] == [
        "in a near-duplicate set (cosine >= 0.95)", "leaks into an evaluation set", "search matches"]
    assert captions.ids[0] in figure.data[0].text[0] and "image g0" in figure.data[0].text[0]


def test_deterministic_for_a_seed_and_a_stated_sample_above_max_points():
    captions, vectors = planted(n_groups=20)
    first = caption_map.map_section(captions, vectors, seed=7, max_points=30, progress=False)
    again = caption_map.map_section(captions, vectors, seed=7, max_points=30, progress=False)
    assert first.x == again.x and first.y == again.y
    assert first.sampled and first.n_points == 30 and first.n_captions == 40
    rows = caption_map.sample_rows(40, 30, 7)
    assert list(first.caption_ids) == [captions.ids[row] for row in rows]
    assert list(rows) == sorted(set(rows.tolist())) and rows.size == 30
    assert "A random sample of 30 of the 40 captions (seed 7)." == caption_map.sample_note(first)
    with pytest.raises(CapgeoError, match="--max-points"):
        caption_map.sample_rows(10, 0, 0)


def test_principal_components_match_numpy_svd():
    rng = np.random.default_rng(1)
    data = rng.normal(size=(200, 12)) @ rng.normal(size=(12, 12))
    centred = data - data.mean(axis=0)
    scores = caption_map._principal_components(centred, 4)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    reference = u[:, :4] * s[:4]
    # the same components up to each one's sign, which the function fixes by the largest loading
    np.testing.assert_allclose(np.abs(scores), np.abs(reference), rtol=1e-4, atol=1e-4)


def test_cli_writes_the_map_page(tmp_path):
    captions, _ = planted()
    data = write_jsonl(tmp_path / "captions.jsonl", captions.ids, captions.groups,
                       [f"a photo of thing {i} & <b>{i % 3}</b>" for i in range(len(captions))])
    output = tmp_path / "map.html"
    result = CliRunner().invoke(main, ["map", str(data), "-o", str(output), "--seed", "2"])
    assert result.exit_code == 0, result.output
    page = output.read_text(encoding="utf-8")
    assert 'id="map-search"' in page and 'data-figure="fig-map"' in page and "scattergl" in page
    assert "<b>1</b>" not in page   # caption text shown, not run
    assert "All 24 captions." in page
    assert "most similar captions (exact cosines)" in page
    # a map saved before the neighbour graph says how it was drawn, not "None"
    old = {"method": "openTSNE", "pca_dimensions": 50, "seed": 0, "n_captions": 1, "n_points": 1, "text_chars": 300,
           "x": [0.0], "y": [0.0], "caption_ids": ["a"], "groups": ["g"], "texts": ["t"]}
    body = caption_map.map_body(CaptionMap.from_dict(old))
    assert "after PCA to 50 dimensions" in body and "None" not in body


def test_cli_map_marks_the_captions_that_leak_and_names_the_evaluation_set(tmp_path):
    captions, _ = planted()
    texts = [f"a photo of thing {i}" for i in range(len(captions))]
    data = write_jsonl(tmp_path / "captions.jsonl", captions.ids, captions.groups, texts)
    evaluation = write_jsonl(tmp_path / "eval.jsonl", ["e0", "e1"], ["x0", "x1"], [texts[3], "an unrelated text"])
    output = tmp_path / "map.html"
    result = CliRunner().invoke(main, ["map", str(data), "-o", str(output), "--leak", str(evaluation)])
    assert result.exit_code == 0, result.output
    page = output.read_text(encoding="utf-8")
    assert "Evaluation sets (--leak)" in page and "eval.jsonl" in page
    assert "leaks into an evaluation set" in page


def test_without_opentsne_one_error_line_and_the_report_leaves_the_map_out(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "openTSNE", None)   # import openTSNE raises ImportError
    captions, vectors = planted()
    data = write_jsonl(tmp_path / "captions.jsonl", captions.ids, captions.groups, captions.texts)
    output = tmp_path / "map.html"
    result = CliRunner().invoke(main, ["map", str(data), "-o", str(output)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: the caption map needs openTSNE, which is not installed: pip install -e '.[map]' "
        "(or: pip install openTSNE)"]
    assert not output.exists()
    from capgeo.report.build import add_map_section

    from capgeo.geometry.typed_profile import Profile

    profile, notes = add_map_section(Profile(), captions, type("E", (), {"vectors": vectors})(), progress=False)
    assert profile.map is None and notes and notes[0].startswith("Caption map: left out: ")
    assert "pip install -e '.[map]'" in notes[0]


def brute_top_k(vectors: np.ndarray, k: int):
    """Each row's k most similar other rows by float64 cosine, ties by lower index."""
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    np.fill_diagonal(similarity, -np.inf)
    columns = np.broadcast_to(np.arange(len(vectors)), similarity.shape)
    order = np.lexsort((columns, -similarity), axis=1)[:, :k]
    return order, np.take_along_axis(similarity, order, axis=1)


def uneven_captions(seed: int = 4):
    """Images of 1 to 9 captions (some more than the graph's k), captions of one image close together."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, size=14)
    groups = [f"g{g}" for g, size in enumerate(sizes) for _ in range(size)]
    vectors = np.repeat(rng.normal(size=(len(sizes), 12)), sizes, axis=0) + 0.7 * rng.normal(size=(len(groups), 12))
    return caption_set(groups), unit(vectors)


def test_the_neighbour_graph_is_numpy_brute_force_top_k():
    from capgeo.geometry.pairwise import scan_pairs

    captions, vectors = uneven_captions()
    codes = captions.group_codes
    for k in (3, 6, 11):
        expected_index, expected_cosine = brute_top_k(vectors, k)
        scan = scan_pairs(vectors, codes, top_k=k, histograms=False, progress=False)
        for index, cosine in (caption_map.knn_from_scan(scan, codes, vectors, k), caption_map.knn_graph(vectors, k)):
            np.testing.assert_array_equal(index, expected_index)
            np.testing.assert_allclose(cosine, expected_cosine, atol=1e-5)
    with pytest.raises(CapgeoError, match="top 12"):
        caption_map.knn_from_scan(scan, codes, vectors, 12)


def test_the_map_projects_the_pass_neighbour_graph(monkeypatch):
    captions, vectors = uneven_captions()
    seen = {}
    real = caption_map.project

    def recording(points, **options):
        seen["neighbours"] = options["neighbours"]
        return real(points, **options)

    monkeypatch.setattr(caption_map, "project", recording)
    section = caption_map.dataset_map(captions, vectors, seed=1, progress=False)
    k = caption_map.neighbour_count(len(captions))
    assert section.neighbours == k == min(len(captions) - 1, 90)
    index, cosine = seen["neighbours"]
    expected_index, expected_cosine = brute_top_k(vectors, k)
    np.testing.assert_array_equal(index, expected_index)
    np.testing.assert_allclose(cosine, expected_cosine, atol=1e-5)
    # a sample gets the graph of its own points
    section = caption_map.dataset_map(captions, vectors, seed=1, max_points=30, progress=False)
    rows = caption_map.sample_rows(len(captions), 30, 1)
    np.testing.assert_array_equal(seen["neighbours"][0], brute_top_k(vectors[rows], 29)[0])


def test_two_runs_with_one_seed_write_identical_pages(tmp_path):
    captions, _ = planted(n_groups=15)
    data = write_jsonl(tmp_path / "captions.jsonl", captions.ids, captions.groups,
                       [f"caption {i}" for i in range(len(captions))])
    pages = []
    for run, seed in (("run-a", "5"), ("run-b", "5"), ("run-c", "6")):
        output = tmp_path / run / "map.html"   # one name: the page quotes its command
        result = CliRunner().invoke(main, ["map", str(data), "-o", str(output), "--seed", seed])
        assert result.exit_code == 0, result.output
        pages.append(output.read_bytes().replace(run.encode(), b"run-x"))
    assert pages[0] == pages[1]
    assert pages[0] != pages[2]
