"""The gamma rule and its diagnostics, against brute-force and torch reference computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capgeo.encoders.base import Embeddings, EncoderInfo
from capgeo.errors import CapgeoError
from capgeo.findings import gamma as gamma_module
from capgeo.findings.gamma import (
    gamma_section,
    grid_diagnostics,
    group_ids_in_code_order,
    in_batch_negative_rows,
    load_image_embeddings,
    mean_effective_share,
    reference_share,
    reference_within_row_spread,
)
from capgeo.findings.hnclip_loss import boosted_caption_cosine, hnclip_loss, hnclip_loss_grid, infonce_loss
from capgeo.geometry.batches import sample_batches


def common_direction_vectors(n: int, noise_dims: int, rho_mean: float = 0.84, rho_sd: float = 0.0,
                             seed: int = 0) -> np.ndarray:
    """t_i = sqrt(rho_i) e0 + sqrt(1 - rho_i) x_i with x_i uniform on the unit sphere of
    ``noise_dims`` dimensions orthogonal to e0, so cos(t_i, t_j) = sqrt(rho_i rho_j) +
    sqrt((1-rho_i)(1-rho_j)) x_i.x_j: mean about rho_mean, within-row spread about
    (1 - rho) / sqrt(noise_dims), row means spread by rho_sd."""
    rng = np.random.default_rng(seed)
    rho = np.clip(rng.normal(rho_mean, rho_sd, n), 0.5, 0.99)
    noise = rng.standard_normal((n, noise_dims))
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    vectors = np.concatenate([np.sqrt(rho)[:, None], np.sqrt(1 - rho)[:, None] * noise], axis=1)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def softmax_reference(rows: np.ndarray, scaled_gamma: float) -> np.ndarray:
    logits = scaled_gamma * rows.astype(np.float64)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------ loss

def torch_reference_loss(image, text, logit_scale, gamma):
    """The formula written out with torch: CE(s(S + gamma*Gbar)) rows and columns, averaged."""
    import torch
    functional = torch.nn.functional
    image, text = torch.tensor(image, dtype=torch.float64), torch.tensor(text, dtype=torch.float64)
    caption_cosine = text @ text.T
    eye = torch.eye(len(text), dtype=torch.bool)
    caption_cosine = caption_cosine.masked_fill(eye, 0.0).detach()
    logits = logit_scale * (image @ text.T + gamma * caption_cosine)
    target = torch.arange(len(text))
    return float(0.5 * (functional.cross_entropy(logits, target) + functional.cross_entropy(logits.T, target)))


@pytest.mark.parametrize("batch_size,logit_scale", [(2, 10.0), (5, 100.0), (7, 30.0)])
def test_losses_match_torch_cross_entropy(batch_size, logit_scale):
    rng = np.random.default_rng(batch_size)
    image = rng.normal(size=(batch_size, 6))
    text = rng.normal(size=(batch_size, 6))
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    similarity = image @ text.T
    boost = boosted_caption_cosine(text)
    assert np.allclose(np.diag(boost), 0.0)
    gammas = [0.0, 0.25, 0.5, 1.0, 2.0]
    grid = hnclip_loss_grid(similarity, boost, logit_scale, gammas)
    for k, gamma in enumerate(gammas):
        expected = torch_reference_loss(image, text, logit_scale, gamma)
        assert grid[k] == pytest.approx(expected, rel=1e-10, abs=1e-12)
        assert hnclip_loss(similarity, boost, logit_scale, gamma) == pytest.approx(expected, rel=1e-10, abs=1e-12)
    assert infonce_loss(similarity, logit_scale) == pytest.approx(torch_reference_loss(image, text, logit_scale, 0.0))


def test_loss_is_asymmetric_in_direction_and_uses_both():
    # a similarity matrix that is easy row-wise but hard column-wise: a one-direction loss would differ
    similarity = np.array([[1.0, 0.9, 0.9], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    zero = np.zeros((3, 3))
    rows_only = float(np.mean([np.log(np.exp(5 * r).sum()) - 5 * r[i] for i, r in enumerate(similarity)]))
    cols_only = float(np.mean([np.log(np.exp(5 * c).sum()) - 5 * c[i] for i, c in enumerate(similarity.T)]))
    assert rows_only != pytest.approx(cols_only)
    assert infonce_loss(similarity, 5.0) == pytest.approx(0.5 * (rows_only + cols_only))
    assert hnclip_loss(similarity, zero, 5.0, 0.7) == pytest.approx(infonce_loss(similarity, 5.0))


def test_image_loss_shares_match_brute_force():
    rng = np.random.default_rng(3)
    n_groups, width = 40, 16
    text = rng.normal(size=(n_groups, width)).astype(np.float32)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    # images close to their caption for half the groups, random for the rest
    image = np.where(np.arange(n_groups)[:, None] < 20, text + 0.05 * rng.normal(size=(n_groups, width)),
                     rng.normal(size=(n_groups, width))).astype(np.float32)
    codes = np.arange(n_groups)
    gammas = [0.0, 0.5, 1.0]
    section = gamma_section(text, codes, logit_scale=100.0, batch_sizes=(4,), grid=gammas, n_batches=60,
                            seed=5, image_vectors=image).to_dict()
    result = section["batches"][0]["image"]
    batches = sample_batches(codes, 4, 60, 5)
    image_normed = image / np.linalg.norm(image, axis=1, keepdims=True)
    expected_plain = [torch_reference_loss(image_normed[b], text[b], 100.0, 0.0) for b in batches]
    assert result["plain"]["mean_loss"] == pytest.approx(np.mean(expected_plain), rel=1e-5)
    assert result["plain"]["share_batches_below"] == pytest.approx(np.mean(np.array(expected_plain) < 1e-3))
    assert 0 < result["plain"]["share_batches_below"] < 1   # both kinds of batch occur: the share is informative
    for k, gamma in enumerate(gammas):
        expected = np.array([torch_reference_loss(image_normed[b], text[b], 100.0, gamma) for b in batches])
        assert result["boosted"][k]["mean_loss"] == pytest.approx(expected.mean(), rel=1e-5)
        assert result["boosted"][k]["share_batches_below"] == pytest.approx(np.mean(expected < 1e-3))


# ------------------------------------------------------------------ concentration and diagnostics

def test_effective_share_matches_brute_force_and_decreases():
    rows = np.random.default_rng(1).uniform(0.6, 0.95, size=(50, 31)).astype(np.float32)
    shares = []
    for scaled_gamma in [0.0, 5.0, 20.0, 60.0, 200.0]:
        weights = softmax_reference(rows, scaled_gamma)
        entropy = -(weights * np.log(weights)).sum(axis=1)
        expected = np.mean(np.exp(entropy)) / 31
        share = mean_effective_share(rows, scaled_gamma)
        assert share == pytest.approx(expected, rel=1e-9)
        shares.append(share)
    assert shares[0] == pytest.approx(1.0)
    assert all(a > b for a, b in zip(shares, shares[1:]))


def test_grid_diagnostics_match_brute_force():
    rng = np.random.default_rng(2)
    rows = rng.uniform(0.7, 0.98, size=(30, 19)).astype(np.float32)
    logit_scale, edge = 80.0, 0.9
    result = [row.to_dict() for row in grid_diagnostics(rows, logit_scale, [0.0, 0.5, 1.0], edge)]
    top_count = math.ceil(0.1 * 19)
    for entry, gamma in zip(result, [0.0, 0.5, 1.0]):
        weights = softmax_reference(rows, logit_scale * gamma)
        hard = np.mean([w[r >= edge].sum() for w, r in zip(weights, rows)])
        top = np.mean([w[np.argsort(-r)[:top_count]].sum() for w, r in zip(weights, rows)])
        assert entry["hard_bucket_mass"] == pytest.approx(hard, rel=1e-6)
        assert entry["top_decile_mass"] == pytest.approx(top, rel=1e-6)
        assert entry["boost_median"] == pytest.approx(logit_scale * gamma * np.median(rows, axis=1).mean(), rel=1e-6)
        assert entry["boost_hardest"] == pytest.approx(logit_scale * gamma * rows.max(axis=1).mean(), rel=1e-6)
    assert result[0]["hard_bucket_mass"] == pytest.approx(np.mean(rows >= edge), rel=1e-6)
    assert result[0]["effective_negatives"] == pytest.approx(19)


@pytest.mark.parametrize("n_negatives", [9, 3, 19])
def test_top_decile_mass_counts_exactly_a_tenth_of_the_negatives_when_cosines_tie(n_negatives):
    """The mass on a row's most similar ceil(10%) negatives: with tied cosines (exact duplicates,
    discrete geometry) a threshold at the k-th largest took in every tie, up to 100%."""
    rng = np.random.default_rng(3)
    rows = rng.choice(np.float32([0.2, 0.5, 0.9]), size=(40, n_negatives)).astype(np.float32)
    rows[0] = 0.5  # a row of one cosine: uniform weights at any gamma
    top_count = math.ceil(0.1 * n_negatives)
    result = [row.to_dict() for row in grid_diagnostics(rows, 100.0, [0.0, 0.125, 0.5], 0.9)]
    assert result[0]["top_decile_mass"] == pytest.approx(top_count / n_negatives, rel=1e-9)
    for entry in result:
        weights = softmax_reference(rows, 100.0 * entry["gamma"])
        top = np.mean([np.sort(w)[::-1][:top_count].sum() for w in weights])
        assert entry["top_decile_mass"] == pytest.approx(top, rel=1e-6)


def test_in_batch_rows_match_brute_force_and_subsample():
    vectors = common_direction_vectors(60, 10, seed=4)
    batches = sample_batches(np.arange(60), 8, 5, 0)
    rows = in_batch_negative_rows(vectors, batches)
    expected = [[float(vectors[b[i]] @ vectors[b[j]]) for j in range(8) if j != i] for b in batches for i in range(8)]
    assert np.allclose(rows, np.array(expected), atol=1e-6)
    capped = in_batch_negative_rows(vectors, batches, max_values=5 * 7 * 3)   # 3 rows per batch
    assert capped.shape == (15, 7)
    assert np.allclose(capped, rows.reshape(5, 8, 7)[:, :3].reshape(15, 7))


# ------------------------------------------------------------------ the reference

def test_reference_spread_reproduces_the_paper_hardest_companion():
    # independent check: max of 5,099 normal draws with the reference spread, by simulation
    sigma = reference_within_row_spread()
    rng = np.random.default_rng(0)
    maxima = [rng.normal(0.84, sigma, 5099).max() for _ in range(400)]
    assert np.mean(maxima) == pytest.approx(0.93, abs=0.002)
    # and the reference share at gamma 0.5 is the concentration of the synthetic rows
    rows = 0.84 + sigma * np.random.default_rng(7).standard_normal((2000, 127))
    assert reference_share(0.5) == pytest.approx(mean_effective_share(rows, 50.0), abs=0.01)


# ------------------------------------------------------------------ the rule's properties

@pytest.fixture(scope="module")
def medium_vectors():
    return common_direction_vectors(1500, 40, seed=1)


def test_rule_depends_on_s_times_gamma_only(medium_vectors):
    codes = np.arange(len(medium_vectors))
    suggestions = {}
    for logit_scale in (50.0, 100.0, 200.0):
        section = gamma_section(medium_vectors, codes, logit_scale=logit_scale, batch_sizes=(64,), n_batches=16).to_dict()
        suggestions[logit_scale] = section["batches"][0]["suggestion"]
    assert not any(s["clipped"] for s in suggestions.values())
    base = suggestions[100.0]
    assert suggestions[200.0]["gamma_exact"] == pytest.approx(base["gamma_exact"] / 2, rel=1e-4)
    assert suggestions[50.0]["gamma_exact"] == pytest.approx(base["gamma_exact"] * 2, rel=1e-4)
    for end in range(2):
        assert suggestions[200.0]["range_exact"][end] == pytest.approx(base["range_exact"][end] / 2, rel=1e-4)
    assert suggestions[200.0]["scaled_gamma"] == pytest.approx(base["scaled_gamma"], rel=1e-4)


def test_wider_spread_gets_smaller_gamma():
    spreads, gammas = [], []
    for noise_dims in (15, 40, 120):   # fewer noise dimensions -> wider within-row spread
        vectors = common_direction_vectors(1200, noise_dims, seed=noise_dims)
        section = gamma_section(vectors, np.arange(1200), logit_scale=100.0, batch_sizes=(128,), n_batches=16).to_dict()
        entry = section["batches"][0]
        spreads.append(entry["within_row_spread"])
        gammas.append(entry["suggestion"]["gamma_exact"])
    assert spreads[0] > spreads[1] > spreads[2]
    assert gammas[0] < gammas[1] < gammas[2]
    # roughly inverse proportional, as the Gaussian approximation says
    assert gammas[2] / gammas[0] == pytest.approx(spreads[0] / spreads[2], rel=0.25)


def test_paper_like_embeddings_get_about_the_paper_default():
    vectors = common_direction_vectors(5100, 40, rho_sd=0.03, seed=0)
    # brute force: the paper's DOCCI statistics (Long-CLIP-L), over all 5,100 captions
    total = at_least_0_8 = 0.0
    hardest = []
    as_float64 = vectors.astype(np.float64)
    for start in range(0, 5100, 600):   # blocks of rows, all pairs i != j
        cosine = as_float64[start:start + 600] @ as_float64.T
        cosine[np.arange(len(cosine)), np.arange(start, start + len(cosine))] = np.nan
        total += np.nansum(cosine)
        at_least_0_8 += np.sum(cosine >= 0.8)
        hardest.extend(np.nanmax(cosine, axis=1))
    n_pairs = 5100 * 5099
    mean_pairwise, mean_hardest, share_at_least_0_8 = total / n_pairs, np.mean(hardest), at_least_0_8 / n_pairs
    assert mean_pairwise == pytest.approx(0.84, abs=0.005)
    assert mean_hardest == pytest.approx(0.93, abs=0.005)
    assert 0.86 <= share_at_least_0_8 <= 0.92

    section = gamma_section(vectors, np.arange(5100), logit_scale=100.0, batch_sizes=(128,), n_batches=32).to_dict()
    suggestion = section["batches"][0]["suggestion"]
    # the calibration docs/gamma.md states: 0.456, range 0.217-0.708 (to +-0.02)
    assert suggestion["gamma_exact"] == pytest.approx(0.456, abs=0.02)
    assert suggestion["range_exact"] == pytest.approx([0.217, 0.708], abs=0.02)
    # shown as computed, two decimals: no snapping to a grid
    assert suggestion["gamma"] == round(suggestion["gamma_exact"], 2)
    assert suggestion["range"] == [round(end, 2) for end in suggestion["range_exact"]]
    assert section["suggested_gamma"] == suggestion["gamma"]
    assert not suggestion["clipped"] and suggestion["range_clipped"] == [False, False]


def test_vectors_are_normalised_before_cosines(medium_vectors):
    codes = np.arange(len(medium_vectors))
    unit = gamma_section(medium_vectors, codes, batch_sizes=(32,), n_batches=4).to_dict()["batches"][0]
    scaled = gamma_section(3.0 * medium_vectors, codes, batch_sizes=(32,), n_batches=4).to_dict()["batches"][0]
    assert scaled["suggestion"]["gamma_exact"] == pytest.approx(unit["suggestion"]["gamma_exact"], rel=1e-5)
    with pytest.raises(CapgeoError, match="NaN"):
        gamma_section(np.full_like(medium_vectors, np.nan), codes, batch_sizes=(32,)).to_dict()


def test_identical_directions_are_clipped_and_said():
    rng = np.random.default_rng(0)
    vectors = np.ones((300, 8)) + 1e-5 * rng.normal(size=(300, 8))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    batch = gamma_section(vectors, np.arange(300), batch_sizes=(32,), n_batches=4).to_dict()["batches"][0]
    suggestion = batch["suggestion"]
    assert suggestion["clipped"] and suggestion["gamma"] == gamma_module.GAMMA_CLIP[1]
    assert suggestion["range_clipped"] == [True, True]
    assert "clipped to 2.0" in suggestion["clip_note"]
    # the why does not claim the clipped gamma reaches the reference's concentration (it said "does the same")
    assert ") does the same" not in batch["why"] and "no gamma in the suggested interval does the same" in batch["why"]


def test_very_wide_spread_is_clipped_low():
    # random directions in 3-D: cosines spread over [-1, 1], far wider than any caption encoder
    vectors = np.random.default_rng(0).normal(size=(300, 3))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    batch = gamma_section(vectors, np.arange(300), batch_sizes=(32,), n_batches=4).to_dict()["batches"][0]
    suggestion = batch["suggestion"]
    assert "no gamma in the suggested interval does the same" in batch["why"]
    assert suggestion["clipped"] and suggestion["gamma_exact"] == pytest.approx(gamma_module.GAMMA_CLIP[0])
    assert suggestion["range_clipped"][0]
    assert "clipped to 0.05" in suggestion["clip_note"]


def test_a_range_clipped_at_both_ends_says_both():
    """5 images x 2 random 6-d captions at B = 4: the suggestion is inside the clip interval while both
    range ends reach it; the note named only the lower end."""
    vectors = np.random.default_rng(9).normal(size=(10, 6))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    codes = np.arange(10) % 5
    suggestion = gamma_section(vectors, codes, batch_sizes=(4,), n_batches=50).to_dict()["batches"][0]["suggestion"]
    assert suggestion["range_clipped"] == [True, True] and not suggestion["clipped"]
    assert suggestion["clip_note"].endswith("both its ends are clipped")


# ------------------------------------------------------------------ inputs and errors

def _info(logit_scale):
    return EncoderInfo("test", "open_clip", "tiny", 16, 77, logit_scale, "f" * 8)


def test_logit_scale_from_checkpoint_unless_overridden(medium_vectors):
    embeddings = Embeddings(medium_vectors, np.full(len(medium_vectors), 10), 77, _info(50.0))
    codes = np.arange(len(medium_vectors))
    from_checkpoint = gamma_section(embeddings, codes, batch_sizes=(32,), n_batches=4).to_dict()
    assert from_checkpoint["logit_scale"] == 50.0 and from_checkpoint["logit_scale_source"] == "checkpoint"
    overridden = gamma_section(embeddings, codes, logit_scale=100.0, batch_sizes=(32,), n_batches=4).to_dict()
    assert overridden["logit_scale"] == 100.0 and overridden["logit_scale_source"] == "--logit-scale"
    assert from_checkpoint["batches"][0]["suggestion"]["gamma_exact"] == pytest.approx(
        2 * overridden["batches"][0]["suggestion"]["gamma_exact"], rel=1e-4)
    default = gamma_section(Embeddings(medium_vectors, np.full(len(medium_vectors), 10), 77, _info(None)), codes,
                            batch_sizes=(32,), n_batches=4).to_dict()
    assert default["logit_scale"] == 100.0 and default["logit_scale_source"].startswith("default")


def test_batch_size_larger_than_groups_is_a_clear_error():
    vectors = common_direction_vectors(50, 8)
    codes = np.repeat(np.arange(25), 2)
    with pytest.raises(CapgeoError, match=r"--batch-size 32: .* 25"):
        gamma_section(vectors, codes, batch_sizes=(32,)).to_dict()


def test_batches_too_small_for_the_rule_are_a_clear_error():
    """With B - 1 <= 2 negatives a row's effective share stays >= 1/2, above the reference's 0.495."""
    vectors = common_direction_vectors(40, 8)
    codes = np.arange(40)
    with pytest.raises(CapgeoError, match=r"--batch-size 3 is too small .* at least 4"):
        gamma_section(vectors, codes, batch_sizes=(3,)).to_dict()
    assert gamma_section(vectors, codes, batch_sizes=(4,), n_batches=4).to_dict()["batches"][0]["batch_size"] == 4
    # three images: no batch size can do, and it is the dataset that is named
    with pytest.raises(CapgeoError, match=r"^the dataset has only 3 images, too few .* at least 4 images$"):
        gamma_section(vectors[:3], np.arange(3)).to_dict()
    with pytest.raises(CapgeoError, match=r"^the dataset has only 3 images, too few .* at least 4 images$"):
        gamma_section(vectors[:3], np.arange(3), batch_sizes=(2,)).to_dict()  # it advised a batch size of 4


def test_group_labels_need_not_be_contiguous():
    vectors = common_direction_vectors(40, 8)
    contiguous = gamma_section(vectors, np.repeat(np.arange(20), 2), batch_sizes=(8,), n_batches=4).to_dict()
    gapped = gamma_section(vectors, np.repeat(np.arange(20) * 7 + 3, 2), batch_sizes=(8,), n_batches=4).to_dict()
    assert gapped["batches"][0]["suggestion"] == contiguous["batches"][0]["suggestion"]
    with pytest.raises(CapgeoError, match="25"):
        gamma_section(vectors[:10], np.array([0, 0, 90, 90, 5, 5, 6, 6, 7, 7]), batch_sizes=(25,)).to_dict()


def test_image_vectors_must_match_groups_and_width():
    vectors = common_direction_vectors(40, 8)   # width 9
    codes = np.arange(40)
    with pytest.raises(CapgeoError, match="39 image vectors, but the dataset has 40 groups"):
        gamma_section(vectors, codes, batch_sizes=(8,), image_vectors=np.ones((39, 9))).to_dict()
    with pytest.raises(CapgeoError, match="5 dimensions but the text embeddings have 9"):
        gamma_section(vectors, codes, batch_sizes=(8,), image_vectors=np.ones((40, 5))).to_dict()


def test_load_image_embeddings_aligns_by_group_id(tmp_path):
    import polars as pl

    groups = ["b", "b", "a", "c", "a"]
    codes = np.array([0, 0, 1, 2, 1])
    order = group_ids_in_code_order(groups, codes)
    assert order == ["b", "a", "c"]
    vectors = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 1.0]}
    pl.DataFrame({"group_id": ["c", "a", "b", "z"], "embedding": [vectors["c"], vectors["a"], vectors["b"], [0.0, 2.0]]}
                 ).write_parquet(tmp_path / "images.parquet")
    loaded = load_image_embeddings(tmp_path / "images.parquet", order)
    assert np.allclose(loaded, [vectors[g] for g in order])
    np.savez(tmp_path / "images.npz", ids=np.array(["a", "c"]), vectors=np.array([vectors["a"], vectors["c"]]))
    with pytest.raises(CapgeoError, match=r"images\.npz: no image vector for 1 of .* 'b'"):
        load_image_embeddings(tmp_path / "images.npz", order)
    (tmp_path / "images.txt").write_text("1 2")
    with pytest.raises(CapgeoError, match=r"images\.txt: image embeddings must be"):
        load_image_embeddings(tmp_path / "images.txt", order)


def test_gamma_progress_moves_within_each_batch_size(monkeypatch):
    """The bar had one step per batch size and sat at 0/1 for most of a profile's run."""
    import contextlib

    recorded = {}

    @contextlib.contextmanager
    def recording_bar(description, total, enabled=None):
        recorded["total"], recorded["steps"] = total, []

        class Bar:
            def advance(self, amount=1):
                recorded["steps"].append(amount)

        yield Bar()

    import capgeo.progress

    monkeypatch.setattr(capgeo.progress, "progress_bar", recording_bar)
    vectors = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    gamma_section(vectors, np.arange(200), logit_scale=100.0, batch_sizes=(16, 8), n_batches=4).to_dict()
    assert recorded["total"] == 8 and len(recorded["steps"]) == 8 and sum(recorded["steps"]) == recorded["total"]


