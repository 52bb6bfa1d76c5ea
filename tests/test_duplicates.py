"""Near-duplicate mining, examples and components (capgeo.findings.duplicates) against brute force."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from capgeo.captions.model import CaptionSet
from capgeo.errors import CapgeoError
from capgeo.findings import duplicates
from capgeo.findings.duplicates import (
    IncompleteMiningWarning,
    dupes_section,
    examples_at_quantiles,
    near_duplicate_components,
    near_duplicate_pairs,
    section_rows,
    write_rows,
)
from capgeo.findings.dupes_options import ExampleOptions, MiningOptions, PairListOptions, SetOptions
from capgeo.geometry.pairwise import scan_pairs
from capgeo.geometry.typed_profile import Dupes

TOLERANCE = 1e-5  # float32 matmul (torch) against float64 brute force


def caption_set(group_sizes, texts=None) -> CaptionSet:
    groups = [f"img{g:03d}" for g, size in enumerate(group_sizes) for _ in range(size)]
    n = len(groups)
    texts = texts or [f"caption {i} of {group}" for i, group in enumerate(groups)]
    table = pl.DataFrame({"caption_id": [f"c{i:04d}" for i in range(n)], "group_id": groups,
                          "split": [None] * n, "text": texts})
    return CaptionSet(table, Path("synthetic"), "test")


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def grouped_vectors(n_groups=40, per_group=5, dim=16, spread=0.35, seed=0):
    """Captions of one group cluster around the group's centre, as COCO's five captions of one image do."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_groups, dim))
    vectors = np.repeat(centres, per_group, axis=0) + spread * rng.normal(size=(n_groups * per_group, dim))
    return unit(vectors)


def brute_pairs(vectors, group_codes):
    """Every different-group pair (a < b, cosine in float64), most similar first, ties by indices."""
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    a, b = np.triu_indices(len(vectors), k=1)
    keep = group_codes[a] != group_codes[b]
    pairs = [(float(similarity[i, j]), int(i), int(j)) for i, j in zip(a[keep], b[keep])]
    pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
    return pairs


def assert_same_pairs(mined, expected):
    assert [(p.index_a, p.index_b) for p in mined] == [(a, b) for _, a, b in expected]
    assert np.allclose([p.cosine for p in mined], [c for c, _, _ in expected], atol=TOLERANCE)


def threshold_between(pairs, position):
    """A threshold halfway between the cosines at ``position - 1`` and ``position`` (no pair sits near it)."""
    return (pairs[position - 1][0] + pairs[position][0]) / 2


# --------------------------------------------------------------------------- mining


def test_same_group_pairs_are_never_reported_even_when_most_similar():
    captions = caption_set([5] * 40)
    vectors = grouped_vectors()
    codes = captions.group_codes
    # the construction really makes same-group captions the most similar ones
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    assert np.mean(codes[similarity.argmax(axis=1)] == codes) > 0.9
    mined = near_duplicate_pairs(captions, vectors, threshold=None, limit=100)
    assert len(mined) == 100
    assert all(codes[p.index_a] != codes[p.index_b] for p in mined)
    expected = brute_pairs(vectors, codes)
    assert_same_pairs(mined, expected[:100])


def test_threshold_only_returns_every_pair_above_it_in_order():
    captions = caption_set([5] * 40)
    vectors = grouped_vectors(seed=1)
    expected = brute_pairs(vectors, captions.group_codes)
    threshold = threshold_between(expected, 150)
    mined = near_duplicate_pairs(captions, vectors, threshold=threshold, limit=None, top_k=3)
    assert_same_pairs(mined, expected[:150])
    assert all(p.index_a < p.index_b for p in mined)
    assert len({(p.index_a, p.index_b) for p in mined}) == len(mined)


def test_threshold_and_limit_together():
    captions = caption_set([5] * 40)
    vectors = grouped_vectors(seed=2)
    expected = brute_pairs(vectors, captions.group_codes)
    threshold = threshold_between(expected, 30)
    assert_same_pairs(near_duplicate_pairs(captions, vectors, threshold=threshold, limit=10), expected[:10])
    # the threshold binds before the limit
    assert_same_pairs(near_duplicate_pairs(captions, vectors, threshold=threshold, limit=500), expected[:30])


