"""`capgeo dupes-sets --keep/--drop-list`: the keep policies, the summary's
counts and hardest-companion mean after dropping, against brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import brute_components, caption_set, unit, write_jsonl
from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.findings.dedup import choose_kept, hardest_after_drop
from capgeo.findings.dupes_options import MiningOptions, SetOptions
from capgeo.findings.duplicates import Component, dupes_section
from capgeo.geometry.pairwise import scan_pairs


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})


def component(*members):
    return Component(tuple(members), 0.9, 0.95, len(members) - 1, None)


def test_keep_policies():
    texts = ["mid length", "the longest caption of all", "short", "x", "a b", "abc"]
    sets = [component(0, 1, 2), component(3, 4, 5)]
    assert [k.tolist() for k in choose_kept(texts, sets, "first")] == [[0, 3], [1, 2, 4, 5]]
    assert choose_kept(texts, sets, "longest")[0].tolist() == [1, 4]  # "a b" and "abc" tie: the first
    assert choose_kept(texts, sets, "shortest")[0].tolist() == [2, 3]
    kept, dropped = choose_kept(texts, sets, "random", seed=4)
    assert len(kept) == 2 and sorted([*kept, *dropped]) == list(range(6))
    assert choose_kept(texts, sets, "random", seed=4)[0].tolist() == kept.tolist()  # seeded
    with pytest.raises(CapgeoError, match="--keep: expected one of first, longest, shortest, random"):
        choose_kept(texts, sets, "biggest")


def brute_hardest(vectors, codes, alive):
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    allowed = (codes[:, None] != codes[None, :]) & alive[None, :] & alive[:, None]
    similarity[~allowed] = -np.inf
    hardest = similarity.max(axis=1)
    hardest[~alive | ~np.isfinite(hardest)] = np.nan
    return hardest


@pytest.mark.parametrize("top_k", [1, 3, 20])
def test_hardest_after_drop_matches_brute_force(top_k):
    rng = np.random.default_rng(0)
    vectors = unit(rng.normal(size=(50, 8)))
    codes = np.arange(50) // 2
    scan = scan_pairs(vectors, codes, top_k=top_k, histograms=False, block_size=16)
    # drop the hardest companions of many rows, so short lists must be re-searched
    dropped = np.unique(np.asarray(scan.companion_index)[::3, 0])
    alive = np.ones(50, dtype=bool)
    alive[dropped] = False
    np.testing.assert_allclose(hardest_after_drop(vectors, codes, scan, dropped, block_size=16),
                               brute_hardest(vectors, codes, alive), atol=1e-6)


@pytest.fixture
def near_duplicate_data(tmp_path):
    rng = np.random.default_rng(5)
    n = 40
    vectors = unit(rng.normal(size=(n, 10)))
    for row, base in ((2, 0), (4, 0), (13, 11), (15, 11)):  # two sets: {0, 2, 4} and {11, 13, 15}
        vectors[row] = unit((vectors[base] + 0.05 * rng.normal(size=10))[None])[0]
    ids = [f"cap{i}" for i in range(n)]
    groups = [f"img{i // 2}" for i in range(n)]  # 0 and 1 share an image, as do 4 and 5, ...
    texts = [f"caption {i}" + " word" * (i % 7) for i in range(n)]
    data = write_jsonl(tmp_path / "data.jsonl", ids, groups, texts)
    np.savez(tmp_path / "vectors.npz", vectors=vectors, ids=np.array(ids))
    return data, f"vectors:{tmp_path / 'vectors.npz'}", vectors, np.arange(n) // 2, texts


def test_drop_list_and_summary_against_brute_force(near_duplicate_data, tmp_path):
    data, encoder, vectors, codes, texts = near_duplicate_data
    drop, report = tmp_path / "drop.txt", tmp_path / "dupes.json"
    result = run("dupes-sets", data, "--encoder", encoder, "--threshold", 0.9, "--keep", "longest",
                 "--drop-list", drop, "--json", report)
    assert result.exit_code == 0, result.output
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    similarity[codes[:, None] == codes[None, :]] = -np.inf
    sets = brute_components(similarity, 0.9)
    assert {frozenset({0, 2, 4}), frozenset({11, 13, 15})} <= sets
    # keep the longest text of each set (the first on a tie), drop the others
    dropped = sorted(m for members in sets for m in members
                     if m != max(sorted(members), key=lambda i: len(texts[i])))
    assert {0, 2, 11, 15} <= set(dropped) and not {4, 13} & set(dropped)
    assert drop.read_text().split() == [f"cap{i}" for i in dropped]
    dedup = json.loads(report.read_text())["dedup"]
    alive = np.ones(len(codes), dtype=bool)
    alive[dropped] = False
    assert dedup["n_captions_dropped"] == len(dropped) and dedup["n_captions_after"] == 40 - len(dropped)
    assert dedup["n_groups_dropped"] == len(set(codes)) - len(set(codes[alive]))
    assert dedup["hardest_companion_mean_after"] == pytest.approx(
        np.nanmean(brute_hardest(vectors, codes, alive)), abs=1e-6)
    assert dedup["hardest_companion_mean_before"] == pytest.approx(
        np.nanmean(brute_hardest(vectors, codes, np.ones(len(codes), dtype=bool))), abs=1e-6)
    assert (f"drops {len(dropped)} of 40 captions and {dedup['n_groups_dropped']} of 20 images"
            in result.stdout)


def test_images_left_without_captions_are_counted():
    captions = caption_set(["a", "b", "b", "c"], texts=["x", "yy", "zzz", "w"])
    vectors = unit([[1, 0, 0], [1, 0.01, 0], [0, 1, 0], [0, 0, 1]])
    section = dupes_section(captions, vectors, pairs=None, examples=None,
                            sets=SetOptions(0.99, keep="shortest")).to_dict()
    assert section["dedup"]["dropped_ids"] == ["c0001"]
    assert section["dedup"]["n_groups_dropped"] == 0  # image b keeps caption c0002
    section = dupes_section(caption_set(["a", "b", "c"], texts=["x", "yy", "w"]), vectors[[0, 1, 3]],
                            pairs=None, examples=None, sets=SetOptions(0.99, keep="shortest")).to_dict()
    assert section["dedup"]["n_groups_dropped"] == 1 and section["dedup"]["n_groups_after"] == 2


def test_dedup_that_leaves_one_caption_reports_no_companion_and_writes_the_drop_list(tmp_path):
    """Ten copies of one caption, ten images: nine are dropped and the one left has no companion
    (the query for its companion after the drop stopped the command with 'need at least 2 captions')."""
    data = write_jsonl(tmp_path / "same.jsonl", [f"c{i}" for i in range(10)], [f"img{i}" for i in range(10)],
                       ["A dog runs."] * 10)
    drop, report = tmp_path / "drop.txt", tmp_path / "dupes.json"
    result = run("dupes-sets", data, "--encoder", "vectors:" + str(_same_vectors(tmp_path, 10)),
                 "--drop-list", drop, "--json", report)
    assert result.exit_code == 0, result.output
    assert drop.read_text().split() == [f"c{i}" for i in range(1, 10)]
    dedup = json.loads(report.read_text())["dedup"]
    assert dedup["n_captions_after"] == 1 and dedup["hardest_companion_mean_after"] is None
    assert dedup["hardest_companion_mean_before"] == pytest.approx(1.0)


def test_dedup_that_leaves_captions_of_one_image_reports_no_companion():
    """Image 0 holds two distinct captions, images 1-3 copies of one of them: keeping the first of
    each set leaves image 0 alone, whose companion query stopped the command ('one group')."""
    captions = caption_set(["a", "a", "b", "c", "d"], texts=["x", "y", "x", "x", "x"])
    vectors = unit([[1, 0, 0], [0, 1, 0], [1, 0, 0], [1, 0, 0], [1, 0, 0]])
    # top_k 2: the kept caption's whole companion list is dropped, so its companion is searched for again
    section = dupes_section(captions, vectors, pairs=None, examples=None, sets=SetOptions(0.99, keep="first"),
                            mining=MiningOptions(top_k=2)).to_dict()
    dedup = section["dedup"]
    assert dedup["dropped_ids"] == ["c0002", "c0003", "c0004"]
    assert dedup["n_groups_after"] == 1 and dedup["hardest_companion_mean_after"] is None


def _same_vectors(folder, n):
    path = folder / "same.npy"
    np.save(path, np.tile(unit([[1.0, 2.0, 3.0]]), (n, 1)).astype(np.float32))
    return path


@pytest.mark.parametrize("args, message", [
    (["--keep", "biggest"], "'biggest' is not one of"),
    (["--threshold", "1.2"], "--threshold"),
    (["--drop-list", "{data}/drop.txt"], "cannot write"),
])
def test_bad_dedup_options_are_one_line_errors(near_duplicate_data, args, message):
    data, encoder, *_ = near_duplicate_data
    args = [arg.replace("{data}", str(data)) for arg in args]  # a folder that is a file
    result = run("dupes-sets", data, "--encoder", encoder, *args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error:")]) == 1