def test_gamma_section_does_not_depend_on_the_blas_thread_count(tmp_path):
    """The in-batch cosines were float32 BLAS products, whose last bits change with the number of
    threads: the gamma section's JSON differed between OMP_NUM_THREADS=1 and 2 (same seed)."""
    import json
    import os
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((150, 128)).astype(np.float32)
    vectors = centres[rng.integers(0, 150, 3000)] + 0.3 * rng.standard_normal((3000, 128)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(tmp_path / "v.npy", vectors.astype(np.float32))
    code = ("import json, sys, numpy as np\nfrom capgeo.findings.gamma import gamma_section\n"
            f"v = np.load({str(tmp_path / 'v.npy')!r})\n"
            "print(json.dumps(gamma_section(v, np.arange(3000) // 3, batch_sizes=(32, 128)).to_dict(), sort_keys=True))")
    outputs = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        outputs.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                      check=True, timeout=300).stdout)
    assert json.loads(outputs[0]) == json.loads(outputs[1])


# ---------------------------------------------------------------- scipy's numbers without scipy

def _counting_curve(rows):
    """A share curve that counts its passes over the rows (each costs one exp per cosine)."""
    curve = gamma_module._ShareCurve(rows)
    passes = []
    effective = curve.effective
    curve.effective = lambda *arguments: passes.append(arguments[0]) or effective(*arguments)
    return curve, passes


