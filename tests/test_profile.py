"""build_profile end to end, against brute-force numpy; the JSON schema round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from capgeo.captions.model import CaptionSet
from capgeo.encoders.base import Embeddings, EncoderInfo
from capgeo.errors import CapgeoError
from capgeo.captions.exact_duplicates import find_exact_duplicates
from capgeo.geometry import SCHEMA, build_profile, load_profile
from capgeo.geometry.batches import sample_batches

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DOCCI = DATA / "docci-test" / "docci_test.json"
COCO = DATA / "coco-karpathy-test" / "mscoco_test.json"
TOP_LEVEL = ("schema", "dataset", "encoder", "lengths", "pairwise", "within_group", "hardest_companion",
             "companions", "exact_duplicates", "near_duplicates", "batches", "options", "provenance")


def caption_set(texts, groups, source=Path("in-memory")) -> CaptionSet:
    n = len(texts)
    table = pl.DataFrame({"caption_id": [f"c{i}" for i in range(n)], "group_id": [str(g) for g in groups],
                          "split": [None] * n, "text": list(texts)},
                         schema={"caption_id": pl.String, "group_id": pl.String, "split": pl.String, "text": pl.String})
    return CaptionSet(table, source, "test")


def fake_embeddings(vectors, token_counts=None, max_tokens=77) -> Embeddings:
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    if token_counts is None:
        token_counts = np.full(len(vectors), 10)
    info = EncoderInfo("test", "precomputed", "random", vectors.shape[1], 77, None, "0" * 64)
    return Embeddings(vectors, np.asarray(token_counts), max_tokens, info)


def brute_force(vectors: np.ndarray, groups) -> dict:
    """Every statistic the profile reports, from the full N x N matrix in float64."""
    x = vectors.astype(np.float64)
    similarity = x @ x.T
    codes = np.unique(np.asarray(groups), return_inverse=True)[1]
    same = codes[:, None] == codes[None, :]
    upper = np.triu(np.ones_like(same), k=1)
    companions = np.where(same, -np.inf, similarity)
    order = np.argsort(-companions, axis=1, kind="stable")
    return {
        "similarity": similarity,
        "negatives": similarity[upper & ~same],
        "within": similarity[upper & same],
        "hardest": companions.max(axis=1),
        "sorted_companions": np.take_along_axis(companions, order, axis=1),
    }


# --- real captions, embedded with the default encoder -------------------------------------------

@pytest.fixture(scope="module")
def real(request, tmp_path_factory):
    if not (DOCCI.is_file() and COCO.is_file()):
        pytest.skip(f"real captions not found under {DATA} (CI lays shared/ beside the repository)")
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    docci = load_captions(DOCCI, limit=25)  # long captions: most of the encoding time
    coco = load_captions(COCO, limit=175)   # 35 images x 5 captions: groups with several captions
    captions = CaptionSet(pl.concat([docci.table, coco.table]), DOCCI, "docci+coco")
    # pytest's own cache folder: the (deterministic) embeddings are computed once per checkout
    # (a temporary folder when the run has pytest's cache turned off, -p no:cacheprovider)
    pytest_cache = getattr(request.config, "cache", None)
    cache_dir = (pytest_cache.mkdir("capgeo-embeddings") if pytest_cache is not None
                 else tmp_path_factory.mktemp("capgeo-embeddings"))
    # cut at 128 tokens: faster, and many DOCCI captions are then truncated
    embeddings = embed(captions, None, cache_dir=cache_dir, max_tokens=128, progress=False)
    profile = build_profile(captions, embeddings, batch_sizes=(16, 48), relative_buckets=True, n_batches=40,
                            near_duplicate_threshold=0.7, seed=3, progress=False).to_dict()
    return captions, embeddings, profile


def test_real_profile_sections_and_json_round_trip(real, tmp_path):
    captions, embeddings, profile = real
    assert profile["schema"] == SCHEMA == "capgeo.profile/1"
    assert all(key in profile for key in TOP_LEVEL)
    text = json.dumps(profile, allow_nan=False)
    path = tmp_path / "profile.json"
    path.write_text(text)
    assert load_profile(path) == json.loads(text)
    assert profile["dataset"]["n_captions"] == 200
    assert profile["dataset"]["n_groups"] == 25 + 35
    assert profile["encoder"] == embeddings.info.to_dict()
    assert profile["options"]["seed"] == 3 and profile["options"]["mode_used"] == "exact"


def test_real_pairwise_and_companions_match_brute_force(real):
    captions, embeddings, profile = real
    reference = brute_force(embeddings.vectors, captions.groups)
    pairwise = profile["pairwise"]
    negatives = reference["negatives"]
    assert pairwise["count"] == negatives.size == 200 * 199 // 2 - 35 * 10
    assert pairwise["mean"] == pytest.approx(negatives.mean(), abs=1e-6)
    assert pairwise["std"] == pytest.approx(negatives.std(), abs=1e-6)
    assert pairwise["max"] == pytest.approx(negatives.max(), abs=1e-6)
    for key, level in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert pairwise["quantiles"][key] == pytest.approx(np.quantile(negatives, level), abs=1e-3)
    assert sum(pairwise["histogram"]["counts"]) == negatives.size
    assert len(pairwise["histogram"]["edges"]) == len(pairwise["histogram"]["counts"]) + 1

    within = profile["within_group"]
    assert within["count"] == reference["within"].size == 35 * 10
    assert within["mean"] == pytest.approx(reference["within"].mean(), abs=1e-6)
    assert within["mean"] > pairwise["mean"]  # captions of one image agree more than captions of two

    hardest = profile["hardest_companion"]
    assert hardest["n_captions"] == 200
    assert hardest["mean"] == pytest.approx(reference["hardest"].mean(), abs=1e-6)
    assert hardest["quantiles"]["p50"] == pytest.approx(np.median(reference["hardest"]), abs=1e-6)

    companions = profile["companions"]
    ids = captions.ids
    position = {caption_id: i for i, caption_id in enumerate(ids)}
    assert companions["caption_id"] == ids
    np.testing.assert_allclose(companions["hardest_cosine"], reference["hardest"], atol=2e-6)
    for i, hardest_id in enumerate(companions["hardest_id"]):
        # the named companion really has that cosine and belongs to another group
        assert reference["similarity"][i, position[hardest_id]] == pytest.approx(reference["hardest"][i], abs=2e-6)
        assert captions.groups[position[hardest_id]] != captions.groups[i]
    assert companions["top_k"] == 10
    np.testing.assert_allclose(companions["top_cosines"], reference["sorted_companions"][:, :10], atol=2e-6)


def test_real_near_duplicates_lengths_and_exact_duplicates(real):
    captions, embeddings, profile = real
    reference = brute_force(embeddings.vectors, captions.groups)
    near = profile["near_duplicates"]
    assert near["threshold"] == 0.7
    assert near["n_pairs_cross_group"] == int(np.count_nonzero(reference["negatives"] >= 0.7))
    assert near["n_captions_hardest_above"] == int(np.count_nonzero(reference["hardest"] >= 0.7))
    assert abs(near["n_pairs_from_histogram"] - near["n_pairs_cross_group"]) <= np.count_nonzero(
        np.abs(reference["negatives"] - 0.7) <= near["bin_width"])

    lengths = profile["lengths"]
    counts = embeddings.token_counts
    assert lengths["known"] is True
    assert lengths["max_tokens"] == embeddings.max_tokens == 128
    assert lengths["context_length"] == embeddings.info.context_length == 256
    assert lengths["n_truncated"] == int(np.count_nonzero(counts > embeddings.max_tokens)) > 0  # long DOCCI captions
    assert lengths["mean"] == pytest.approx(counts.mean())
    assert lengths["median"] == pytest.approx(np.median(counts))
    assert lengths["max"] == counts.max()
    edges, histogram = lengths["histogram"]["edges"], lengths["histogram"]["counts"]
    assert histogram == np.histogram(counts, bins=edges)[0].tolist()
    assert sum(histogram) == 200

    assert profile["exact_duplicates"] == find_exact_duplicates(captions.texts, captions.ids, captions.groups)


def test_real_batches_and_relative_buckets(real):
    captions, embeddings, profile = real
    reference = brute_force(embeddings.vectors, captions.groups)
    assert [entry["batch_size"] for entry in profile["batches"]] == [16, 48]
    levels = profile["options"]["relative_quantiles"]
    for entry in profile["batches"]:
        relative = entry["relative_buckets"]
        assert relative["quantile_levels"] == levels == [0.5, 0.9, 0.99]
        # relative edges are the dataset's own pairwise quantiles (histogram: one bin of tolerance)
        np.testing.assert_allclose(relative["edges"], np.quantile(reference["negatives"], levels), atol=1e-3)
        # hardest in-batch negative recomputed from the sampled batches
        batches = sample_batches(captions.group_codes, entry["batch_size"], entry["n_batches"], entry["seed"])
        hardest = []
        above = np.zeros(3)
        for batch in batches:
            block = reference["similarity"][np.ix_(batch, batch)]
            np.fill_diagonal(block, -np.inf)
            hardest.extend(block.max(axis=1))
            above += [(block >= edge).sum() for edge in relative["edges"]]
        assert entry["hardest_in_batch"]["mean"] == pytest.approx(np.mean(hardest), abs=1e-6)
        rows = entry["n_batches"] * entry["batch_size"]
        np.testing.assert_allclose(relative["expected_above_per_row"], above / rows, atol=1e-9)
        assert len(entry["example"]["cosine"]) == entry["batch_size"]


# --- small synthetic inputs ----------------------------------------------------------------------

def planted_near_duplicates(n_clusters=6, size=4, noise=1e-3, seed=0):
    """Clusters of near-identical vectors, every caption its own group."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, 24))
    background = rng.normal(size=(40, 24))
    vectors = np.concatenate([np.repeat(centres, size, axis=0) + noise * rng.normal(size=(n_clusters * size, 24)),
                              background])
    return vectors


