"""The gamma rule's calibration, recomputed independently: sigma_ref by quadrature, the
reference shares by a large seeded Monte Carlo, the batch-size dependence on synthetic rows,
and the margin view checked by hand on a 5-caption batch."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from capgeo.findings.gamma import (
    REFERENCE,
    in_batch_negative_rows,
    margin_view,
    reference_share,
    reference_within_row_spread,
    shown_gamma,
    suggest_for_rows,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "gamma.md"


def expected_max_by_quadrature(n: int) -> float:
    """E[max of n standard normals] = int_0^inf (1 - Phi^n) dx - int_-inf^0 Phi^n dx
    (a different formula and integrator from the library's trapezoid of x * density)."""
    upper = integrate.quad(lambda x: 1.0 - stats.norm.cdf(x) ** n, 0, np.inf, limit=200)[0]
    lower = integrate.quad(lambda x: stats.norm.cdf(x) ** n, -np.inf, 0, limit=200)[0]
    return upper - lower


def monte_carlo_share(n_negatives: int, scaled_gamma_times_sigma: float, n_rows: int, seed: int) -> float:
    """Mean exp(entropy) / n of softmax(a * G) over rows of n standard-normal cosines (a*sigma given),
    written out with plain numpy weights."""
    rng = np.random.default_rng(seed)
    shares = []
    for _ in range(max(1, n_rows // 20_000)):
        logits = scaled_gamma_times_sigma * rng.standard_normal((min(n_rows, 20_000), n_negatives))
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        entropy = -(weights * np.log(weights)).sum(axis=1)
        shares.append(np.exp(entropy) / n_negatives)
    return float(np.concatenate(shares).mean())


SIGMA_BY_QUADRATURE = (0.93 - 0.84) / expected_max_by_quadrature(5099)


def test_sigma_ref_matches_quadrature_and_the_docs():
    assert reference_within_row_spread() == pytest.approx(SIGMA_BY_QUADRATURE, rel=1e-4)
    assert SIGMA_BY_QUADRATURE == pytest.approx(0.0244, rel=0.01)
    assert "0.02444" in DOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize("gamma, documented", [(0.25, 0.832), (0.5, 0.495), (0.75, 0.251)])
def test_reference_share_matches_a_large_monte_carlo(gamma, documented):
    # 100,000 rows of 127 negatives with a seed of their own: standard error about 0.0003
    independent = monte_carlo_share(127, 100 * gamma * SIGMA_BY_QUADRATURE, 100_000, seed=12345)
    assert reference_share(gamma) == pytest.approx(independent, rel=0.01)
    assert reference_share(gamma) == pytest.approx(documented, abs=0.002)


def solve_independently(n_negatives: int, target: float) -> float:
    """gamma (s = 100) whose Monte Carlo share over n normal negatives at sigma_ref is ``target``:
    plain bisection on a * sigma with common random numbers."""
    low, high = 0.0, 5.0
    for _ in range(24):
        middle = (low + high) / 2
        if monte_carlo_share(n_negatives, middle, 40_000, seed=99) > target:
            low = middle
        else:
            high = middle
    return (low + high) / 2 / SIGMA_BY_QUADRATURE / 100


def test_batch_size_dependence_on_identical_geometry():
    """Rows of B - 1 normal cosines at the reference spread: the same geometry asks for more gamma
    in a small batch (its largest cosine sits closer to the rest), 0.5 at the reference's 128,
    and tends to the Gaussian limit share = exp(-(a sigma)^2 / 2) for very large B."""
    rng = np.random.default_rng(2024)
    target = monte_carlo_share(127, 50 * SIGMA_BY_QUADRATURE, 100_000, seed=7)
    found = {}
    for batch_size, n_rows in ((8, 100_000), (16, 50_000), (128, 8_000)):
        rows = 0.84 + SIGMA_BY_QUADRATURE * rng.standard_normal((n_rows, batch_size - 1))
        found[batch_size] = suggest_for_rows(rows, 100.0).to_dict()["gamma_exact"]
    assert found[128] == pytest.approx(0.5, abs=0.01)
    for batch_size in (8, 16):
        assert found[batch_size] == pytest.approx(solve_independently(batch_size - 1, target), rel=0.015)
    assert found[8] == pytest.approx(0.75, abs=0.02) and found[16] == pytest.approx(0.60, abs=0.02)
    assert found[8] > found[16] > found[128]
    # the infinite-batch limit, closed form
    wide = 0.84 + SIGMA_BY_QUADRATURE * rng.standard_normal((400, 4095))
    limit = math.sqrt(-2 * math.log(reference_share(0.5))) / (100 * SIGMA_BY_QUADRATURE)
    assert suggest_for_rows(wide, 100.0).to_dict()["gamma_exact"] == pytest.approx(limit, rel=0.02)


def test_margins_by_hand_on_a_five_caption_batch():
    gram = np.array([
        [1.00, 0.90, 0.50, 0.30, 0.10],
        [0.90, 1.00, 0.60, 0.20, 0.20],
        [0.50, 0.60, 1.00, 0.40, 0.30],
        [0.30, 0.20, 0.40, 1.00, 0.70],
        [0.10, 0.20, 0.30, 0.70, 1.00],
    ])
    vectors = np.linalg.cholesky(gram).astype(np.float32)   # rows with exactly these cosines
    rows = in_batch_negative_rows(vectors, np.arange(5)[None, :])
    # each row's four negatives, sorted, read off the matrix by hand:
    # row 0: .1 .3 .5 .9   median .40  p90 (.5 + .7 * .4) = .78   max .9
    # row 1: .2 .2 .6 .9   median .40  p90 (.6 + .7 * .3) = .81   max .9
    # row 2: .3 .4 .5 .6   median .45  p90 (.5 + .7 * .1) = .57   max .6
    # row 3: .2 .3 .4 .7   median .35  p90 (.4 + .7 * .3) = .61   max .7
    # row 4: .1 .2 .3 .7   median .25  p90 (.3 + .7 * .4) = .58   max .7
    median, p90, hardest = 1.85 / 5, 3.35 / 5, 3.8 / 5
    mean_cosine = 2 * (0.9 + 0.5 + 0.3 + 0.1 + 0.6 + 0.2 + 0.2 + 0.4 + 0.3 + 0.7) / 20   # 0.42
    view = margin_view(rows, float(rows.mean(dtype=np.float64)), 0.5).to_dict()
    assert view["cosines"] == pytest.approx({"median": median, "p90": p90, "hardest": hardest}, abs=1e-6)
    assert view["suggested"] == pytest.approx({"median": 0.5 * median, "p90": 0.5 * p90, "hardest": 0.5 * hardest},
                                              abs=1e-6)
    # the paper default's margin at DOCCI's mean negative cosine, 0.5 x 0.84, matched at this batch's 0.42
    assert view["paper_margin_at_mean"] == pytest.approx(0.42)
    assert view["margin_matched_gamma"] == pytest.approx(0.42 / mean_cosine, abs=1e-6) == pytest.approx(1.0)
    # the paper default's own margins on the reference rows: median ~ 0.42, hardest of 127 by quadrature
    paper = view["paper_default"]
    assert paper["median"] == pytest.approx(0.5 * 0.84, abs=5e-4)
    assert paper["hardest"] == pytest.approx(0.5 * (0.84 + SIGMA_BY_QUADRATURE * expected_max_by_quadrature(127)),
                                             abs=1e-3)
    assert paper["hardest_companion"] == pytest.approx(0.465)


def test_shown_values_have_no_jump_at_any_step():
    # the old display snapped 0.191 and 0.187 to 0.25 and 0.175; shown as computed they stay together
    assert shown_gamma(0.191) == shown_gamma(0.187) == 0.19
    values = np.linspace(0.05, 2.0, 4001)
    assert np.abs(np.array([shown_gamma(v) for v in values]) - values).max() <= 0.005 + 1e-12


def test_docs_state_the_numbers_the_tests_pin():
    text = DOCS.read_text(encoding="utf-8")
    for number in ("0.456", "0.495", "0.42", "81.34", "83.86"):
        assert number in text
    assert REFERENCE.batch_size == 128 and re.search(r"B\s*=\s*8\b", text)
