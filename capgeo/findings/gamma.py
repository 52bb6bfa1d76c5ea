"""A starting gamma for HN-CLIP, with the numbers behind it.

HN-CLIP's logits are s * (S + gamma * Gbar). For row i, the softmax over its
negatives j != i gets the extra factor exp(s * gamma * G_ij), so s * gamma (the
*scaled gamma*) sets how strongly the softmax concentrates on the captions most
similar to caption i. We measure that concentration as the **effective number of
negatives**, exp(entropy) of the caption-geometry part of each row's softmax,
as a share of the B - 1 negatives.

The rule (derivation in docs/gamma.md) transfers the paper's default: find the
scaled gamma that gives this dataset's real batches the same mean effective share
as gamma = 0.5, s = 100, B = 128 gives a reference geometry built from the
paper's DOCCI statistics (mean pairwise 0.84, mean hardest companion 0.93 over
5,100 captions); divide by s. The range transfers the per-benchmark best values
of the paper's sweep (0.25 and 0.75) the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple, Sequence

import numpy as np

from capgeo.blas import one_blas_thread
from capgeo.defaults import GAMMA_HARD_EDGE, MAX_GAMMA, MAX_LOGIT_SCALE
from capgeo.encoders.base import UNIT_NORM_TOLERANCE
from capgeo.errors import CapgeoError
from capgeo.findings.encoder_caution import encoder_caution
from capgeo.findings.hnclip_loss import boosted_caption_cosine, hnclip_loss_grid
from capgeo.findings.result import section
from capgeo.geometry.batch_size import DEFAULT_N_BATCHES, check_gamma_batch_size, resolve_batch_sizes
from capgeo.geometry.row_norms import first_non_finite_row, row_norms
from capgeo.geometry.typed_profile import (Dataset, Encoder, Gamma, GammaBatch, GammaBoostedLoss, GammaGridRow,
                                           GammaImageLosses, GammaLossShare, GammaMarginCosines, GammaMargins,
                                           GammaPaperMargins, GammaReference, GammaSuggestion, Options,
                                           PaperSweepPoint, Profile, Provenance)

#: gamma grid of the diagnostics table: 0 to 1 in steps of 1/8
DEFAULT_GRID = tuple(k / 8 for k in range(9))
#: logit scale used when neither the checkpoint nor --logit-scale gives one (the paper's s, about 100)
DEFAULT_LOGIT_SCALE = 100.0
#: suggestions are clipped to this interval: below it the boost is negligible, above it lies far
#: outside anything the paper tested (0 to 1)
GAMMA_CLIP = (0.05, 2.0)
#: a batch is "solved" when its loss is below this (the paper's diagnostic during training)
SOLVED_LOSS = 1e-3
#: cap on in-batch cosines kept for the concentration (float32 values); bounds memory for large B
MAX_ROW_VALUES = 4_000_000
#: float64 values (gathered vectors and their cosines) of the batches multiplied at once: a run this
#: small stays in the CPU's cache from the product to the float32 rows
ROW_CHUNK_VALUES = 1 << 18
#: The paper's gamma sweep (HN-CLIP, Long-CLIP-L fine-tuned on DOCCI): average R@1 over its
#: benchmarks per gamma. The optimum is a plateau from 0.25 to 0.75 (each benchmark's best lies
#: there); gamma > 0 matters far more than its second decimal.
PAPER_SWEEP = {0.0: 81.34, 0.25: 83.80, 0.5: 83.86, 0.75: 83.61, 1.0: 83.04}
PAPER_SWEEP_NOTE = ("paper's sweep, average R@1: gamma 0 -> 81.34, 0.25 -> 83.80, 0.5 -> 83.86, 0.75 -> 83.61, "
                    "1.0 -> 83.04 (per-benchmark best between 0.25 and 0.75): a plateau, gamma > 0 matters more "
                    "than its second decimal")


@dataclass(frozen=True)
class ReferenceGeometry:
    """The paper's setting (HN-CLIP, Long-CLIP-L text encoder on DOCCI test) the rule transfers from."""

    mean_pairwise: float = 0.84
    mean_hardest_companion: float = 0.93
    n_captions: int = 5100
    share_at_least_0_8: float = 0.90     # "86-99% of in-batch negatives >= 0.8"; ~0.9 for DOCCI
    gamma: float = 0.5
    logit_scale: float = 100.0
    batch_size: int = 128
    range_gammas: tuple[float, float] = (0.25, 0.75)   # best gamma per benchmark in the paper's sweep
    n_rows: int = 4096                   # synthetic reference rows (deterministic: fixed seed)
    seed: int = 0


REFERENCE = ReferenceGeometry()


@dataclass(frozen=True)
class GammaOptions:
    """What the gamma section computes from the caption vectors: its fields' defaults are the only
    defaults of :func:`gamma_section`'s keywords."""

    #: None: the checkpoint's logit scale, else DEFAULT_LOGIT_SCALE
    logit_scale: float | None = None
    #: None: the one batch-size policy (capgeo.geometry.batch_size); the first is the headline
    batch_sizes: Sequence[int] | None = None
    grid: Sequence[float] = DEFAULT_GRID
    n_batches: int = DEFAULT_N_BATCHES
    seed: int | None = 0
    hard_edge: float = GAMMA_HARD_EDGE
    reference: ReferenceGeometry = REFERENCE

    @classmethod
    def of(cls, options: "GammaOptions | None" = None, **fields) -> "GammaOptions":
        """``options`` (default: the defaults) with ``fields`` set."""
        from capgeo.arguments import with_fields

        return with_fields(cls, options, cls.__name__, fields)


class Masses(NamedTuple):
    """Per scaled gamma, summed over rows (:meth:`_ShareCurve.masses`)."""

    effective: np.ndarray
    hard_mass: np.ndarray
    top_mass: np.ndarray


#: E[max of n standard normals] (expected_max_standard_normal) and the standard normal quantile
#: (scipy.stats.norm.ppf) at the default reference's n - 1 and share, as scipy computes them
#: (tests/test_gamma.py recomputes both): every profile needs them, and importing scipy for two
#: constants takes longer than all of the gamma section's arithmetic
_REFERENCE_CONSTANTS = {("expected_max", 5099): 3.682584554444196, ("normal_quantile", 0.9): 1.2815515655446004}


# ---------------------------------------------------------------- reference geometry

@lru_cache(maxsize=None)
def expected_max_standard_normal(n: int) -> float:
    """E[max of n independent standard normals]: the integral of x * n * phi(x) * Phi(x)^(n-1),
    by the trapezoid rule on a fine grid (the integrand is smooth and negligible outside [-10, 12])."""
    known = _REFERENCE_CONSTANTS.get(("expected_max", int(n)))
    if known is not None:
        return known
    from scipy.special import log_ndtr

    x = np.linspace(-10.0, 12.0, 220_001)
    density = n * np.exp(-0.5 * x * x - 0.5 * math.log(2 * math.pi) + (n - 1) * log_ndtr(x))
    return float(np.trapezoid(x * density, x))