@pytest.mark.parametrize("rho_sd, seed", [(0.05, 2), (0.02, 3), (0.15, 4)])
def test_the_rule_solves_to_the_root_scipy_finds(rho_sd, seed):
    """On real in-batch rows: each of the rule's scaled gammas is scipy's brentq root of the same
    share curve (found to the float64 limit), to 1e-12, in a few passes over the rows (3-6 here;
    scipy's Brent steps took 8-11)."""
    from scipy import optimize
    vectors = common_direction_vectors(600, 40, rho_sd=rho_sd, seed=seed)
    rows = in_batch_negative_rows(vectors, sample_batches(np.arange(600), 64, 20, seed=1))
    for reference_gamma in (0.5, 0.25, 0.75):
        target = reference_share(reference_gamma)
        curve, passes = _counting_curve(rows)
        root, clipped = gamma_module.solve_scaled_gamma(curve, target, 5.0, 200.0)
        assert clipped is None and len(passes) <= 8   # (Brent on [5, 200] took 8-11)
        expected = optimize.brentq(lambda g: mean_effective_share(rows, g) - target, 5.0, 200.0,
                                   xtol=1e-13, rtol=4 * np.finfo(float).eps)
        assert root == pytest.approx(expected, rel=1e-12, abs=0)


def test_the_root_does_not_depend_on_what_the_curve_computed_before():
    vectors = common_direction_vectors(600, 40, rho_sd=0.05, seed=2)
    rows = in_batch_negative_rows(vectors, sample_batches(np.arange(600), 64, 20, seed=1))
    target = reference_share(0.5)
    fresh = gamma_module.solve_scaled_gamma(gamma_module._ShareCurve(rows), target, 5.0, 200.0)
    used = gamma_module._ShareCurve(rows)
    for scaled_gamma in (12.5, 37.5, 50.0, 200.0):
        used.share(scaled_gamma)
    assert gamma_module.solve_scaled_gamma(used, target, 5.0, 200.0) == fresh