@pytest.mark.parametrize("top_k, method", [(10, "top_k"), (1, "histogram")])
def test_near_duplicate_count_by_top_k_or_histogram(top_k, method):
    vectors = planted_near_duplicates()
    n = len(vectors)
    captions = caption_set([f"text {i}" for i in range(n)], range(n))
    embeddings = fake_embeddings(vectors)
    profile = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=5, top_k=top_k,
                            near_duplicate_threshold=0.95, progress=False).to_dict()
    near = profile["near_duplicates"]
    reference = brute_force(embeddings.vectors, captions.groups)
    assert near["count_method"] == method
    assert near["n_pairs_cross_group"] == int(np.count_nonzero(reference["negatives"] >= 0.95)) == 6 * 6
    assert near["n_captions_hardest_above"] == 24
    assert near["share_pairs"] == pytest.approx(36 / reference["negatives"].size)


def test_seed_fixes_the_batches_and_other_seeds_change_them():
    rng = np.random.default_rng(1)
    captions = caption_set([f"t{i}" for i in range(90)], np.arange(90) // 3)
    embeddings = fake_embeddings(rng.normal(size=(90, 16)))
    options = dict(batch_sizes=(10,), n_batches=12, buckets=(0.0, 0.3), progress=False)
    first = build_profile(captions, embeddings, seed=1, **options).to_dict()
    again = build_profile(captions, embeddings, seed=1, **options).to_dict()
    other = build_profile(captions, embeddings, seed=2, **options).to_dict()
    assert first["batches"] == again["batches"]
    assert first["pairwise"] == again["pairwise"]
    assert first["batches"][0]["buckets"]["shares"] != other["batches"][0]["buckets"]["shares"]


def test_default_batch_size_is_capped_at_the_groups_and_explicit_ones_are_checked():
    rng = np.random.default_rng(2)
    captions = caption_set([f"t{i}" for i in range(40)], np.arange(40) // 2)
    embeddings = fake_embeddings(rng.normal(size=(40, 8)))
    profile = build_profile(captions, embeddings, n_batches=3, progress=False).to_dict()
    assert profile["options"]["batch_sizes"] == [20]
    with pytest.raises(CapgeoError, match="--batch-size 21: a batch needs captions of B different images"):
        build_profile(captions, embeddings, batch_sizes=(8, 21), progress=False).to_dict()


def test_one_group_and_bad_options_are_clear_errors():
    rng = np.random.default_rng(3)
    one_group = caption_set(["a", "b", "c"], ["g", "g", "g"])
    with pytest.raises(CapgeoError, match="one group"):
        build_profile(one_group, fake_embeddings(rng.normal(size=(3, 4))), progress=False).to_dict()
    captions = caption_set([f"t{i}" for i in range(10)], range(10))
    embeddings = fake_embeddings(rng.normal(size=(10, 4)))
    with pytest.raises(CapgeoError, match="mode"):
        build_profile(captions, embeddings, mode="fast", progress=False).to_dict()
    with pytest.raises(CapgeoError, match="ascending"):
        build_profile(captions, embeddings, buckets=(0.9, 0.8), progress=False).to_dict()
    with pytest.raises(CapgeoError, match="quantiles"):
        build_profile(captions, embeddings, relative_buckets=True, relative_quantiles=(0.9, 0.5), progress=False).to_dict()
    with pytest.raises(CapgeoError, match="one row per caption"):
        build_profile(captions, fake_embeddings(rng.normal(size=(9, 4))), progress=False).to_dict()


def test_two_captions_without_companion_lists_and_unknown_lengths():
    """N = 2, precomputed vectors (token counts -1), top-k lists left out."""
    captions = caption_set(["a", "b"], ["x", "y"])
    embeddings = fake_embeddings(np.array([[1.0, 0.0], [0.6, 0.8]]), token_counts=[-1, -1], max_tokens=0)
    profile = build_profile(captions, embeddings, batch_sizes=(2,), n_batches=2, include_companions=False,
                            progress=False).to_dict()
    json.dumps(profile, allow_nan=False)
    assert profile["pairwise"]["count"] == 1
    assert profile["pairwise"]["mean"] == pytest.approx(0.6, abs=1e-6)
    assert profile["within_group"] is None
    assert profile["companions"]["hardest_id"] == ["c1", "c0"]
    assert "top_ids" not in profile["companions"]
    assert profile["lengths"]["known"] is False and profile["lengths"]["n_truncated"] is None
    assert profile["batches"][0]["hardest_in_batch"]["mean"] == pytest.approx(0.6, abs=1e-6)


def test_load_profile_rejects_other_files(tmp_path):
    missing = tmp_path / "none.json"
    with pytest.raises(CapgeoError, match="not found"):
        load_profile(missing)
    not_json = tmp_path / "a.json"
    not_json.write_text("{oops")
    with pytest.raises(CapgeoError, match="not a JSON file"):
        load_profile(not_json)
    other = tmp_path / "b.json"
    other.write_text(json.dumps({"schema": "something/1", "dataset": {}}))
    with pytest.raises(CapgeoError, match="not a capgeo profile"):
        load_profile(other)
    newer = tmp_path / "c.json"
    newer.write_text(json.dumps({"schema": "capgeo.profile/2"}))
    with pytest.raises(CapgeoError, match="not supported"):
        load_profile(newer)
    a_list = tmp_path / "d.json"
    a_list.write_text("[1, 2]")
    with pytest.raises(CapgeoError, match="not a capgeo profile"):
        load_profile(a_list)


def test_load_profile_accepts_a_profile_with_only_its_own_section(tmp_path):
    """gamma/truncation write the same schema with only dataset, encoder and their section."""
    path = tmp_path / "gamma.json"
    path.write_text(json.dumps({"schema": SCHEMA, "dataset": {"n_captions": 3}, "encoder": {"name": "x"},
                                "gamma": {}}))
    assert load_profile(path)["gamma"] == {}
    path.write_text(json.dumps({"schema": SCHEMA, "dataset": {}}))
    with pytest.raises(CapgeoError, match="lacks the section.*encoder"):
        load_profile(path)


def test_sampled_mode_estimates_within_its_bounds_and_keeps_exact_companions():
    rng = np.random.default_rng(5)
    n = 400
    captions = caption_set([f"t{i}" for i in range(n)], np.arange(n) // 2)
    embeddings = fake_embeddings(rng.normal(size=(n, 12)) + 0.5)
    profile = build_profile(captions, embeddings, batch_sizes=(16,), n_batches=5, mode="sampled",
                            sampled_pairs=50_000, near_duplicate_threshold=0.9, seed=1, progress=False).to_dict()
    json.dumps(profile, allow_nan=False)
    reference = brute_force(embeddings.vectors, captions.groups)
    pairwise = profile["pairwise"]
    bounds = pairwise["bounds"]
    assert profile["options"]["mode_used"] == "sampled" and pairwise["exact"] is False
    assert pairwise["count"] == bounds["sample_size"] == 50_000  # of 79,600 negative pairs
    assert bounds["population"] == pairwise["pairs_total"] == reference["negatives"].size
    assert abs(pairwise["mean"] - reference["negatives"].mean()) <= 4 * bounds["mean_standard_error"]
    for edge, share in pairwise["share_at_or_above"].items():
        assert abs(share - np.mean(reference["negatives"] >= float(edge))) <= bounds["cdf_epsilon"]
    # hardest companions stay exact
    assert profile["hardest_companion"]["exact"] is True
    np.testing.assert_allclose(profile["companions"]["hardest_cosine"], reference["hardest"], atol=2e-6)
    near = profile["near_duplicates"]
    assert near["count_method"] == "top_k"
    assert near["n_pairs_cross_group"] == int(np.count_nonzero(reference["negatives"] >= 0.9))
    # auto switches to sampling above the size limit
    auto = build_profile(captions, embeddings, batch_sizes=(16,), n_batches=2, sampled_above=300,
                         sampled_pairs=1000, progress=False).to_dict()
    assert auto["options"]["mode_used"] == "sampled"


def test_sampled_tail_intervals_end_at_the_exact_largest_negative_cosine():
    """With few sampled pairs the top quantiles' intervals open to 1; the largest negative cosine is
    known exactly (the largest hardest-companion cosine), so no interval may end above it."""
    rng = np.random.default_rng(6)
    n = 300
    captions = caption_set([f"t{i}" for i in range(n)], np.arange(n) // 3)
    embeddings = fake_embeddings(rng.normal(size=(n, 16)))
    profile = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, mode="sampled",
                            sampled_pairs=200, seed=0, progress=False).to_dict()
    reference = brute_force(embeddings.vectors, captions.groups)["negatives"]
    top = profile["pairwise"]["max"]
    assert top == pytest.approx(reference.max(), abs=2e-6)
    intervals = profile["pairwise"]["bounds"]["quantile_intervals"]
    assert intervals["p99"][1] == top  # opened to 1 by the DKW band, ended at the exact max
    for key, (low, high) in intervals.items():
        assert low <= high <= top
        assert low - 1e-6 <= np.quantile(reference, int(key[1:]) / 100) <= high + 1e-6


def test_sampled_mode_with_faiss_companions_reports_recall():
    rng = np.random.default_rng(6)
    captions = caption_set([f"t{i}" for i in range(300)], np.arange(300) // 3)
    embeddings = fake_embeddings(rng.normal(size=(300, 16)))
    profile = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, mode="sampled",
                            sampled_pairs=5000, companions="faiss", progress=False).to_dict()
    hardest = profile["hardest_companion"]
    assert hardest["mode"] == "faiss" and hardest["exact"] is False
    # recall@1 recomputed by brute force: all 300 captions are queries (fewer than the 1,000 sampled),
    # and a caption counts as found when faiss's companion is as similar as the exact hardest one
    vectors = np.asarray(embeddings.vectors, dtype=np.float64)
    exact = vectors @ vectors.T
    exact[np.arange(300)[:, None] // 3 == np.arange(300)[None, :] // 3] = -np.inf
    found = np.array(profile["companions"]["hardest_cosine"], dtype=np.float64)
    assert hardest["recall"]["queries"] == 300
    expected = np.mean(found >= exact.max(axis=1) - 1e-5)  # the cosines are kept to 6 decimals
    assert hardest["recall"]["recall_at_1"] == pytest.approx(expected, abs=1 / 300 + 1e-12)
    assert profile["near_duplicates"]["count_method"] == "sampled"


def test_a_sampled_near_duplicate_count_is_at_least_the_pairs_the_companion_lists_hold():
    """100 sampled pairs missed all 36 planted near-duplicate pairs: "0 pairs" beside "24 captions have
    one". The pairs faiss found are real, so the count is at least theirs."""
    pytest.importorskip("faiss", reason="faiss is an optional extra: pip install -e '.[faiss]'")
    # 36 planted pairs among about 1.2 million negatives: 100 draws all but surely miss them
    vectors = np.concatenate([planted_near_duplicates(), np.random.default_rng(9).normal(size=(1500, 24))])
    n = len(vectors)
    captions = caption_set([f"text {i}" for i in range(n)], range(n))
    profile = build_profile(captions, fake_embeddings(vectors), batch_sizes=(8,), n_batches=2, mode="sampled",
                            sampled_pairs=100, companions="faiss", near_duplicate_threshold=0.95, progress=False).to_dict()
    near = profile["near_duplicates"]
    assert near["count_method"] == "sampled" and near["n_captions_hardest_above"] == 24
    assert near["n_pairs_cross_group"] >= 12  # 24 captions with a twin: at least 12 distinct pairs
    assert near["n_pairs_cross_group"] <= 36  # and never more than there are


def test_sampled_profile_reports_the_exact_largest_negative_cosine():
    """In sampled mode the largest negative cosine is known exactly (the largest hardest-companion cosine,
    companions staying exact); the sample's own maximum would sit below the companion row's."""
    rng = np.random.default_rng(8)
    n = 300
    vectors = rng.normal(size=(n, 16))
    vectors[2] = vectors[0] + 0.005 * rng.normal(size=16)  # a near-twin of caption 0 in another image
    groups = [i // 2 for i in range(n)]
    profile = build_profile(caption_set([f"caption {i}" for i in range(n)], groups), fake_embeddings(vectors),
                            mode="sampled", sampled_pairs=300, batch_sizes=(8,), n_batches=2, progress=False).to_dict()
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = unit @ unit.T
    codes = np.array(groups)
    assert profile["pairwise"]["mode"] == "sampled"
    assert profile["pairwise"]["max"] == pytest.approx(cosines[codes[:, None] != codes[None, :]].max(), abs=1e-6)
    assert profile["pairwise"]["max"] == profile["hardest_companion"]["max"]


@pytest.mark.parametrize("threshold", [0.9998, 0.9999])
def test_near_duplicates_at_a_threshold_in_the_last_bin_are_counted(threshold):
    """Identical captions embed identically (cosine 1); a threshold rounding to the top edge started
    the count past the last bin, which holds [0.9995, 1], and said 0 pairs beside '30 captions have one'.
    Above 0.9999 float32 cosines of identical vectors (up to ~1e-6 below 1) cannot be told from
    others: such a threshold is refused instead of finding nothing."""
    n = 30
    captions = caption_set([f"t{i}" for i in range(n)], np.arange(n) // 3)
    embeddings = fake_embeddings(np.ones((n, 8)))
    profile = build_profile(captions, embeddings, batch_sizes=(4,), n_batches=2,
                            near_duplicate_threshold=threshold, progress=False).to_dict()
    assert profile["near_duplicates"]["n_pairs_cross_group"] == n * (n - 1) // 2 - 10 * 3
    assert profile["pairwise"]["share_at_or_above"]["0.9"] == 1.0
    with pytest.raises(CapgeoError, match="float32 products"):
        build_profile(captions, embeddings, batch_sizes=(4,), n_batches=2, near_duplicate_threshold=1.0,
                      progress=False).to_dict()


def test_share_at_or_above_the_top_edge_counts_the_last_bin():
    from capgeo.geometry.distribution import Histogram

    histogram = Histogram()
    histogram.add(np.array([1.0, 1.0, 0.5]))
    assert histogram.share_at_or_above([1.0])["1"] == pytest.approx(2 / 3)


def test_a_sample_of_every_negative_pair_is_the_exact_pass():
    """--mode sampled with --sampled-pairs above the number of negatives drew 2,000,000 pairs with
    replacement out of 44,550 and showed that as the count of negatives."""
    rng = np.random.default_rng(8)
    n = 60
    captions = caption_set([f"t{i}" for i in range(n)], np.arange(n) // 2)
    embeddings = fake_embeddings(rng.normal(size=(n, 8)))
    sampled = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, mode="sampled",
                            sampled_pairs=n * (n - 1) // 2 - 30, progress=False).to_dict()
    exact = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, mode="exact", progress=False).to_dict()
    assert sampled["options"]["mode_used"] == "exact"
    assert sampled["pairwise"] == exact["pairwise"] and sampled["pairwise"]["count"] == n * (n - 1) // 2 - 30
    one_short = build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, mode="sampled",
                              sampled_pairs=n * (n - 1) // 2 - 31, progress=False).to_dict()
    assert one_short["options"]["mode_used"] == "sampled"