def reference_within_row_spread(reference: ReferenceGeometry = REFERENCE) -> float:
    """Within-row standard deviation of caption cosine implied by the paper's statistics.

    Model: caption i's cosines to the other N - 1 captions are normal with the row's
    mean and standard deviation sigma. The hardest companion is the maximum of N - 1
    of them, so mean hardest - mean pairwise = sigma * E[max of N - 1 standard normals]."""
    gap = reference.mean_hardest_companion - reference.mean_pairwise
    return gap / expected_max_standard_normal(reference.n_captions - 1)


def reference_between_row_spread(reference: ReferenceGeometry = REFERENCE) -> float:
    """Standard deviation of the row means that, with the within-row spread, puts
    ``share_at_least_0_8`` of all pairs at cosine >= 0.8 (used to build look-alike data)."""
    total = (reference.mean_pairwise - 0.8) / _normal_quantile(reference.share_at_least_0_8)
    within = reference_within_row_spread(reference)
    return math.sqrt(max(total ** 2 - within ** 2, 0.0))


def _normal_quantile(share: float) -> float:
    known = _REFERENCE_CONSTANTS.get(("normal_quantile", float(share)))
    if known is not None:
        return known
    from scipy.special import ndtri  # what scipy.stats.norm.ppf computes

    return float(ndtri(share))


@lru_cache(maxsize=8)
def _reference_rows(reference: ReferenceGeometry) -> np.ndarray:
    sigma = reference_within_row_spread(reference)
    rng = np.random.default_rng(reference.seed)
    rows = reference.mean_pairwise + sigma * rng.standard_normal((reference.n_rows, reference.batch_size - 1))
    rows.setflags(write=False)
    return rows


def reference_rows(reference: ReferenceGeometry = REFERENCE) -> np.ndarray:
    """Synthetic in-batch rows of the reference: (n_rows, B_ref - 1) cosines, deterministic."""
    return _reference_rows(reference)


@lru_cache(maxsize=8)
def _reference_curve(reference: ReferenceGeometry) -> "_ShareCurve":
    """The reference rows sorted once, for every reference share and the margin view's cosines."""
    return _ShareCurve(reference_rows(reference))


@lru_cache(maxsize=64)
def reference_share(gamma: float, reference: ReferenceGeometry = REFERENCE) -> float:
    """Mean effective-negative share that ``gamma`` gives the reference at s_ref, B_ref."""
    return mean_effective_share(_reference_curve(reference), reference.logit_scale * gamma)


# ---------------------------------------------------------------- concentration

def _side_by_side(run, items: list, pool, threads: int) -> None:
    """``run(part)`` over ``items``: in one call without a pool (or with fewer than two threads or
    items), else on the pool's ``threads`` threads, each taking every threads-th item. Each item's
    arithmetic is its own, so the split changes no bit."""
    if pool is None or threads < 2 or len(items) < 2:
        run(items)
    else:
        list(pool.map(run, [items[part::threads] for part in range(threads)]))


