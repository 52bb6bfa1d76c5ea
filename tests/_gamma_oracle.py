"""The gamma rule's quantities recomputed by brute force with numpy/scipy, independently of
capgeo.findings.gamma: in-batch rows from the batches, softmax, exp(entropy)."""

from __future__ import annotations

import numpy as np
from scipy.special import softmax
from scipy.stats import entropy

from capgeo.geometry.batches import sample_batches


def in_batch_rows(vectors, group_codes, batch_size: int, n_batches: int, seed: int) -> np.ndarray:
    """Each batch row's cosines to its B-1 negatives, float64, shape (n_batches * B, B-1)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    batches = sample_batches(np.asarray(group_codes), batch_size, n_batches, seed)
    cosines = np.einsum("bid,bjd->bij", vectors[batches], vectors[batches])
    return cosines[:, ~np.eye(batch_size, dtype=bool)].reshape(-1, batch_size - 1)


def effective_share(rows: np.ndarray, scaled_gamma: float) -> float:
    """Mean over rows of exp(entropy of softmax(scaled_gamma * row)) / row length."""
    return float(np.exp(entropy(softmax(scaled_gamma * rows, axis=1), axis=1)).mean() / rows.shape[1])


def check_suggestion(section: dict, vectors, group_codes) -> None:
    """Every batch size's suggestion in a gamma section agrees with the brute-force rule."""
    for entry in section["batches"]:
        suggestion = entry["suggestion"]
        rows = in_batch_rows(vectors, group_codes, entry["batch_size"], section["n_batches"], section["seed"])
        assert abs(entry["within_row_spread"] - rows.std(axis=1).mean()) < 1e-6
        assert abs(entry["mean_cosine"] - rows.mean()) < 1e-6
        assert suggestion["gamma"] == round(suggestion["gamma_exact"], 2)  # shown as computed, two decimals
        if not suggestion["clipped"]:
            share = effective_share(rows, section["logit_scale"] * suggestion["gamma_exact"])
            assert abs(share - suggestion["target_share"]) < 1e-5, (entry["batch_size"], share)