@pytest.mark.parametrize("target, low, high, expected", [
    (0.999999, 5.0, 200.0, "low"),      # even the lowest end concentrates too much
    (1e-6, 5.0, 200.0, "high"),         # even the highest end concentrates too little
    (None, 90.0, 200.0, "low"),         # the root (below 90) lies left of the interval
    (None, 5.0, 30.0, "high"),          # ... and right of this one
])
def test_a_target_out_of_reach_gives_the_interval_end(target, low, high, expected):
    vectors = common_direction_vectors(600, 40, rho_sd=0.05, seed=2)
    rows = in_batch_negative_rows(vectors, sample_batches(np.arange(600), 64, 20, seed=1))
    target = reference_share(0.5) if target is None else target
    end = low if expected == "low" else high
    assert gamma_module.solve_scaled_gamma(rows, target, low, high) == (end, expected)
    # the end is out of reach by the share itself: the share is decreasing in the scaled gamma
    share = mean_effective_share(rows, end)
    assert share <= target if expected == "low" else share >= target


def test_the_share_slope_is_the_derivative_of_the_share():
    """share_and_slope: the share's bits and, against a central difference of a brute-force
    float64 share (numpy, row by row), its derivative."""
    vectors = common_direction_vectors(300, 24, rho_sd=0.05, seed=5)
    rows = in_batch_negative_rows(vectors, sample_batches(np.arange(300), 32, 10, seed=2))

    def brute_share(scaled_gamma):
        z = scaled_gamma * rows.astype(np.float64)
        w = np.exp(z - z.max(axis=1, keepdims=True))
        p = w / w.sum(axis=1, keepdims=True)
        return float(np.exp(-(p * np.log(p)).sum(axis=1)).mean() / rows.shape[1])

    for scaled_gamma in (5.0, 42.0, 130.0):
        share, slope = gamma_module._ShareCurve(rows).share_and_slope(scaled_gamma)
        assert share == gamma_module._ShareCurve(rows).share(scaled_gamma)
        assert share == pytest.approx(brute_share(scaled_gamma), rel=1e-12)
        h = 1e-4 * scaled_gamma
        difference = (brute_share(scaled_gamma + h) - brute_share(scaled_gamma - h)) / (2 * h)
        assert slope < 0 and slope == pytest.approx(difference, rel=1e-6)