def test_ties_are_ordered_by_caption_indices():
    # four captions of four groups, all pairs at cosine exactly 0 or 1
    vectors = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=np.float32)
    captions = caption_set([1, 1, 1, 1])
    mined = near_duplicate_pairs(captions, vectors, limit=None, threshold=-1.0)
    assert [(p.index_a, p.index_b, p.cosine) for p in mined] == [
        (0, 2, 1.0), (1, 3, 1.0), (0, 1, 0.0), (0, 3, 0.0), (1, 2, 0.0), (2, 3, 0.0)]


def crowded_vectors(seed=3):
    """30 captions of 30 different groups crowded together, plus 90 spread-out ones."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=16)
    crowd = base + 0.2 * rng.normal(size=(30, 16))
    others = rng.normal(size=(90, 16))
    return unit(np.vstack([crowd, others]))


def test_crowded_captions_are_re_searched_exactly_when_vectors_are_given():
    captions = caption_set([1] * 120)
    vectors = crowded_vectors()
    expected = [p for p in brute_pairs(vectors, captions.group_codes) if p[0] >= 0.9]
    assert len(expected) >= 30 * 29 // 2  # each crowded caption has 29 companions above 0.9
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteMiningWarning)
        mined = near_duplicate_pairs(captions, vectors, threshold=0.9, limit=None, top_k=3)
    assert_same_pairs(mined, expected)


def test_a_scan_too_short_for_the_threshold_warns_with_the_count():
    captions = caption_set([1] * 120)
    vectors = crowded_vectors()
    scan = scan_pairs(vectors, captions.group_codes, top_k=3, histograms=False)
    with pytest.warns(IncompleteMiningWarning, match=r"^30 captions have 3 or more"):
        mined = near_duplicate_pairs(captions, scan, threshold=0.9, limit=None)
    expected = {(a, b) for c, a, b in brute_pairs(vectors, captions.group_codes) if c >= 0.9}
    found = {(p.index_a, p.index_b) for p in mined}
    assert found < expected  # honest: a strict subset, and the warning said so
    # a scan with enough companions per caption is complete and silent
    long_scan = scan_pairs(vectors, captions.group_codes, top_k=40, histograms=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteMiningWarning)
        complete = near_duplicate_pairs(captions, long_scan, threshold=0.9, limit=None)
    assert {(p.index_a, p.index_b) for p in complete} == expected


def test_a_limit_larger_than_the_scan_is_re_searched_with_vectors_and_warned_without():
    captions = caption_set([1] * 120)
    vectors = crowded_vectors(seed=4)
    expected = brute_pairs(vectors, captions.group_codes)
    scan = scan_pairs(vectors, captions.group_codes, top_k=2, histograms=False)
    # reusing a short scan with the vectors: crowded rows are re-searched, the answer is exact
    assert_same_pairs(near_duplicate_pairs(captions, vectors, limit=60, scan=scan), expected[:60])
    with pytest.warns(IncompleteMiningWarning):
        near_duplicate_pairs(captions, scan, limit=60)


def test_bad_arguments_are_capgeo_errors():
    captions = caption_set([2, 2])
    vectors = unit(np.eye(4, dtype=np.float32))
    with pytest.raises(CapgeoError, match="threshold, a limit"):
        near_duplicate_pairs(captions, vectors, threshold=None, limit=None)
    with pytest.raises(CapgeoError, match="3 rows for 4 captions"):
        near_duplicate_pairs(captions, vectors[:3], limit=5)
    with pytest.raises(CapgeoError, match="threshold"):
        near_duplicate_pairs(captions, vectors, threshold=1.5)
    with pytest.raises(CapgeoError, match="quantile"):
        examples_at_quantiles(captions, vectors, quantiles=(1.2,))


def test_too_many_pairs_is_an_error_not_a_memory_blow_up():
    captions = caption_set([1] * 120)
    with pytest.raises(CapgeoError, match="more than 100 caption pairs"):
        near_duplicate_pairs(captions, crowded_vectors(), threshold=0.9, limit=None, top_k=2, max_pairs=100)


# --------------------------------------------------------------------------- examples


def test_examples_of_a_dataset_smaller_than_the_neighbours_asked_for_show_those_it_has():
    """Two images: each caption has one other-image caption, and the default 3 neighbours failed
    with 'the pair scan has 1 companions per caption'."""
    captions = caption_set([1, 1])
    vectors = unit(np.array([[1.0, 0.2, 0.0], [0.9, 0.1, 0.3]]))
    examples = examples_at_quantiles(captions, vectors, quantiles=(0.9,), n_per_quantile=1, neighbours=3)
    assert len(examples) == 1
    (neighbour, cosine), = examples[0].neighbours
    assert neighbour == 1 - examples[0].index
    assert cosine == pytest.approx(float(vectors[0].astype(np.float64) @ vectors[1].astype(np.float64)), abs=1e-6)


@pytest.mark.parametrize("quantile, n_per_quantile", [(1.2 / 199, 2), (0.5, 2), (0.5, 3), (0.9, 4), (1.0, 2)])
def test_examples_are_the_ranks_nearest_to_the_quantile_position(quantile, n_per_quantile):
    """The queries are the n ranks nearest to q (n - 1): with an even n the window leaned one rank
    low whenever the position rounded down (1.2 -> ranks 0, 1 instead of 1, 2)."""
    captions = caption_set([5] * 40)
    vectors = grouped_vectors(seed=5)
    codes = captions.group_codes
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    similarity[codes[:, None] == codes[None, :]] = -np.inf
    ranks = np.argsort(np.argsort(similarity.max(axis=1), kind="stable"), kind="stable")
    position = quantile * 199
    by_distance = sorted(range(200), key=lambda rank: (abs(rank - position), rank))[:n_per_quantile]
    examples = examples_at_quantiles(captions, vectors, quantiles=(quantile,), n_per_quantile=n_per_quantile)
    assert sorted(int(ranks[example.index]) for example in examples) == sorted(by_distance)


def test_examples_sit_at_the_quantile_with_their_nearest_other_group_captions():
    captions = caption_set([5] * 40)
    vectors = grouped_vectors(seed=5)
    codes = captions.group_codes
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    similarity[codes[:, None] == codes[None, :]] = -np.inf
    hardest = similarity.max(axis=1)
    ranks = np.argsort(np.argsort(hardest, kind="stable"), kind="stable")
    examples = examples_at_quantiles(captions, vectors, quantiles=(0.5, 0.9), n_per_quantile=3, neighbours=3)
    assert [e.quantile for e in examples] == [0.5, 0.5, 0.5, 0.9, 0.9, 0.9]
    for example in examples:
        assert example.target_cosine == pytest.approx(np.quantile(hardest, example.quantile), abs=TOLERANCE)
        centre = example.quantile * (len(hardest) - 1)
        assert abs(ranks[example.index] - centre) <= 2
        assert example.hardest_cosine == pytest.approx(hardest[example.index], abs=TOLERANCE)
        nearest = np.argsort(-similarity[example.index], kind="stable")[:3]
        assert [j for j, _ in example.neighbours] == nearest.tolist()
        assert np.allclose([c for _, c in example.neighbours], similarity[example.index, nearest], atol=TOLERANCE)
        assert all(codes[j] != codes[example.index] for j, _ in example.neighbours)


# --------------------------------------------------------------------------- components


def brute_components(vectors, group_codes, threshold):
    """Union-find over brute-force pairs; per component: members, bottleneck link, min member cosine."""
    edges = [p for p in brute_pairs(vectors, group_codes) if p[0] >= threshold]
    parent = list(range(len(vectors)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # Kruskal on descending cosine: the last edge that merges a component is its bottleneck
    bottleneck = {}
    for cosine, a, b in edges:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[root_a] = root_b
            bottleneck[root_b] = min(cosine, bottleneck.pop(root_a, 2.0), bottleneck.get(root_b, 2.0))
    members = {}
    for i in {a for _, a, _ in edges} | {b for _, _, b in edges}:
        members.setdefault(find(i), []).append(i)
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    result = {}
    for root, indices in members.items():
        indices = tuple(sorted(indices))
        block = similarity[np.ix_(indices, indices)]
        result[indices] = (bottleneck[root], block[np.triu_indices(len(indices), k=1)].min())
    return result


def test_components_match_brute_force_and_expose_chaining():
    # a chain: each caption close to the next, the ends far apart
    angles = np.array([0.0, 0.3, 0.6, 0.9, 1.2])
    chain = np.stack([np.cos(angles), np.sin(angles), np.zeros(5), np.zeros(5)], axis=1)
    rng = np.random.default_rng(6)
    vectors = unit(np.vstack([chain, rng.normal(size=(60, 4))]))
    captions = caption_set([1] * 65)
    threshold = float(np.cos(0.3)) - 1e-4
    expected = brute_components(vectors, captions.group_codes, threshold)
    components = near_duplicate_components(captions, vectors, threshold, top_k=2)
    found = {c.members: (c.weakest_link, c.min_member_cosine) for c in components}
    assert set(found) == set(expected)
    for members, (weakest, member_min) in expected.items():
        assert found[members][0] == pytest.approx(weakest, abs=TOLERANCE)
        assert found[members][1] == pytest.approx(member_min, abs=TOLERANCE)
    the_chain = next(c for c in components if set(range(5)) <= set(c.members))
    assert the_chain.min_member_cosine < threshold - 0.5  # members far below the threshold
    assert [c.size for c in components] == sorted((c.size for c in components), reverse=True)


def test_components_of_grouped_captions_match_brute_force():
    captions = caption_set([5] * 40)
    vectors = grouped_vectors(seed=7, spread=0.6)
    expected_pairs = brute_pairs(vectors, captions.group_codes)
    threshold = threshold_between(expected_pairs, 60)
    expected = brute_components(vectors, captions.group_codes, threshold)
    components = near_duplicate_components(captions, vectors, threshold)
    assert {c.members: pytest.approx(c.weakest_link, abs=TOLERANCE) for c in components} == {
        members: weakest for members, (weakest, _) in expected.items()}
    assert sum(c.n_edges for c in components) == 60


# --------------------------------------------------------------------------- section and files


def texts_for(n):
    words = ["dog", "dogs", "cat", "red", "bus", "buses", "café", "berries", "berry", "green", "park", "Ωmega"]
    rng = np.random.default_rng(8)
    return [" ".join(rng.choice(words, size=6)) + ", a photo." for _ in range(n)]


def test_dupes_section_is_json_ready_and_its_rows_round_trip(tmp_path):
    captions = caption_set([5] * 40, texts=texts_for(200))
    vectors = grouped_vectors(seed=9)
    typed = dupes_section(captions, vectors, pairs=PairListOptions(threshold=None, limit=20),
                          examples=ExampleOptions(quantiles=(0.5, 0.9), per_quantile=2),
                          sets=SetOptions(threshold_between(brute_pairs(vectors, captions.group_codes), 15)))
    section = typed.to_dict()
    assert Dupes.from_dict(section) == typed  # the typed section is what its JSON reads back as
    text = json.dumps(section, allow_nan=False)
    assert json.loads(text) == section
    assert len(section["pairs"]) == 20 and len(section["examples"]) == 4
    assert sum(c["n_edges"] for c in section["components"]) == 15
    assert any("chain" in note for note in section["warnings"])
    for row in section["pairs"]:
        for side in ("a", "b"):
            for span in row[f"spans_{side}"]:
                assert row[f"text_{side}"][span["start"]:span["end"]]
    for rows in (section["pairs"], duplicates.flat_example_rows(typed), section["components"]):
        for fmt in ("jsonl", "csv", "parquet"):
            path = tmp_path / f"rows.{fmt}"
            write_rows(rows, fmt, str(path))
            assert read_rows(path, fmt) == normalised(rows)
    assert section_rows(typed) == section["components"]


def normalised(rows):
    """Rows as JSON would give them back (tuples as lists)."""
    return json.loads(json.dumps(rows))


def read_rows(path, fmt):
    if fmt == "jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if fmt == "parquet":
        return pl.read_parquet(path).to_dicts()
    frame = pl.read_csv(path, infer_schema=False)  # every cell a string, decoded below
    rows = []
    for row in frame.to_dicts():
        decoded = {}
        for key, value in row.items():
            decoded[key] = None if value is None else _decode_csv(value)
        rows.append(decoded)
    return rows


def _decode_csv(value: str):
    if value in ("true", "false"):
        return value == "true"
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        return value
    # ids like "c0001" stay strings; numbers and JSON lists come back typed
    return decoded if isinstance(decoded, (list, dict, int, float)) else value


def test_rows_to_a_stream_and_errors():
    rows = [{"id_a": "x", "spans_a": [{"start": 0, "end": 1, "kind": "shared", "word": "x"}], "cosine": 0.5}]
    stream = io.StringIO()
    write_rows(rows, "jsonl", None, stream=stream)
    assert [json.loads(line) for line in stream.getvalue().splitlines()] == rows
    stream = io.StringIO()
    write_rows(rows, "csv", None, stream=stream)
    assert json.loads(pl.read_csv(io.StringIO(stream.getvalue()))["spans_a"][0]) == rows[0]["spans_a"]
    binary = io.BytesIO()
    text = io.TextIOWrapper(binary)  # (kept: collected, it closes the bytes below it)
    write_rows(rows, "parquet", None, stream=text)  # a redirected stdout gets the file's bytes
    assert pl.read_parquet(io.BytesIO(binary.getvalue()))["id_a"].to_list() == ["x"]
    with pytest.raises(CapgeoError, match="standard output is closed"):
        write_rows(rows, "parquet", None)


def test_a_failed_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "rows.jsonl"
    target.write_text("old\n")
    with pytest.raises(TypeError):
        write_rows([{"bad": object()}], "jsonl", str(target))
    assert target.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [target]


def test_a_large_crowd_with_a_limit_is_fine_and_exact():
    # 200 captions of 200 groups at cosine 1: 19,900 pairs tie at the top, far more than max_pairs
    rng = np.random.default_rng(10)
    vectors = unit(np.vstack([np.tile(rng.normal(size=8), (200, 1)), rng.normal(size=(20, 8))]))
    captions = caption_set([1] * 220)
    mined = near_duplicate_pairs(captions, vectors, limit=5, top_k=2, max_pairs=100)
    # all ties at cosine 1 (to float32 rounding): the order falls back to the indices
    assert [(p.index_a, p.index_b) for p in mined] == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]


def test_unnormalised_and_broken_vectors():
    captions = caption_set([5] * 40)
    vectors = grouped_vectors(seed=11)
    scaled = vectors * np.linspace(0.5, 3.0, len(vectors), dtype=np.float32)[:, None]
    expected = brute_pairs(vectors, captions.group_codes)
    assert_same_pairs(near_duplicate_pairs(captions, scaled, limit=20, top_k=1), expected[:20])
    scaled[7] = 0
    with pytest.raises(CapgeoError, match="row 7 is all zeros"):
        near_duplicate_pairs(captions, scaled, limit=20)


def test_dupes_section_from_a_scan_reports_incomplete_mining_in_its_warnings():
    captions = caption_set([1] * 120)
    vectors = crowded_vectors()
    scan = scan_pairs(vectors, captions.group_codes, top_k=3, histograms=False)
    section = dupes_section(captions, scan, pairs=PairListOptions(threshold=0.9, limit=None)).to_dict()
    assert any(note.startswith("30 captions have 3 or more") for note in section["warnings"])
    assert all(row["cosine"] >= 0.9 for row in section["pairs"])
    complete = dupes_section(captions, vectors, pairs=PairListOptions(threshold=0.9, limit=None), examples=None,
                             mining=MiningOptions(top_k=3)).to_dict()
    assert complete["warnings"] == [] and len(complete["pairs"]) > len(section["pairs"])


@pytest.mark.parametrize("seed", range(6))
def test_links_that_cannot_reach_the_answer_are_dropped_before_sorting(seed):
    from types import SimpleNamespace

    from capgeo.findings.duplicates import _ordered, _scan_candidates

    # companion lists with coarse cosines (many ties), pairs seen from both ends with values
    # one float32 step apart, padding, and rows shorter than k
    rng = np.random.default_rng(seed)
    n, k = 300, 6
    index = np.stack([rng.choice(np.delete(np.arange(n), row), size=k, replace=False) for row in range(n)])
    cosine = np.round(rng.uniform(0.2, 1.0, size=(n, k)), 2)
    for row, column in zip(*np.nonzero(rng.random((n, k)) < 0.3)):
        other = index[row, column]
        index[other, 0], cosine[other, 0] = row, np.nextafter(np.float32(cosine[row, column]), np.float32(2))
    index[::17, -2:], cosine[::17, -2:] = -1, np.nan
    order = np.lexsort((index, -np.nan_to_num(cosine, nan=-9)), axis=1)
    scan = SimpleNamespace(companion_index=np.take_along_axis(index, order, 1),
                           companion_cosine=np.take_along_axis(cosine, order, 1).astype(np.float32))
    for threshold, limit in ((None, 1), (None, 7), (None, 50), (0.9, None), (0.9, 5), (0.5, 400), (None, 5000)):
        assert _ordered(_scan_candidates(scan, threshold, limit), threshold, limit) \
            == _ordered(_scan_candidates(scan), threshold, limit)


def test_unit_vectors_are_searched_as_given_like_the_scan_does():
    from capgeo.findings.duplicates import _vectors_of

    rng = np.random.default_rng(0)
    unit = rng.normal(size=(70_000, 4)).astype(np.float32)   # more rows than one norm chunk
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    np.testing.assert_array_equal(_vectors_of(unit), unit)  # the pass's prepare_inputs keeps them too
    scaled = _vectors_of(unit * np.float32(3))
    np.testing.assert_allclose(np.linalg.norm(scaled, axis=1), 1, atol=1e-6)
    broken = unit.copy()
    broken[66_000] = 0
    with pytest.raises(CapgeoError, match="row 66000 is all zeros"):
        _vectors_of(broken)


def test_the_chaining_warning_only_where_a_component_chains():
    """Every run with components printed the warning, even when each component was one pair."""
    rng = np.random.default_rng(3)
    base = unit(rng.normal(size=(40, 16)))
    vectors = base.copy()
    vectors[1] = base[0] + 0.01 * rng.normal(size=16)  # one near-twin pair across two images
    vectors = unit(vectors)
    captions = caption_set([1] * 40)
    pairs_only = dupes_section(captions, vectors, pairs=None, examples=None, sets=SetOptions(0.95)).to_dict()
    assert len(pairs_only["components"]) == 1 and not any("chain" in note for note in pairs_only["warnings"])
    angles = np.radians([0, 20, 40])  # a chain: neighbours at cosine 0.94, the ends at 0.77
    vectors[2:5] = 0
    vectors[2:5, 0], vectors[2:5, 1] = np.cos(angles), np.sin(angles)
    chained = dupes_section(captions, unit(vectors), pairs=None, examples=None, sets=SetOptions(0.9)).to_dict()
    assert any("chain" in note for note in chained["warnings"])


# --------------------------------------------------------------------------- the three modes


def _brute_pairs(vectors, captions):
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    codes = np.asarray(captions.group_codes)
    n = len(captions)
    return sorted(((similarity[i, j], i, j) for i in range(n) for j in range(i + 1, n) if codes[i] != codes[j]),
                  key=lambda t: (-t[0], t[1], t[2]))


def test_pairs_section_lists_every_pair_without_threshold_or_top_as_brute_force_does():
    from capgeo.findings.duplicates import pairs_section

    vectors = grouped_vectors(n_groups=12, per_group=3)
    captions = caption_set([3] * 12)
    expected = _brute_pairs(vectors, captions)
    every = pairs_section(captions, vectors, top=0).to_dict()
    assert [(row["index_a"], row["index_b"]) for row in every["pairs"]] == [(i, j) for _, i, j in expected]
    assert np.allclose([row["cosine"] for row in every["pairs"]], [c for c, _, _ in expected], atol=TOLERANCE)
    assert every["threshold"] is None and every["limit"] is None and every["examples"] is None
    top = pairs_section(captions, vectors, threshold=0.2, top=7).to_dict()
    assert [(row["index_a"], row["index_b"]) for row in top["pairs"]] == [(i, j) for c, i, j in expected[:7]]
    assert top["near_duplicates"]["n_pairs"] == sum(c >= 0.95 for c, _, _ in expected)


def test_examples_and_sets_sections_against_brute_force():
    from scipy.sparse.csgraph import connected_components

    from capgeo.findings.duplicates import examples_section, sets_section

    vectors = grouped_vectors(n_groups=15, per_group=2, spread=0.6, seed=3)
    captions = caption_set([2] * 15)
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    codes = np.asarray(captions.group_codes)
    similarity[codes[:, None] == codes[None, :]] = -np.inf
    hardest = similarity.max(axis=1)
    section = examples_section(captions, vectors, quantiles=(0.5, 1.0), per_quantile=1, neighbours=2).to_dict()
    assert section["pairs"] is None and section["components"] is None
    by_quantile = {example["quantile"]: example for example in section["examples"]}
    # the two ends of the closest pair tie: the query is the later one (equal cosines keep caption order)
    assert by_quantile[1.0]["query"]["index"] == int(np.flatnonzero(hardest >= hardest.max() - TOLERANCE)[-1])
    assert by_quantile[0.5]["target_cosine"] == pytest.approx(float(np.quantile(hardest, 0.5)), abs=TOLERANCE)
    neighbours = [row["index_b"] for row in by_quantile[1.0]["neighbours"]]
    assert neighbours == list(np.argsort(-similarity[by_quantile[1.0]["query"]["index"]], kind="stable")[:2])

    threshold = float(np.quantile(hardest, 0.6))
    sets = sets_section(captions, vectors, threshold=threshold, keep="first").to_dict()
    _, labels = connected_components(similarity >= threshold, directed=False)
    expected = sorted((sorted(np.flatnonzero(labels == label).tolist()) for label in np.unique(labels)
                       if (labels == label).sum() > 1), key=lambda members: (-len(members), members[0]))
    assert sorted(row["indices"] for row in sets["components"]) == sorted(expected)
    assert sets["components_threshold"] == threshold and sets["threshold"] is None
    assert sets["dedup"]["n_captions_dropped"] == sum(len(members) - 1 for members in expected)


def test_the_gallery_is_the_pairs_and_examples_of_one_section():
    from capgeo.findings.duplicates import examples_section, gallery_section, pairs_section

    vectors = grouped_vectors(n_groups=20, per_group=3)
    captions = caption_set([3] * 20)
    gallery = gallery_section(captions, vectors, pairs=5, quantiles=(0.5, 0.9),
                              near_duplicate_threshold=0.9).to_dict()
    pairs = pairs_section(captions, vectors, top=5).to_dict()
    examples = examples_section(captions, vectors, quantiles=(0.5, 0.9), per_quantile=1).to_dict()
    assert gallery["pairs"] == pairs["pairs"] and gallery["examples"] == examples["examples"]
    assert gallery["near_duplicates"]["threshold"] == 0.9


def test_the_pair_list_is_one_typed_result_for_the_command_and_the_python_api():
    """pairs_section (`capgeo dupes`) and capgeo.near_duplicates return one class: typed rows, the
    dict rows and totals the API always had, and to_dict() the JSON of its typed section."""
    import capgeo
    from capgeo.findings.duplicates import NearDuplicatePairs, pairs_section
    from capgeo.geometry.typed_profile import DupesPair

    vectors = grouped_vectors(n_groups=12, per_group=3)
    captions = caption_set([3] * 12)
    found = pairs_section(captions, vectors, threshold=0.2, top=7)
    assert capgeo.NearDuplicates is NearDuplicatePairs and isinstance(found, NearDuplicatePairs)
    assert all(isinstance(row, DupesPair) for row in found.rows) and len(found.rows) == 7
    assert list(found.pairs) == [row.to_dict() for row in found.rows] == found.to_dict()["pairs"]
    expected = _brute_pairs(vectors, captions)
    assert found.n_near_duplicate_pairs == sum(c >= 0.95 for c, _, _ in expected)
    assert found.top == 7 and found.threshold == 0.2 and found.warnings == ()
    assert found.to_polars().height == 7
    found.pairs[0]["cosine"] = 2.0  # a copy: the result stays as it was
    assert found.pairs[0]["cosine"] <= 1.0 + TOLERANCE


def test_mining_options_as_an_object_or_as_keywords_mine_the_same_pairs():
    vectors = grouped_vectors(n_groups=12, per_group=3)
    captions = caption_set([3] * 12)
    given = near_duplicate_pairs(captions, vectors, limit=15, mining=MiningOptions(top_k=2, block_size=8))
    assert given == near_duplicate_pairs(captions, vectors, limit=15, top_k=2, block_size=8)
    assert_same_pairs(given, _brute_pairs(vectors, captions)[:15])