class _ShareCurve:
    """Each in-batch row's softmax statistics as functions of the scaled gamma.

    The rows are kept once, in float64, each sorted ascending and less its maximum (so every
    exponent is <= 0 and never overflows, and a row's largest values are its last columns),
    and each scaled gamma's share is remembered: the rule solves three times on the same rows,
    from the same two interval ends, and the grid, the margins and the rule all read the same
    sorted rows. Every statistic is symmetric in a row's values, so sorting changes none but
    the order of the sums. Each row's arithmetic is its own and rows are summed at the end, so
    neither the chunk size nor the threads change a bit: ``pool`` (from cpu_pass.block_threads, of
    ``threads`` threads) runs the chunks side by side (numpy releases the GIL in its loops)."""

    #: values per chunk: a chunk this small stays in the CPU's cache through the passes over it
    CHUNK_VALUES = 1 << 17

    def __init__(self, rows: np.ndarray, pool=None, threads: int = 1):
        rows = np.asarray(rows)
        self.rows, self.pool, self.threads = rows, pool, threads if pool is not None else 1
        self.n_rows, self.n_negatives = rows.shape
        step = max(1, self.CHUNK_VALUES // max(self.n_negatives, 1))
        self.starts = list(range(0, self.n_rows, step))
        self.centred = [None] * len(self.starts)
        # each row's median, 90th percentile and largest value: the margin view's cosines
        self.order_statistics = np.empty((3, self.n_rows))
        # each row's standard deviation (what rows.std(axis=1, dtype=np.float64) gives, row by row):
        # the within-row spread
        self.spreads = np.empty(self.n_rows)

        def sort(index, start, _scratch):
            chunk = rows[start:start + step].astype(np.float64)
            self.spreads[start:start + len(chunk)] = chunk.std(axis=1)
            chunk.sort(axis=1)
            self.order_statistics[:2, start:start + len(chunk)] = _sorted_percentiles(chunk, MARGIN_PERCENTS)
            self.order_statistics[2, start:start + len(chunk)] = chunk[:, -1]
            chunk -= chunk[:, -1:].copy()
            self.centred[index] = chunk

        self._each_chunk(sort, scratch=False)
        self.shares: dict[float, float] = {}

    def _each_chunk(self, work, scratch: bool = True) -> None:
        """work(index, first row, scratch buffers) for every chunk, on the pool's threads
        (:func:`_side_by_side`; each thread's chunks with buffers of their own)."""
        def run(indices):
            buffers = None
            if scratch and indices:
                buffers = (np.empty_like(self.centred[0]), np.empty_like(self.centred[0]))
            for index in indices:
                work(index, self.starts[index], buffers)

        _side_by_side(run, list(range(len(self.starts))), self.pool, self.threads)

    @staticmethod
    def _weights(scaled_gamma: float, centred: np.ndarray, buffers):
        """(w = exp(z), sum of w, sum of w z) for z = scaled_gamma * centred, one chunk's rows."""
        z, w = buffers[0][:len(centred)], buffers[1][:len(centred)]
        np.multiply(scaled_gamma, centred, out=z)
        np.exp(z, out=w)
        return w, np.einsum("ij->i", w), np.einsum("ij,ij->i", w, z)

    def effective(self, scaled_gamma: float, slopes: np.ndarray | None = None) -> np.ndarray:
        """Each row's effective negatives at ``scaled_gamma``; with ``slopes``, also each row's
        derivative of them in the scaled gamma, written there (the same pass over the rows)."""
        out = np.empty(self.n_rows)

        def work(index, start, buffers):
            centred = self.centred[index]
            stop = start + len(centred)
            w, total, weighted = self._weights(scaled_gamma, centred, buffers)
            # entropy of w = e^z / sum: log(sum) - sum(w z) / sum
            mean_z = weighted / total
            np.exp(np.log(total) - mean_z, out=out[start:stop])
            if slopes is not None:
                # d entropy / d scaled_gamma = -(variance of z under the softmax) / scaled_gamma
                z = buffers[0][:len(centred)]   # z = scaled_gamma * centred, where _weights leaves it
                np.multiply(z, z, out=z)
                variance = np.einsum("ij,ij->i", w, z) / total - mean_z * mean_z
                np.multiply(out[start:stop], -variance / scaled_gamma, out=slopes[start:stop])

        self._each_chunk(work)
        return out

    def share(self, scaled_gamma: float) -> float:
        scaled_gamma = float(scaled_gamma)
        if scaled_gamma not in self.shares:
            self.shares[scaled_gamma] = float(self.effective(scaled_gamma).mean() / self.n_negatives)
        return self.shares[scaled_gamma]

    def share_and_slope(self, scaled_gamma: float) -> tuple[float, float]:
        """The mean effective share at ``scaled_gamma`` (the bits :meth:`share` gives) and its
        derivative in the scaled gamma, from one pass over the rows."""
        scaled_gamma = float(scaled_gamma)
        slopes = np.empty(self.n_rows)
        share = float(self.effective(scaled_gamma, slopes).mean() / self.n_negatives)
        self.shares[scaled_gamma] = share
        return share, float(slopes.mean() / self.n_negatives)

    def masses(self, scaled_gammas, hard_edge: float, top_count: int) -> Masses:
        """Summed over rows, per scaled gamma: effective negatives, the softmax mass on negatives at
        or above ``hard_edge`` and on each row's ``top_count`` most similar negatives (exactly that
        many: tied negatives carry equal weights, so which of them fill the last places does not
        change the mass). A grid of multiples of one scaled gamma (:func:`grid_powers`) takes one
        exp per cosine in all: w(m a) = w(a)^m, by repeated products."""
        per_row = {key: np.empty((len(scaled_gammas), self.n_rows)) for key in ("effective", "hard_mass", "top_mass")}
        columns = np.arange(self.n_negatives)
        powers = grid_powers(scaled_gammas)
        at_power: dict[int, list[int]] = {}   # the grid's gammas k by their multiple
        for k, multiple in enumerate(powers[1] if powers else ()):
            at_power.setdefault(multiple, []).append(k)

        def weights(centred, buffers):
            """(k, w, sum of w, sum of w z) for every nonzero scaled gamma k of the grid."""
            if powers is None:
                for k, scaled_gamma in enumerate(scaled_gammas):
                    if scaled_gamma != 0:
                        yield (k, *self._weights(scaled_gamma, centred, buffers))
                return
            step, multiples = powers
            base, w = buffers[0][:len(centred)], buffers[1][:len(centred)]
            np.multiply(step, centred, out=base)
            np.exp(base, out=base)
            for power in range(1, max(multiples) + 1):
                if power == 1:
                    np.copyto(w, base)
                else:
                    w *= base
                for k in at_power.get(power, ()):
                    yield k, w, np.einsum("ij->i", w), scaled_gammas[k] * np.einsum("ij,ij->i", w, centred)

        def work(index, start, buffers):
            centred = self.centred[index]
            stop = start + len(centred)
            # a sorted row's negatives at or above the edge are its last ones (compared in float64)
            hard_count = np.count_nonzero(self.rows[start:stop].astype(np.float64) >= hard_edge, axis=1)
            # a row without one has hard mass 0 / total = 0 (its sum of w * 0 is 0): only the others
            # are summed, each row's sum the same whatever rows share the call
            hard_rows = None if hard_count.all() else np.flatnonzero(hard_count)
            counted = hard_count if hard_rows is None else hard_count[hard_rows]
            in_hard = (columns >= self.n_negatives - counted[:, None]).astype(np.float64)
            for k, scaled_gamma in enumerate(scaled_gammas):
                if scaled_gamma == 0:
                    # every weight is exp(0) = 1 (C99 F.9.3.1) and every z is 0: the sums are counts,
                    # exact in float64, and sum(w z) / total is 0
                    total = np.full(len(centred), float(self.n_negatives))
                    np.exp(np.log(total), out=per_row["effective"][k, start:stop])
                    np.divide(hard_count, total, out=per_row["hard_mass"][k, start:stop])
                    np.divide(float(top_count), total, out=per_row["top_mass"][k, start:stop])
            for k, w, total, weighted in weights(centred, buffers):
                effective, hard_mass, top_mass = (per_row[key][k, start:stop]
                                                  for key in ("effective", "hard_mass", "top_mass"))
                np.exp(np.log(total) - weighted / total, out=effective)
                if hard_rows is None:
                    np.divide(np.einsum("ij,ij->i", w, in_hard), total, out=hard_mass)
                else:
                    hard_mass[:] = 0.0
                    hard_mass[hard_rows] = np.einsum("ij,ij->i", w[hard_rows], in_hard) / total[hard_rows]
                np.divide(np.einsum("ij->i", w[:, self.n_negatives - top_count:]), total, out=top_mass)

        self._each_chunk(work)
        return Masses(*(per_row[key].sum(axis=1) for key in Masses._fields))


#: the most repeated products that make one grid weight (w(m a) = w(a)^m): each adds at most about
#: an ulp to the weight's rounding, so the weights stay within 4e-15 of their exp
MAX_GRID_POWER = 16


def grid_powers(scaled_gammas) -> tuple[float, list[int]] | None:
    """(a, multiples) with each scaled gamma ``multiples[k] * a`` (0 to MAX_GRID_POWER times its
    smallest positive one, a), when the grid is such multiples (the default: 1/8, 2/8, ... 1) and
    the products do not outnumber twice the exps they replace (a product costs a fraction of an
    exp even where numpy's exp is vectorised, AVX-512); otherwise None (an exp a gamma)."""
    positive = [float(gamma) for gamma in scaled_gammas if gamma > 0]
    if not positive:
        return None
    step = min(positive)
    multiples = [round(float(gamma) / step) for gamma in scaled_gammas]
    if any(not 0 <= multiple <= MAX_GRID_POWER or abs(float(gamma) - multiple * step) > 1e-12 * abs(float(gamma))
           for gamma, multiple in zip(scaled_gammas, multiples)):
        return None
    if max(multiples) > 2 * len({multiple for multiple in multiples if multiple > 0}):
        return None
    return step, multiples


#: the margin view's percentiles of each row (with its largest value)
MARGIN_PERCENTS = (50, 90)


def _sorted_percentiles(sorted_rows: np.ndarray, percents) -> np.ndarray:
    """(len(percents), rows): percentiles of rows sorted ascending, as np.percentile's linear method
    computes them (its interpolation between order statistics, numpy.lib's _lerp, written out)."""
    n = sorted_rows.shape[1]
    index = (n - 1) * (np.asarray(percents, dtype=np.float64) / 100)
    below = np.floor(index).astype(np.intp)
    above = np.minimum(below + 1, n - 1)
    fraction = (index - below)[:, None]
    low, high = sorted_rows[:, below].T, sorted_rows[:, above].T
    difference = high - low
    out = low + difference * fraction
    np.subtract(high, difference * (1 - fraction), out=out, where=np.broadcast_to(fraction >= 0.5, out.shape))
    return out


def _curve(rows) -> _ShareCurve:
    return rows if isinstance(rows, _ShareCurve) else _ShareCurve(rows)


def effective_negatives(rows: np.ndarray, scaled_gamma: float) -> np.ndarray:
    """exp(entropy) of each row's softmax of scaled_gamma * cosine over its negatives; shape (R,).

    Equals the number of negatives (row length) at scaled_gamma = 0 and falls towards 1
    as the softmax concentrates on the row's most similar caption."""
    return _ShareCurve(rows).effective(scaled_gamma)


def mean_effective_share(rows, scaled_gamma: float) -> float:
    """Mean over rows of effective negatives / negatives per row. Decreasing in scaled_gamma:
    d(entropy)/d(scaled_gamma) = -scaled_gamma * (weighted variance of the row's cosines)."""
    return _curve(rows).share(scaled_gamma)


#: the root search stops once a Newton step moves the scaled gamma by at most this share of it: the
#: step is about the error of the point it leaves, and the error of the point it reaches is about
#: its square (under 1e-12 of the root; tests/test_gamma.py)
ROOT_STEP_TOLERANCE = 1e-6
#: share evaluations one root search may make (it takes 3-6 on the tests' rows; bisection alone
#: would need under 60 on [s * 0.05, s * 2])
ROOT_MAX_EVALUATIONS = 100


def solve_scaled_gamma(rows, target_share: float, low: float, high: float) -> tuple[float, str | None]:
    """The scaled gamma in [low, high] whose mean effective share is ``target_share``.

    ``rows`` are the in-batch rows (or their _ShareCurve, to solve several targets on them).
    Returns (value, None), or the interval end and "low"/"high" when the target lies
    outside what the interval reaches (the caller reports it as clipped).

    Newton's method on log(share) as a function of a^2, a the scaled gamma: for normal rows
    log(share) is -(a sigma)^2 / 2, a straight line in a^2, so the first point (that closed form
    at the rows' mean within-row spread) is close and each step about squares the error. The
    derivative comes from the same pass as the share. The share is decreasing in a, so every point
    also narrows the interval that holds the root; a step that leaves it is replaced by its
    midpoint, and an end of [low, high] is evaluated only when a step would cross it (to tell
    whether the target is out of reach). Each point depends only on the rows and the target, so
    the root is the same whatever else was computed on the curve before."""
    curve = _curve(rows)
    low, high, log_target = float(low), float(high), math.log(target_share)
    below, above = low, high                 # the root lies in [below, above]
    below_known = above_known = False        # whether the share there was computed

    def excess_at(end):
        return math.log(curve.share(end)) - log_target

    spread = float(curve.spreads.mean())
    point = math.sqrt(-2 * log_target) / spread if spread > 0 and log_target < 0 else math.sqrt(low * high)
    point = min(max(point, low), high)
    for _ in range(ROOT_MAX_EVALUATIONS):
        share, slope = curve.share_and_slope(point)
        excess = math.log(share) - log_target    # > 0: the share is still too large, the root lies above
        if point == high and excess >= 0:
            return high, "high"
        if point == low and excess <= 0:
            return low, "low"
        if excess == 0:
            return point, None
        if excess > 0:
            below, below_known = point, True
        else:
            above, above_known = point, True
        # d log(share) / d(a^2) = slope / (share * 2a)
        rate = slope / (share * 2 * point)
        squared = point * point - excess / rate if rate < 0 else math.nan
        following = math.sqrt(squared) if squared > 0 else (math.inf if excess > 0 else 0.0)
        if excess > 0 and following >= above and not above_known:
            if excess_at(high) >= 0:
                return high, "high"
            above_known = True
        elif excess < 0 and following <= below and not below_known:
            if excess_at(low) <= 0:
                return low, "low"
            below_known = True
        if below <= following <= above and abs(following - point) <= ROOT_STEP_TOLERANCE * point:
            return following, None   # (a step below the float spacing leaves the point as it is)
        if not below < following < above:
            following = (below + above) / 2
        point = following
    raise CapgeoError(f"the gamma rule's root search did not converge in {ROOT_MAX_EVALUATIONS} evaluations "
                      f"between {low} and {high}")


def shown_gamma(value: float) -> float:
    """A rule value as shown: two decimals, no grid snapping (the paper's grid step, 1/4, is
    far coarser than any difference this could hide; docs/gamma.md says so in words)."""
    return round(float(value), 2)


# ---------------------------------------------------------------- batches

def in_batch_negative_rows(vectors: np.ndarray, batches: np.ndarray, max_values: int = MAX_ROW_VALUES,
                           pool=None, threads: int = 1) -> np.ndarray:
    """Caption cosines of each row to its B - 1 in-batch negatives: (rows, B - 1) float32.

    Keeps at most ``max_values`` cosines: when B is large, only the first rows of each
    batch (a random subset, since batch order is random) are kept. ``pool`` (from
    cpu_pass.block_threads, of ``threads`` threads) multiplies batches side by side; each batch's
    product is its own BLAS call on one thread, so neither the pool nor the run length changes a bit."""
    n_batches, batch_size = batches.shape
    rows_per_batch = int(min(batch_size, max(1, max_values // (n_batches * (batch_size - 1)))))
    out = np.empty((n_batches * rows_per_batch, batch_size - 1), dtype=np.float32)
    # row i's negatives are its columns j < i, then its columns j > i shifted one to the left
    below_diagonal = np.arange(batch_size - 1)[None, :] < np.arange(rows_per_batch)[:, None]
    width = vectors.shape[1]
    step = max(1, ROW_CHUNK_VALUES // (batch_size * (width + rows_per_batch)))

    def run(starts):
        for start in starts:
            stop = min(start + step, n_batches)
            # in float64, rounded to float32 on the way out: a float32 product's last bits depend on
            # how many threads BLAS splits it over, and the softmax statistics made that visible (the
            # JSON changed with OMP_NUM_THREADS); float64's differences are far below float32's rounding.
            # The stacked product is one BLAS call a batch, the call a single batch's product makes
            members = vectors[batches[start:stop]].astype(np.float64)                 # (c, B, d)
            cosine = np.matmul(members[:, :rows_per_batch], members.transpose(0, 2, 1))  # (c, R, B)
            kept = out[start * rows_per_batch:stop * rows_per_batch].reshape(stop - start, rows_per_batch,
                                                                           batch_size - 1)
            np.copyto(kept, cosine[:, :, 1:], casting="same_kind")
            np.copyto(kept, cosine[:, :, :-1], casting="same_kind", where=below_diagonal)

    with one_blas_thread():   # (a pool from block_threads runs on one already)
        _side_by_side(run, list(range(0, n_batches, step)), pool, threads)
    return out


def grid_diagnostics(rows, logit_scale: float, gammas, hard_edge: float, *,
                     cosines: GammaMarginCosines | None = None) -> list[GammaGridRow]:
    """For each gamma: how concentrated the caption-geometry part of each row's softmax is.

    Row i's weights over its negatives are w_ij ∝ exp(s * gamma * G_ij) (S is unknown at
    initialisation without image embeddings, so it is left out). ``rows``: the in-batch rows or
    their _ShareCurve; ``cosines``: the rows' margin_cosines, when the caller has them."""
    curve = _curve(rows)
    n_negatives = curve.n_negatives
    top_count = max(1, math.ceil(0.1 * n_negatives))
    sums = curve.masses([logit_scale * gamma for gamma in gammas], hard_edge, top_count)
    n_rows = curve.n_rows
    cosines = margin_cosines(curve) if cosines is None else cosines
    median, hardest = cosines.median, cosines.hardest
    out = []
    for k, gamma in enumerate(gammas):
        scaled = logit_scale * gamma
        effective = sums.effective[k] / n_rows
        out.append(GammaGridRow(
            gamma=float(gamma), scaled_gamma=float(scaled), effective_negatives=float(effective),
            effective_share=float(effective / n_negatives), hard_bucket_mass=float(sums.hard_mass[k] / n_rows),
            top_decile_mass=float(sums.top_mass[k] / n_rows), boost_median=float(scaled * median),
            boost_hardest=float(scaled * hardest), boost_gap=float(scaled * (hardest - median))))
    return out


def margin_cosines(rows) -> GammaMarginCosines:
    """Mean over rows of each row's median, 90th-percentile (linear interpolation) and largest
    negative cosine: the G_ij at which the margin gamma * G_ij is read. ``rows``: the in-batch
    rows or their _ShareCurve."""
    curve = _curve(rows)
    median, p90, hardest = curve.order_statistics.sum(axis=1) / max(curve.n_rows, 1)
    return GammaMarginCosines(float(median), float(p90), float(hardest))


def margins_at(gamma: float, cosines: MarginCosines) -> GammaMarginCosines:
    """gamma * G at the median, p90 and hardest in-batch negative: the extra amount (in cosine
    units, before s) by which the positive must beat that negative."""
    return GammaMarginCosines(gamma * cosines.median, gamma * cosines.p90, gamma * cosines.hardest)


def paper_margin(reference: ReferenceGeometry = REFERENCE) -> float:
    """The paper default's margin at DOCCI's mean negative cosine: 0.5 x 0.84 = 0.42."""
    return reference.gamma * reference.mean_pairwise


def margin_view(rows, mean_cosine: float, suggested_gamma: float,
                reference: ReferenceGeometry = REFERENCE, *, cosines: GammaMarginCosines | None = None) -> GammaMargins:
    """The margin reading of gamma beside the concentration rule: margins gamma * G at the
    suggested gamma on these rows, the paper default's on the reference rows, and the
    *margin-matched gamma* whose margin at this dataset's mean negative cosine equals
    the paper default's on DOCCI (None when the mean cosine is not positive). ``cosines``: the
    rows' margin_cosines, when the caller has them."""
    target = paper_margin(reference)
    cosines = margin_cosines(rows) if cosines is None else cosines
    paper = margins_at(reference.gamma, _reference_margin_cosines(reference))
    return section(
        GammaMargins, cosines=cosines, suggested=margins_at(suggested_gamma, cosines),
        paper_default=GammaPaperMargins(paper.median, paper.p90, paper.hardest,
                                   reference.gamma * reference.mean_hardest_companion),
        paper_margin_at_mean=target, margin_matched_gamma=target / mean_cosine if mean_cosine > 0 else None)


#: why the margin view's gamma can be far from the headline, in one sentence (`capgeo gamma` and the
#: report's gamma section print it beside the margin view)
MARGIN_VIEW_NOTE = ("The margin view is a second reading, not a second suggestion: it follows the encoder's "
                    "cosine level, which differs between encoders for the same captions, while the headline "
                    "(concentration view) depends only on how cosines differ within a batch row, so the "
                    "headline is the gamma to start from.")


def describe_margins(margins, gamma: float) -> str:
    """The margin view in one line: gamma * G at the median, p90 and hardest in-batch negative,
    the paper default's on its DOCCI geometry, and the margin-matched gamma. ``margins``: a gamma
    batch's ``margins`` (a :class:`GammaMargins`)."""
    mine, paper = margins.suggested, margins.paper_default
    matched = margins.margin_matched_gamma
    matched_text = (f"margin-matched gamma {matched:.2f} (its margin at this data's mean negative cosine equals the "
                    f"paper's {margins.paper_margin_at_mean:.2f})" if matched is not None
                    else "no margin-matched gamma (mean negative cosine is not positive)")
    return (f"margin view: gamma {gamma:.2f} asks the positive to beat its median / p90 / hardest in-batch negative "
            f"by {mine.median:.3f} / {mine.p90:.3f} / {mine.hardest:.3f} (paper default on DOCCI: "
            f"{paper.median:.3f} / {paper.p90:.3f} / {paper.hardest:.3f}); {matched_text}")


@lru_cache(maxsize=8)
def _reference_margin_cosines(reference: ReferenceGeometry) -> GammaMarginCosines:
    return margin_cosines(_reference_curve(reference))


def image_loss_diagnostics(text_vectors: np.ndarray, image_vectors: np.ndarray, group_codes: np.ndarray,
                           batches: np.ndarray, logit_scale: float, gammas, pool=None,
                           threads: int = 1) -> GammaImageLosses:
    """At initialisation: share of batches whose plain InfoNCE / boosted loss is below SOLVED_LOSS.

    ``pool`` (from cpu_pass.block_threads, of ``threads`` threads) runs batches side by side: each
    batch's losses are its own arithmetic, on one BLAS thread."""
    # each distinct gamma once (plain InfoNCE is gamma 0, which the grid holds too): a gamma's losses
    # are its own slice of the loss grid's arithmetic, whatever other gammas share the call
    wanted = [0.0, *(float(gamma) for gamma in gammas)]
    distinct = list(dict.fromkeys(gamma.hex() for gamma in wanted))   # (0.0 and -0.0 kept apart)
    computed = [float.fromhex(gamma) for gamma in distinct]
    losses = np.empty((len(batches), len(computed)))

    def run(indices):
        for b in indices:
            batch = batches[b]
            texts = text_vectors[batch].astype(np.float64)
            images = image_vectors[group_codes[batch]].astype(np.float64)
            similarity = images @ texts.T
            losses[b] = hnclip_loss_grid(similarity, boosted_caption_cosine(texts), logit_scale, computed)

    _side_by_side(run, list(range(len(batches))), pool, threads)
    losses = losses[:, [distinct.index(gamma.hex()) for gamma in wanted]]
    # (laid out as each batch's losses are read below: the plain ones together, the boosted ones a row a batch)
    plain, boosted = np.ascontiguousarray(losses[:, 0]), np.ascontiguousarray(losses[:, 1:])
    return GammaImageLosses(
        solved_loss=SOLVED_LOSS,
        plain=GammaLossShare(float((plain < SOLVED_LOSS).mean()), float(plain.mean())),
        boosted=tuple(GammaBoostedLoss(float(gamma), float((boosted[:, k] < SOLVED_LOSS).mean()),
                                  float(boosted[:, k].mean())) for k, gamma in enumerate(gammas)))


# ---------------------------------------------------------------- the rule

def suggest_for_rows(rows, logit_scale: float, reference: ReferenceGeometry = REFERENCE,
                     clip: tuple[float, float] = GAMMA_CLIP) -> GammaSuggestion:
    """Apply the rule to one batch size's in-batch rows (or their _ShareCurve). Depends on the
    logit scale only through s * gamma: the scaled gamma is solved for, then divided by s."""
    low, high = logit_scale * clip[0], logit_scale * clip[1]
    target = reference_share(reference.gamma, reference)
    curve = _curve(rows)   # three solves on the same rows
    scaled, clipped = solve_scaled_gamma(curve, target, low, high)
    ends, ends_clipped = [], []
    for reference_gamma in reference.range_gammas:
        end, end_clipped = solve_scaled_gamma(curve, reference_share(reference_gamma, reference), low, high)
        ends.append(end / logit_scale)
        ends_clipped.append(end_clipped is not None)
    gamma_exact = scaled / logit_scale
    note = None
    if clipped == "low":
        note = (f"even gamma = {clip[0]} concentrates the softmax more than the reference default does; "
                f"clipped to {clip[0]}")
    elif clipped == "high":
        note = (f"even gamma = {clip[1]} concentrates the softmax less than the reference default does "
                f"(caption cosines barely differ within a batch); clipped to {clip[1]}")
    if any(ends_clipped) and note is None:
        note = (f"the range reaches the clip interval {clip[0]}-{clip[1]}: "
                + ("both its ends are" if all(ends_clipped) else "its lower end is" if ends_clipped[0]
                   else "its upper end is") + " clipped")
    return section(GammaSuggestion, gamma=shown_gamma(gamma_exact), gamma_exact=gamma_exact, scaled_gamma=scaled,
                   range=(shown_gamma(ends[0]), shown_gamma(ends[1])), range_exact=tuple(ends), target_share=target,
                   clipped=clipped is not None, range_clipped=tuple(ends_clipped), clip_note=note)


def _reference_summary(reference: ReferenceGeometry) -> GammaReference:
    share = reference_share(reference.gamma, reference)
    return section(
        GammaReference, mean_pairwise=reference.mean_pairwise, mean_hardest_companion=reference.mean_hardest_companion,
        n_captions=reference.n_captions, share_at_least_0_8=reference.share_at_least_0_8, gamma=reference.gamma,
        logit_scale=reference.logit_scale, batch_size=reference.batch_size,
        range_gammas=tuple(reference.range_gammas), within_row_spread=reference_within_row_spread(reference),
        between_row_spread=reference_between_row_spread(reference), effective_share=share,
        effective_negatives=share * (reference.batch_size - 1),
        range_shares=tuple(reference_share(g, reference) for g in reference.range_gammas),
        synthetic_rows=reference.n_rows, seed=reference.seed)


def _why(suggestion: GammaSuggestion, batch_size: int, logit_scale: float, spread: float,
         reference: ReferenceGeometry) -> str:
    share = suggestion.target_share
    sigma_ref = reference_within_row_spread(reference)
    direction = "wider" if spread > sigma_ref else "tighter"
    opening = (f"At gamma={reference.gamma}, s={reference.logit_scale:g}, B={reference.batch_size} the paper's "
               f"DOCCI-like geometry spreads each row's softmax over {share:.0%} of its negatives (effective "
               f"{share * (reference.batch_size - 1):.0f} of {reference.batch_size - 1}); ")
    if suggestion.clipped:
        # the interval's end does not reach that concentration: say what it is, not that it matches
        return (f"{opening}no gamma in the suggested interval does the same at B={batch_size}, so gamma="
                f"{suggestion.gamma_exact:.3f} (s*gamma={suggestion.scaled_gamma:.1f}) is its nearest end: "
                f"{suggestion.clip_note}. Caption cosines spread {direction} within a batch row here "
                f"({spread:.3f} vs {sigma_ref:.3f}).")
    return (
        f"{opening}here gamma="
        f"{suggestion.gamma_exact:.3f} (s*gamma={suggestion.scaled_gamma:.1f}) does the same at B={batch_size}. "
        f"Caption cosines spread {direction} within a batch row here ({spread:.3f} vs {sigma_ref:.3f}), "
        f"so the same concentration needs a {'smaller' if direction == 'wider' else 'larger'} s*gamma."
    )


def _resolve_logit_scale(logit_scale, checkpoint_scale) -> tuple[float, str]:
    if logit_scale is not None:
        source = "--logit-scale"
        value = float(logit_scale)
    elif checkpoint_scale is not None:
        source = "checkpoint"
        value = float(checkpoint_scale)
    else:
        source = "default: the encoder has no logit scale; the paper's s"
        value = DEFAULT_LOGIT_SCALE
    if not (math.isfinite(value) and 0 < value <= MAX_LOGIT_SCALE):
        raise CapgeoError(f"logit scale must be a positive number up to {MAX_LOGIT_SCALE:,g}, got {value} (from {source})")
    return value, source


def _sortable_codes(codes: np.ndarray) -> np.ndarray:
    """Group codes in the order row c of ``image_vectors`` follows: numbers (floats too, as a column
    with a missing value becomes) and numerals ("10", "2") by value, other names as text ("1" and
    "01" stay two images, which int() would merge)."""
    if codes.dtype.kind in "iubf":
        return codes
    texts = codes.astype(str)
    if all(text.lstrip("-").isdigit() and str(int(text)) == text for text in texts.tolist()):
        return texts.astype(np.int64)
    return texts


def gamma_section(embeddings, group_codes, options: GammaOptions | None = None, *,
                  image_vectors: np.ndarray | None = None, image_source: str = "image embeddings",
                  progress: bool | None = None, **fields) -> Gamma:
    """The `gamma` section of a profile: suggestion, range and grid diagnostics per batch size.

    ``embeddings`` is an :class:`~capgeo.encoders.base.Embeddings` (its checkpoint logit scale
    is used unless ``options.logit_scale`` is given) or an (N, d) array of normalised caption vectors.
    ``options``: a :class:`GammaOptions`, its ``fields`` set by keyword (``batch_sizes=(64,)``).
    ``image_vectors``, when given, is (n_groups, d), row c for group code c. ``batch_sizes``
    follow the one policy (capgeo.geometry.batch_size): the first is the headline."""
    from capgeo.progress import progress_bar

    options = GammaOptions.of(options, **fields)
    logit_scale, batch_sizes, grid = options.logit_scale, options.batch_sizes, options.grid
    n_batches, seed, hard_edge, reference = options.n_batches, options.seed, options.hard_edge, options.reference

    checkpoint_scale, encoder = None, None
    if hasattr(embeddings, "vectors"):
        encoder = embeddings.info.to_dict() if hasattr(embeddings, "info") else None
        checkpoint_scale = getattr(getattr(embeddings, "info", None), "logit_scale", None)
        embeddings = embeddings.vectors
    vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
    # labels 0..G-1 in sorted order, whatever came in (row c of image_vectors is label c); group ids
    # that are not integers (image names) are coded the same way
    group_codes = _sortable_codes(np.asarray(group_codes))
    group_codes = np.unique(group_codes, return_inverse=True)[1].reshape(-1)
    if seed is not None and int(seed) < 0:  # numpy's generators take none (a ValueError from deep inside)
        raise CapgeoError(f"seed must be 0 or more, got {seed}")
    if vectors.ndim != 2 or len(vectors) != len(group_codes):
        raise CapgeoError(f"caption vectors {vectors.shape} do not match {len(group_codes)} group codes")
    norms = row_norms(vectors)   # in blocks: no temporary as large as the vectors
    if first_non_finite_row(vectors, norms) is not None:
        raise CapgeoError("caption vectors contain NaN or infinite values")
    if np.abs(norms - 1).max(initial=0) > UNIT_NORM_TOLERANCE:
        # cosines need unit vectors; Embeddings are normalised already, raw arrays may not be (the
        # same rule as the pairwise pass: a 1e-3 tolerance would use norms of 1.0009 as they are)
        if (norms == 0).any():
            raise CapgeoError(f"caption vector {int(np.flatnonzero(norms[:, 0] == 0)[0])} is all zeros")
        vectors = vectors / norms
    scale, scale_source = _resolve_logit_scale(logit_scale, checkpoint_scale)
    grid = [float(g) for g in grid]
    if not grid or any(not 0 <= g <= MAX_GAMMA for g in grid):  # (NaN fails the comparison too)
        raise CapgeoError(f"--grid needs one or more finite gamma values >= 0, at most {MAX_GAMMA:,g}, got {grid}")
    if n_batches < 1:
        raise CapgeoError(f"--n-batches must be at least 1, got {n_batches}")
    if not -1.0 <= hard_edge <= 1.0:  # (NaN fails this too)
        raise CapgeoError(f"--hard-edge: expected a cosine between -1 and 1, got {hard_edge}")
    n_groups = int(group_codes.max()) + 1 if group_codes.size else 0
    batch_sizes = resolve_batch_sizes(batch_sizes, n_groups).sizes
    for batch_size in batch_sizes:
        check_gamma_batch_size(batch_size, n_groups)
    if image_vectors is not None:
        image_vectors = check_image_vectors(image_vectors, n_groups, vectors.shape[1], image_source)

    from capgeo.geometry.batches import sample_batches
    from capgeo.geometry.cpu_pass import block_threads, default_threads

    per_batch_size = []
    threads = default_threads()
    # four steps a batch size (its rows, the suggestion, the grid, the image losses): one step would be
    # a bar that sat at 0/1 for most of the run
    with progress_bar("gamma diagnostics", 4 * len(batch_sizes), enabled=progress) as bar, \
            block_threads(threads) as pool:
        for batch_size in batch_sizes:
            batches = sample_batches(group_codes, batch_size, n_batches, seed)
            rows = in_batch_negative_rows(vectors, batches, pool=pool, threads=threads)
            bar.advance(1)
            curve = _ShareCurve(rows, pool, threads)   # sorted once, for the rule, the margins and the grid
            spread = float(curve.spreads.mean())
            suggestion = suggest_for_rows(curve, scale, reference)
            mean_cosine = float(rows.mean(dtype=np.float64))
            bar.advance(1)
            cosines = margin_cosines(curve)   # read by the grid and the margin view
            grid_rows = grid_diagnostics(curve, scale, grid, hard_edge, cosines=cosines)
            bar.advance(1)
            margins = margin_view(rows, mean_cosine, suggestion.gamma_exact, reference, cosines=cosines)
            image = (image_loss_diagnostics(vectors, image_vectors, group_codes, batches, scale, grid, pool=pool,
                                            threads=threads) if image_vectors is not None else None)
            per_batch_size.append(section(
                GammaBatch, batch_size=batch_size, negatives_per_row=batch_size - 1, n_batches=n_batches,
                n_rows=int(rows.shape[0]), mean_cosine=mean_cosine, within_row_spread=spread, suggestion=suggestion,
                margins=margins,
                # closed form if rows were normal: the effective share depends on s*gamma*sigma only
                gaussian_approximation=reference.gamma * reference.logit_scale / scale
                * reference_within_row_spread(reference) / spread if spread > 0 else None,
                why=_why(suggestion, batch_size, scale, spread, reference), grid=tuple(grid_rows),
                image=image))
            bar.advance(1)
    headline = per_batch_size[0]
    return section(
        Gamma,
        rule="effective-negative share matched to the paper's default (capgeo docs gamma)",
        concentration="exp(entropy) of each row's softmax of s*gamma*cosine over its B-1 in-batch negatives, "
                      "as a share of B-1, averaged over rows",
        headline_batch_size=batch_sizes[0], suggested_gamma=headline.suggestion.gamma,
        suggested_range=headline.suggestion.range, margin_matched_gamma=headline.margins.margin_matched_gamma,
        encoder_caution=encoder_caution(encoder),
        paper_sweep=tuple(PaperSweepPoint(g, r) for g, r in PAPER_SWEEP.items()),
        paper_sweep_note=PAPER_SWEEP_NOTE, logit_scale=scale, logit_scale_source=scale_source, hard_edge=hard_edge,
        gamma_grid=tuple(grid), n_batches=n_batches, seed=seed, clip=tuple(GAMMA_CLIP),
        image_embeddings=image_vectors is not None, reference=_reference_summary(reference),
        batches=tuple(per_batch_size))


# ---------------------------------------------------------------- image embeddings

def check_image_vectors(image_vectors: np.ndarray, n_groups: int, width: int, source: str = "image embeddings") -> np.ndarray:
    """Validate (n_groups, width) image vectors and L2-normalise them."""
    image_vectors = np.asarray(image_vectors, dtype=np.float32)
    if image_vectors.ndim != 2:
        raise CapgeoError(f"{source}: expected a 2-D array (one row per image), got shape {image_vectors.shape}")
    if image_vectors.shape[0] != n_groups:
        raise CapgeoError(f"{source}: {image_vectors.shape[0]} image vectors, but the dataset has {n_groups} groups "
                          f"(images); rows must follow the dataset's group order")
    if image_vectors.shape[1] != width:
        raise CapgeoError(f"{source}: image vectors have {image_vectors.shape[1]} dimensions but the text embeddings "
                          f"have {width}; use the text tower of the same CLIP model (--encoder)")
    if not np.isfinite(image_vectors).all():
        raise CapgeoError(f"{source}: contains NaN or infinite values")
    norms = np.linalg.norm(image_vectors, axis=1, keepdims=True)
    if (norms == 0).any():
        raise CapgeoError(f"{source}: row {int(np.flatnonzero(norms[:, 0] == 0)[0])} is all zeros")
    return image_vectors / norms


IMAGE_ID_NAMES = ("group_id", "group_ids", "image_id", "ids", "id")
IMAGE_VECTOR_NAMES = ("vectors", "embeddings", "embedding", "vector", "image_embeddings")


def load_image_embeddings(path, group_ids: list[str]) -> np.ndarray:
    """Image vectors aligned to ``group_ids`` (the dataset's groups in code order).

    ``.npy``: an (n_groups, d) array already in that order. ``.npz``: arrays named one of
    group_id/ids/... and vectors/embeddings/... . ``.parquet``: a group_id (or image_id/id)
    column and a list column of floats (vectors/embedding/...). Read with the precomputed
    encoder's reader, which checks the array and the ids."""
    from pathlib import Path

    from capgeo.encoders.precomputed import VectorNames, read_vector_file

    path = Path(path)
    if path.suffix.lower() not in (".npy", ".npz", ".parquet"):
        raise CapgeoError(f"{path}: image embeddings must be .npy (rows in group order), .npz or .parquet "
                          f"(with group ids)")
    ids, vectors = IMAGE_ID_NAMES, IMAGE_VECTOR_NAMES
    stored = read_vector_file(path, VectorNames(vectors, ids, vectors, ids))
    if path.suffix.lower() == ".npy":
        return stored.vectors
    if stored.ids is None:
        raise CapgeoError(f"{path}: expected group ids in an array or column named one of {IMAGE_ID_NAMES}")
    position = {group_id: row for row, group_id in enumerate(stored.ids)}  # unique: checked by the reader
    missing = [g for g in group_ids if g not in position]
    if missing:
        raise CapgeoError(f"{path}: no image vector for {len(missing)} of the dataset's {len(group_ids)} groups, "
                          f"e.g. {', '.join(repr(m) for m in missing[:3])}")
    return np.asarray(stored.vectors, dtype=np.float32)[[position[g] for g in group_ids]]


def checked_image_embeddings(path, captions) -> np.ndarray:
    """Before encoding: the image vectors of ``path``, read once and checked to hold one vector per
    image of ``captions`` (their width is checked against the text vectors once they exist)."""
    vectors = load_image_embeddings(path, captions.group_names)
    check_image_vectors(vectors, captions.n_groups, vectors.shape[-1] if vectors.ndim == 2 else 0, str(path))
    return vectors  # as read: gamma_section normalises them, as it does a path's


# ---------------------------------------------------------------- profile-shaped output

def gamma_profile(captions, embeddings, *, image_embeddings=None, image_source: str | None = None,
                  command: str | None = None, **options) -> Profile:
    """`capgeo gamma` in one call: a typed ``capgeo.profile/1`` Profile with ``dataset``,
    ``encoder``, ``gamma`` (see :func:`gamma_section`; ``options`` go there: a GammaOptions as
    ``options=``, or its fields), ``options`` and ``provenance``. ``image_embeddings`` is a path (see :func:`load_image_embeddings`)
    or an (n_groups, d) array in group-code order; ``image_source`` names where an array
    came from (the file it was read from)."""
    import time

    from capgeo.geometry.profile import SCHEMA, provenance, summarize_dataset, to_json_ready

    started = time.perf_counter()
    image_vectors, image_source = None, image_source or "image embeddings"
    if image_embeddings is not None:
        if isinstance(image_embeddings, np.ndarray):
            image_vectors = image_embeddings
        else:
            image_source = str(image_embeddings)
            image_vectors = load_image_embeddings(image_embeddings,
                                                  captions.group_names)
    progress = options.pop("progress", None)
    asked = GammaOptions.of(options.pop("options", None), **options)
    gamma = gamma_section(embeddings, captions.group_codes, asked, image_vectors=image_vectors,
                          image_source=image_source, progress=progress)
    options_json = {
        "batch_sizes": [entry.batch_size for entry in gamma.batches],
        "headline_batch_size": gamma.headline_batch_size,
        "n_batches": gamma.n_batches,
        "seed": gamma.seed,
        "gamma_grid": list(gamma.gamma_grid),
        "logit_scale": asked.logit_scale,
        "hard_edge": gamma.hard_edge,
        "image_embeddings": image_source if image_embeddings is not None else None,
    }
    return Profile(schema=SCHEMA, dataset=Dataset.from_dict(to_json_ready(summarize_dataset(captions))),
                   encoder=Encoder.from_dict(to_json_ready(embeddings.info.to_dict())), gamma=gamma,
                   options=Options.from_dict(to_json_ready(options_json)),
                   provenance=Provenance.from_dict(to_json_ready(provenance(command, started))),
                   order=("schema", "dataset", "encoder", "gamma", "options", "provenance"))