def test_stored_reference_constants_are_what_scipy_computes():
    from scipy import special
    from scipy import stats
    for (kind, argument), stored in gamma_module._REFERENCE_CONSTANTS.items():
        if kind == "expected_max":
            gamma_module.expected_max_standard_normal.cache_clear()
            x = np.linspace(-10.0, 12.0, 220_001)
            density = argument * np.exp(-0.5 * x * x - 0.5 * math.log(2 * math.pi)
                                        + (argument - 1) * special.log_ndtr(x))
            # to the last bit or one ulp off: numpy's summation order differs between versions
            assert math.isclose(stored, float(np.trapezoid(x * density, x)), rel_tol=1e-15, abs_tol=0)
        else:
            assert math.isclose(stored, float(stats.norm.ppf(argument)), rel_tol=1e-15, abs_tol=0)
    assert gamma_module.REFERENCE.n_captions - 1 == 5099 and gamma_module.REFERENCE.share_at_least_0_8 == 0.9
    # a reference of another size computes its own
    assert gamma_module.expected_max_standard_normal(100) == pytest.approx(2.5076, abs=1e-4)


def test_sorted_rows_give_numpys_percentiles_and_the_same_statistics_on_any_threads():
    """The rows are sorted once for the rule, the margins and the grid: the percentiles read from them
    are np.percentile's to the bit, and two threads give the one-thread numbers to the bit."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    for width in (3, 4, 19, 127):
        rows = rng.uniform(-0.2, 0.99, size=(700, width)).astype(np.float32)
        expected = np.percentile(rows.astype(np.float64), list(gamma_module.MARGIN_PERCENTS), axis=1)
        got = gamma_module._sorted_percentiles(np.sort(rows.astype(np.float64), axis=1),
                                               gamma_module.MARGIN_PERCENTS)
        assert np.array_equal(got, expected)
        one = gamma_module._ShareCurve(rows)
        with ThreadPoolExecutor(2) as pool:
            two = gamma_module._ShareCurve(rows, pool, 2)
            assert two.share(37.5) == one.share(37.5)
            for key, values in two.masses([0.0, 20.0, 90.0], 0.9, 2)._asdict().items():
                assert np.array_equal(values, getattr(one.masses([0.0, 20.0, 90.0], 0.9, 2), key))
        assert gamma_module.margin_cosines(one).hardest == pytest.approx(rows.max(axis=1).astype(np.float64).mean(), rel=1e-12)


def _masses_in_full(rows: np.ndarray, scaled_gammas, hard_edge: float, top_count: int) -> dict:
    """The grid's sums with every weight computed and summed over every row: the formula the closed
    form at gamma 0 and the hard-row sums stand in for."""
    centred = np.sort(rows.astype(np.float64), axis=1)
    centred -= centred[:, -1:].copy()
    n = rows.shape[1]
    hard_count = np.count_nonzero(rows.astype(np.float64) >= hard_edge, axis=1)
    in_hard = (np.arange(n) >= n - hard_count[:, None]).astype(np.float64)
    out = {key: [] for key in ("effective", "hard_mass", "top_mass")}
    for scaled_gamma in scaled_gammas:
        z = scaled_gamma * centred
        w = np.exp(z)
        total, weighted = np.einsum("ij->i", w), np.einsum("ij,ij->i", w, z)
        out["effective"].append(np.exp(np.log(total) - weighted / total).sum())
        out["hard_mass"].append((np.einsum("ij,ij->i", w, in_hard) / total).sum())
        out["top_mass"].append((np.einsum("ij->i", w[:, n - top_count:]) / total).sum())
    return {key: np.array(values) for key, values in out.items()}


@pytest.mark.parametrize("width", [3, 4, 19, 127])
def test_grid_sums_at_gamma_zero_and_over_hard_rows_only_are_the_full_sums_to_the_bit(width, monkeypatch):
    """At gamma 0 the grid's sums are counts, and rows without a hard negative are left out of the hard
    mass: both give what summing every weight of every row gives, to the bit, in one chunk or many."""
    rng = np.random.default_rng(width)
    rows = rng.uniform(0.5, 0.95, size=(900, width)).astype(np.float32)
    rows[::3] = np.minimum(rows[::3], 0.85)   # a third of the rows has no negative at or above 0.9
    gammas = [0.0, -0.0, 12.5, 90.0]
    for edge in (0.9, 0.3, 0.99):   # some rows hard, every row, (almost) none
        expected = _masses_in_full(rows, gammas, edge, 2)
        for chunk in (1 << 17, 7 * width):
            monkeypatch.setattr(gamma_module._ShareCurve, "CHUNK_VALUES", chunk)
            got = gamma_module._ShareCurve(rows).masses(gammas, edge, 2)
            for key in expected:
                assert np.array_equal(getattr(got, key), expected[key]), (edge, chunk, key)


@pytest.mark.parametrize("gammas", [[0.0, 12.5, 25.0, 37.5, 50.0, 62.5, 75.0, 87.5, 100.0],   # the default grid at s = 100
                                    [300.0, 0.0, 100.0, 600.0],                                 # unsorted, with gaps
                                    [100.0 * k for k in range(1, 9)] + [1600.0],                # up to 16 a
                                    [0.1 * 7, 0.3 * 7]])                                        # 0.7 and 2.1
def test_a_grid_of_multiples_takes_one_exp_and_gives_the_full_sums_to_4e_15(gammas, monkeypatch):
    """w(m a) = w(a)^m by repeated products: within 4e-15 of an exp per gamma, in one chunk or many."""
    powers = gamma_module.grid_powers(gammas)
    assert powers is not None and [powers[0] * m for m in powers[1]] == pytest.approx(gammas, rel=1e-15)
    rng = np.random.default_rng(11)
    rows = rng.uniform(-0.3, 0.95, size=(500, 31)).astype(np.float32)
    expected = _masses_in_full(rows, gammas, 0.9, 4)
    exps = []
    for chunk in (1 << 17, 3 * 31):
        monkeypatch.setattr(gamma_module._ShareCurve, "CHUNK_VALUES", chunk)
        curve = gamma_module._ShareCurve(rows)
        monkeypatch.setattr(np, "exp", lambda *a, _exp=np.exp, **k: exps.append(np.shape(a[0])) or _exp(*a, **k))
        got = curve.masses(gammas, 0.9, 4)
        monkeypatch.undo()
        for key in expected:
            assert getattr(got, key) == pytest.approx(expected[key], rel=4e-15, abs=0), key
    # one exp of the chunk's cosines per chunk (the others are of one value a row)
    assert sum(1 for shape in exps if len(shape) == 2) == 1 + math.ceil(500 / 3)


def test_a_grid_that_is_not_multiples_takes_an_exp_a_gamma():
    # not multiples; 17 a; a negative gamma; none positive; 16 products for two exps
    for gammas in ([12.5, 20.0], [10.0, 170.0], [-5.0, 10.0], [0.0], [], [10.0, 160.0]):
        assert gamma_module.grid_powers(gammas) is None


def test_share_curve_spreads_are_numpys_row_std_to_the_bit(monkeypatch):
    rng = np.random.default_rng(8)
    rows = rng.uniform(0.6, 0.9, size=(1000, 127)).astype(np.float32)
    for chunk in (1 << 17, 5 * 127):
        monkeypatch.setattr(gamma_module._ShareCurve, "CHUNK_VALUES", chunk)
        assert np.array_equal(gamma_module._ShareCurve(rows).spreads, rows.std(axis=1, dtype=np.float64))


@pytest.mark.parametrize("batch_size, max_values", [(2, None), (5, None), (33, None), (33, 7 * 32 * 4), (64, 7 * 63)])
def test_in_batch_rows_are_each_batchs_float64_product_to_the_bit(batch_size, max_values, monkeypatch):
    """The stacked products, in runs of batches and on two threads, round each batch's own float64
    product to float32, its diagonal left out: the same bits as one product a batch."""
    from capgeo.geometry.cpu_pass import block_threads

    vectors = common_direction_vectors(400, 30, seed=6)
    batches = sample_batches(np.arange(400), batch_size, 7, 2)
    limit = {} if max_values is None else {"max_values": max_values}
    rows_per_batch = batch_size if max_values is None else max(1, max_values // (7 * (batch_size - 1)))
    off_diagonal = ~np.eye(batch_size, dtype=bool)[:rows_per_batch]

    def one_batch(batch):
        members = vectors[batch].astype(np.float64)
        cosine = members[:rows_per_batch] @ members.T
        return cosine[off_diagonal].reshape(rows_per_batch, batch_size - 1).astype(np.float32)

    expected = np.concatenate([one_batch(batch) for batch in batches])
    assert np.array_equal(in_batch_negative_rows(vectors, batches, **limit), expected)
    monkeypatch.setattr(gamma_module, "ROW_CHUNK_VALUES", 1)   # one batch a run
    with block_threads(2) as pool:
        assert np.array_equal(in_batch_negative_rows(vectors, batches, pool=pool, threads=2, **limit), expected)


def test_image_losses_once_a_gamma_and_side_by_side_are_each_batchs_own_to_the_bit():
    """Plain InfoNCE and a grid gamma of 0 (or a repeated gamma) are computed once, batches run on two
    threads: the losses are those of every gamma of [0, *grid] computed for each batch on its own."""
    from capgeo.geometry.cpu_pass import block_threads

    texts = common_direction_vectors(240, 24, seed=9)
    codes = np.arange(240) // 2
    images = gamma_module.check_image_vectors(texts.reshape(120, 2, -1).mean(axis=1) + 0.01, 120, texts.shape[1])
    batches = sample_batches(codes, 16, 12, 3)
    grid = [0.0, 0.5, -0.0, 0.5, 1.0]
    expected = []
    with block_threads(1):   # (the section's products run on one BLAS thread)
        for batch in batches:
            members = texts[batch].astype(np.float64)
            similarity = images[codes[batch]].astype(np.float64) @ members.T
            expected.append(hnclip_loss_grid(similarity, boosted_caption_cosine(members), 100.0, [0.0, *grid]))
    expected = np.array(expected)
    for pool, threads in ((None, 1), ("pool", 2)):
        with block_threads(threads) as made:
            result = gamma_module.image_loss_diagnostics(texts, images, codes, batches, 100.0, grid,
                                                         pool=made if pool else None, threads=threads).to_dict()
        assert result["plain"]["mean_loss"] == float(expected[:, 0].mean())
        assert [entry["mean_loss"] for entry in result["boosted"]] == [float(expected[:, k].mean()) for k in range(1, 6)]
        assert [entry["share_batches_below"] for entry in result["boosted"]] == [
            float((expected[:, k] < gamma_module.SOLVED_LOSS).mean()) for k in range(1, 6)]
