"""A gamma measured on the user's own pairs: a short proxy fine-tune at every gamma of a grid.

The towers stay frozen; a light trainable part sits on their vectors: a residual linear adapter
``t -> normalise(t + t W)`` on the text side (W starts at zero, so training starts from the
towers' own retrieval), and optionally the same on the image side. Each (gamma, seed) run trains
it with HN-CLIP's loss (:mod:`capgeo.training.loss`: Gbar recomputed each step from the current,
adapted text features, detached, zero diagonal) for the same steps on the same batches; only gamma
differs. Each seed draws its own split of the images into training and validation (by image: no
image on both sides) and its own batch order; every gamma of that seed uses them. R@1 and R@5 are
measured in both directions on the held-out images.

Two kinds of pairs:

* ``image-text``: image vectors (one per group, from the image tower of the same CLIP) and the
  captions; retrieval image -> captions (a hit: any caption of the image) and caption -> images.
* ``caption-caption proxy``: without images, for datasets with several captions per image. Each
  image's first caption stands in for the image (the query), its other captions are the targets.
  It measures how gamma shapes retrieval among captions, not image-text retrieval, and is labelled
  so wherever it is shown.

The comparison between gammas is paired: on one seed every gamma sees the same split and batches,
so the spread that decides (plateau, gain over gamma 0) is the standard deviation over seeds of the
per-seed difference. docs/gamma.md says what such a proxy can and cannot tell about a full fine-tune.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from capgeo.defaults import SWEEP_GAMMAS, SWEEP_LEARNING_RATE, SWEEP_SEEDS, SWEEP_STEPS
from capgeo.errors import CapgeoError
from capgeo.findings.result import Result

#: share of the eligible images held out for validation, and the most held out (retrieval among
#: more candidates is harder; a cap keeps the evaluation's cost and meaning independent of N)
DEFAULT_VALIDATION_SHARE = 0.2
MAX_VALIDATION_IMAGES = 1000
#: a batch whose loss is below this has stopped teaching (the paper's saturation measure)
SATURATED_LOSS = 1e-3
IMAGE_TEXT = "image-text"
CAPTION_PROXY = "caption-caption proxy"
#: how each mode names its two retrieval directions (JSON keys stay forward/backward)
DIRECTIONS = {IMAGE_TEXT: ("image -> text", "text -> image"),
              CAPTION_PROXY: ("anchor caption -> caption", "caption -> anchor caption")}
METRICS = ("r1_forward", "r5_forward", "r1_backward", "r5_backward", "mean_r1")


@dataclass(frozen=True)
class SweepOptions:
    """What the sweep runs: its fields' defaults are the only defaults of the `--sweep-*` options."""

    gammas: tuple[float, ...] = SWEEP_GAMMAS
    seeds: tuple[int, ...] = SWEEP_SEEDS
    steps: int = SWEEP_STEPS
    #: None: the gamma section's headline batch size (capped by the training images)
    batch_size: int | None = None
    learning_rate: float = SWEEP_LEARNING_RATE
    validation_share: float = DEFAULT_VALIDATION_SHARE
    max_validation_images: int = MAX_VALIDATION_IMAGES
    #: also adapt the image (query) side
    image_adapter: bool = False

    def checked(self) -> "SweepOptions":
        if not self.gammas or any(not (math.isfinite(g) and g >= 0) for g in self.gammas):
            raise CapgeoError(f"sweep gammas must be one or more finite values >= 0, got {list(self.gammas)}")
        if len(self.seeds) < 1 or any(int(s) < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise CapgeoError(f"sweep seeds must be distinct whole numbers >= 0, got {list(self.seeds)}")
        if self.steps < 1:
            raise CapgeoError(f"sweep steps must be at least 1, got {self.steps}")
        if self.batch_size is not None and self.batch_size < 2:
            raise CapgeoError(f"sweep batch size must be at least 2, got {self.batch_size}")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise CapgeoError(f"sweep learning rate must be a positive number, got {self.learning_rate}")
        if not 0 < self.validation_share < 1:
            raise CapgeoError(f"validation share must lie between 0 and 1, got {self.validation_share}")
        return self


@dataclass(frozen=True)
class RuleSetting:
    """What the rule's gamma section sets beside the sweep: its suggestion (one of the gammas run, when
    given), its logit scale, and its headline batch size (the sweep's unless SweepOptions.batch_size)."""

    rule_gamma: float | None = None
    logit_scale: float = 100.0
    default_batch_size: int = 128


@dataclass(frozen=True)
class Retrieval:
    """R@1 and R@5 in both directions (percent), and their mean R@1, of one evaluation."""

    r1_forward: float
    r5_forward: float
    r1_backward: float
    r5_backward: float

    @property
    def mean_r1(self) -> float:
        return 0.5 * (self.r1_forward + self.r1_backward)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in METRICS}


@dataclass(frozen=True)
class SweepPoint(Result):
    """One gamma of the sweep: each metric's mean and spread (standard deviation) over seeds, the
    per-seed values, and the paired difference of mean R@1 to gamma 0 (mean and spread)."""

    gamma: float
    #: the rule's suggestion (run beside the sweep's gammas)
    from_rule: bool
    mean: Mapping[str, float]
    spread: Mapping[str, float]
    per_seed: tuple[Retrieval, ...]
    gain_over_zero: float | None
    gain_over_zero_spread: float | None
    final_loss: float


@dataclass(frozen=True)
class Saturation(Result):
    """Along the proxy run of one gamma, per step, over seeds: the share of batches whose loss is
    below :data:`SATURATED_LOSS`, and the mean share of the batch's negative logits whose fp32
    gradient is exactly zero."""

    gamma: float
    loss_below: tuple[float, ...]
    zero_gradients: tuple[float, ...]



@dataclass(frozen=True)
class GammaSweep:
    """The measured curve of a sweep (:func:`gamma_sweep`), JSON by :meth:`to_dict`."""

    mode: str
    directions: tuple[str, str]
    gammas: tuple[float, ...]
    seeds: tuple[int, ...]
    steps: int
    batch_size: int
    learning_rate: float
    logit_scale: float
    image_adapter: bool
    n_pairs: int
    n_train_images: int
    n_validation_images: int
    images_left_out: int
    before: dict
    points: tuple[SweepPoint, ...]
    best_gamma: float
    #: the seed spread of a difference between two gammas (:func:`paired_spread`), in R@1 points
    spread: float
    plateau: tuple[float, ...]
    beats_zero: bool | None
    rule_gamma: float | None
    rule_position: str | None
    saturation: tuple[Saturation, ...]
    device: str
    seconds: float
    notes: tuple[str, ...] = field(default=())

    def point(self, gamma: float) -> SweepPoint:
        return next(p for p in self.points if p.gamma == gamma)

    def to_dict(self) -> dict:
        return {
            "mode": self.mode, "directions": list(self.directions), "measured_gamma": self.best_gamma,
            "spread": self.spread, "plateau": list(self.plateau), "beats_zero": self.beats_zero, "rule_gamma": self.rule_gamma,
            "rule_position": self.rule_position, "gammas": list(self.gammas), "seeds": list(self.seeds),
            "steps": self.steps, "batch_size": self.batch_size, "learning_rate": self.learning_rate,
            "logit_scale": self.logit_scale, "image_adapter": self.image_adapter, "n_pairs": self.n_pairs,
            "n_train_images": self.n_train_images, "n_validation_images": self.n_validation_images,
            "images_left_out": self.images_left_out, "before": dict(self.before),
            "points": [p.to_dict() for p in self.points], "saturated_loss": SATURATED_LOSS,
            "saturation": [s.to_dict() for s in self.saturation], "device": self.device, "seconds": self.seconds,
            "notes": list(self.notes),
            "metric": "mean R@1 of both directions on held-out images (percent); spread: the seed spread of the "
                      "difference between two gammas (every gamma of a seed shares its split and batches); plateau: "
                      "the gammas within the spread of the best",
        }


# ---------------------------------------------------------------- the pairs

@dataclass(frozen=True)
class SweepPairs:
    """Queries (one per image) and targets (captions) with the image each belongs to."""

    mode: str
    queries: np.ndarray          # (n_images, d) float32, unit rows
    targets: np.ndarray          # (n_targets, d) float32, unit rows
    target_image: np.ndarray     # (n_targets,) int64: row of queries
    images_left_out: int = 0

    @property
    def n_images(self) -> int:
        return len(self.queries)


def _unit(vectors: np.ndarray, what: str) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.isfinite(vectors).all() or (norms == 0).any():
        raise CapgeoError(f"{what}: NaN, infinite or all-zero vectors")
    return vectors / norms


def sweep_pairs(text_vectors, group_codes, image_vectors=None) -> SweepPairs:
    """The sweep's pairs: with ``image_vectors`` ((n_groups, d), row g for group code g, or a
    capgeo.images.ImageVectors, whose missing images are left out), image -> its captions; without, the caption-caption proxy over the images with at least two captions
    (first caption the query, the others its targets)."""
    text = _unit(text_vectors, "caption vectors")
    codes = np.unique(np.asarray(group_codes), return_inverse=True)[1].reshape(-1)
    if len(codes) != len(text):
        raise CapgeoError(f"{len(text)} caption vectors but {len(codes)} group codes")
    n_groups = int(codes.max()) + 1 if codes.size else 0
    if image_vectors is not None:
        # capgeo.images.ImageVectors: the images that are missing (zero rows) leave with their captions
        present = np.asarray(getattr(image_vectors, "present", np.ones(n_groups, dtype=bool)), dtype=bool)
        images = np.asarray(getattr(image_vectors, "vectors", image_vectors), dtype=np.float32)
        if images.shape != (n_groups, text.shape[1]) or present.shape != (n_groups,):
            raise CapgeoError(f"image vectors {images.shape}: expected one row per image ({n_groups}) of the "
                              f"captions' width ({text.shape[1]})")
        new_code = np.cumsum(present) - 1
        kept = present[codes]
        return SweepPairs(IMAGE_TEXT, _unit(images[present], "image vectors"), text[kept],
                          new_code[codes[kept]].astype(np.int64), images_left_out=int((~present).sum()))
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(n_groups))
    sizes = np.bincount(codes, minlength=n_groups)
    kept = np.flatnonzero(sizes >= 2)
    if len(kept) < 4:
        raise CapgeoError("the caption-caption proxy needs images with at least two captions (one query, one target); "
                          f"this dataset has {len(kept)}. Give image vectors (--image-embeddings) instead")
    anchors = order[starts[kept]]
    is_anchor = np.zeros(len(text), dtype=bool)
    is_anchor[anchors] = True
    new_code = np.full(n_groups, -1, dtype=np.int64)
    new_code[kept] = np.arange(len(kept))
    targets = np.flatnonzero(~is_anchor & (new_code[codes] >= 0))
    return SweepPairs(CAPTION_PROXY, text[anchors], text[targets], new_code[codes[targets]],
                      images_left_out=int(n_groups - len(kept)))


# ---------------------------------------------------------------- retrieval

def recall_at(similarity, query_hit, ks=(1, 5)) -> tuple[float, ...]:
    """Per k of ``ks``, in their order, the percent of rows whose best hit ranks within the top k: a hit at rank r when r
    non-hits score strictly higher than the row's best hit (``query_hit``: bool matrix of hits)."""
    import torch

    similarity = torch.as_tensor(similarity)
    hit = torch.as_tensor(query_hit, device=similarity.device)
    best = torch.where(hit, similarity, torch.full_like(similarity, -math.inf)).amax(dim=1, keepdim=True)
    above = ((similarity > best) & ~hit).sum(dim=1)
    return tuple(float((above < k).double().mean().item() * 100) for k in ks)


def evaluate(queries, targets, target_image) -> Retrieval:
    """R@1 and R@5 of held-out ``queries`` (one per image) against ``targets`` (``target_image``:
    each target's query row), both directions."""
    import torch

    similarity = queries @ targets.T
    hit = torch.as_tensor(target_image, device=similarity.device)[None, :] == torch.arange(
        len(queries), device=similarity.device)[:, None]
    forward = recall_at(similarity, hit)
    backward = recall_at(similarity.T, hit.T)
    return Retrieval(forward[0], forward[1], backward[0], backward[1])


# ---------------------------------------------------------------- one seed's plan

@dataclass(frozen=True)
class _SeedPlan:
    train_images: np.ndarray      # (n_train,) query rows
    validation_images: np.ndarray
    batches: np.ndarray           # (steps, B) query rows
    batch_targets: np.ndarray     # (steps, B) target rows


def _seed_plan(pairs: SweepPairs, options: SweepOptions, batch_size: int, seed: int) -> _SeedPlan:
    """The split (by image) and every step's batch of one seed: B distinct training images, one
    random target each, the images in a fresh shuffled order each epoch."""
    rng = np.random.default_rng([seed, 49])
    n_validation = _validation_count(pairs.n_images, options)
    permutation = rng.permutation(pairs.n_images)
    validation, train = np.sort(permutation[:n_validation]), permutation[n_validation:]
    order = np.argsort(pairs.target_image, kind="stable")
    starts = np.searchsorted(pairs.target_image[order], np.arange(pairs.n_images))
    sizes = np.bincount(pairs.target_image, minlength=pairs.n_images)
    per_epoch = len(train) // batch_size
    batches = np.empty((options.steps, batch_size), dtype=np.int64)
    epoch_order = rng.permutation(train)
    for step in range(options.steps):
        slot = step % per_epoch
        if slot == 0 and step:
            epoch_order = rng.permutation(train)
        batches[step] = epoch_order[slot * batch_size:(slot + 1) * batch_size]
    picks = (rng.random(batches.shape) * sizes[batches]).astype(np.int64)
    return _SeedPlan(train, validation, batches, order[starts[batches] + picks])


def _validation_count(n_images: int, options: SweepOptions) -> int:
    return max(2, min(options.max_validation_images, int(round(n_images * options.validation_share))))


# ---------------------------------------------------------------- one run

class ResidualAdapter:
    """``x -> normalise(x + x W)``, W (d, d) starting at zero: the towers' own vectors at step 0."""

    def __init__(self, width: int, device):
        import torch

        self.weight = torch.zeros(width, width, device=device, requires_grad=True)

    def __call__(self, vectors):
        from torch.nn import functional as F

        return F.normalize(vectors + vectors @ self.weight, dim=-1)


@dataclass
class _RunTrace:
    losses: np.ndarray
    zero_gradients: np.ndarray
    retrieval: Retrieval


def _train_one(queries, targets, target_image, plan: _SeedPlan, gamma: float, options: SweepOptions,
               logit_scale: float, bar=None) -> _RunTrace:
    """Train fresh adapters with HN-CLIP at ``gamma`` on ``plan``'s batches and evaluate them."""
    import torch

    from capgeo.training.loss import hnclip_logits, symmetric_cross_entropy

    device, width = queries.device, queries.shape[1]
    text_adapter = ResidualAdapter(width, device)
    image_adapter = ResidualAdapter(width, device) if options.image_adapter else None
    parameters = [text_adapter.weight] + ([image_adapter.weight] if image_adapter else [])
    optimizer = torch.optim.Adam(parameters, lr=options.learning_rate)
    batches = torch.as_tensor(plan.batches, device=device)
    batch_targets = torch.as_tensor(plan.batch_targets, device=device)
    n = batches.shape[1]
    negatives = ~torch.eye(n, dtype=torch.bool, device=device)
    # kept on the device, read once at the end: a read per step would wait for a GPU every step
    losses = torch.empty(options.steps, dtype=torch.float64, device=device)
    zeros = torch.empty(options.steps, dtype=torch.float64, device=device)
    for step in range(options.steps):
        image = queries[batches[step]]
        image = image_adapter(image) if image_adapter else image
        text = text_adapter(targets[batch_targets[step]])
        logits = hnclip_logits(image, text, gamma, logit_scale)
        logits.retain_grad()
        loss = symmetric_cross_entropy(logits)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
        zeros[step] = (logits.grad[negatives] == 0).double().mean()
        if bar is not None:
            bar.advance(1)
    with torch.no_grad():
        held_out = torch.as_tensor(plan.validation_images, device=device)
        target_rows = torch.as_tensor(np.flatnonzero(np.isin(target_image, plan.validation_images)), device=device)
        position = torch.full((len(queries),), -1, dtype=torch.long, device=device)
        position[held_out] = torch.arange(len(held_out), device=device)
        image = queries[held_out]
        image = image_adapter(image) if image_adapter else image
        text = text_adapter(targets[target_rows])
        retrieval = evaluate(image, text, position[torch.as_tensor(target_image, device=device)[target_rows]].cpu())
    return _RunTrace(losses.cpu().numpy(), zeros.cpu().numpy(), retrieval)


def evaluate_before(pairs: SweepPairs, validation_images: np.ndarray) -> Retrieval:
    """Retrieval of the towers' own vectors on the held-out images (what every run starts from)."""
    import torch

    held = np.isin(pairs.target_image, validation_images)
    position = np.full(pairs.n_images, -1, dtype=np.int64)
    position[validation_images] = np.arange(len(validation_images))
    return evaluate(torch.as_tensor(pairs.queries[validation_images]), torch.as_tensor(pairs.targets[held]),
                    position[pairs.target_image[held]])


# ---------------------------------------------------------------- the sweep

def _stats(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def gamma_sweep(text_vectors, group_codes, *, image_vectors=None, options: SweepOptions | None = None,
                setting: RuleSetting | None = None, device: str | None = None, progress: bool | None = None,
                **fields) -> GammaSweep:
    """Run the sweep (module docstring): ``options.gammas`` plus ``setting.rule_gamma`` (the rule's
    suggestion, when given), each for every seed, and return the measured curve. ``setting``: a
    :class:`RuleSetting`, its ``fields`` set by keyword (``rule_gamma=0.3, logit_scale=30``)."""
    import torch

    from capgeo.device import check_device, default_device
    from capgeo.progress import labelled, pass_label, progress_bar

    options = (options or SweepOptions()).checked()
    setting = replace(setting or RuleSetting(), **fields)
    rule_gamma, logit_scale, default_batch_size = setting.rule_gamma, setting.logit_scale, setting.default_batch_size
    started = time.perf_counter()
    check_device(device)
    device = device or default_device()
    pairs = sweep_pairs(text_vectors, group_codes, image_vectors)
    gammas = sorted(set(float(g) for g in options.gammas) | ({float(rule_gamma)} if rule_gamma is not None else set()))
    if 0.0 not in gammas:
        gammas = [0.0] + gammas   # the baseline every gain is measured against
    n_validation = _validation_count(pairs.n_images, options)
    n_train = pairs.n_images - n_validation
    if n_train < 2:
        raise CapgeoError(f"the sweep needs at least 2 training images, has {n_train} after holding out {n_validation}")
    batch_size = options.batch_size or default_batch_size
    notes = []
    if batch_size > n_train:
        notes.append(f"batch size {batch_size} is more than the {n_train} training images: using {n_train}")
        batch_size = n_train
    plans = {seed: _seed_plan(pairs, options, batch_size, seed) for seed in options.seeds}
    queries = torch.as_tensor(pairs.queries, device=device)
    targets = torch.as_tensor(pairs.targets, device=device)
    traces: dict[tuple[float, int], _RunTrace] = {}
    runs = [(g, s) for g in gammas for s in options.seeds]
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        # a step's matrices are small: a second thread's synchronisation costs more than it gives
        # (50 steps on 2 shared cores: 2.1 s on one thread, 7.0 s on two)
        torch.set_num_threads(1)
    # fp32 on a GPU too: TF32 products would move the exactly-zero gradient shares the saturation curve counts
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        for index, (gamma, seed) in enumerate(runs, 1):
            with labelled(pass_label(f"gamma {gamma:g}, seed {seed}", index, len(runs))), \
                    progress_bar("proxy fine-tune steps", options.steps, enabled=progress) as bar:
                traces[gamma, seed] = _train_one(queries, targets, pairs.target_image, plans[seed], gamma, options,
                                                 logit_scale, bar)
    finally:
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    before = [evaluate_before(pairs, plans[seed].validation_images) for seed in options.seeds]
    mean_r1 = {g: np.array([traces[g, s].retrieval.mean_r1 for s in options.seeds]) for g in gammas}
    points = []
    for gamma in gammas:
        per_seed = tuple(traces[gamma, s].retrieval for s in options.seeds)
        stats = {name: _stats([getattr(r, name) for r in per_seed]) for name in METRICS}
        gain = _stats(mean_r1[gamma] - mean_r1[0.0]) if gamma != 0 else (None, None)
        points.append(SweepPoint(gamma=gamma, from_rule=rule_gamma is not None and gamma == float(rule_gamma),
                                 mean={k: v[0] for k, v in stats.items()}, spread={k: v[1] for k, v in stats.items()},
                                 per_seed=per_seed, gain_over_zero=gain[0], gain_over_zero_spread=gain[1],
                                 final_loss=float(np.mean([traces[gamma, s].losses[-1] for s in options.seeds]))))
    best = max(gammas, key=lambda g: (mean_r1[g].mean(), -g))
    spread = paired_spread(np.array([mean_r1[g] for g in gammas]))
    plateau = tuple(g for g in gammas if mean_r1[best].mean() - mean_r1[g].mean() <= spread)
    beats_zero = None if len(options.seeds) < 2 else bool(mean_r1[best].mean() - mean_r1[0.0].mean() > spread)
    saturation = tuple(
        Saturation(g, tuple(float(x) for x in np.mean([traces[g, s].losses < SATURATED_LOSS for s in options.seeds],
                                                      axis=0)),
                   tuple(float(x) for x in np.mean([traces[g, s].zero_gradients for s in options.seeds], axis=0)))
        for g in dict.fromkeys([0.0, best]))
    return GammaSweep(
        mode=pairs.mode, directions=DIRECTIONS[pairs.mode], gammas=tuple(gammas), seeds=tuple(options.seeds),
        steps=options.steps, batch_size=batch_size, learning_rate=options.learning_rate, logit_scale=logit_scale,
        image_adapter=options.image_adapter, n_pairs=len(pairs.targets), n_train_images=n_train,
        n_validation_images=n_validation, images_left_out=pairs.images_left_out,
        before={name: _stats([getattr(r, name) for r in before])[0] for name in METRICS},
        points=tuple(points), best_gamma=best, spread=spread, plateau=plateau, beats_zero=beats_zero,
        rule_gamma=None if rule_gamma is None else float(rule_gamma),
        rule_position=_rule_position(rule_gamma, plateau, best), saturation=saturation, device=str(device),
        seconds=time.perf_counter() - started, notes=tuple(notes))


def paired_spread(values: np.ndarray) -> float:
    """The seed spread of the difference between two gammas: ``values`` (gammas, seeds) of mean R@1.

    Each seed shifts every gamma alike (its split, its batches), so the seed's mean is taken out, and
    each gamma's mean over seeds too; what is left is one run's noise, its standard deviation the
    residual of this two-way layout, sqrt(sum r^2 / ((G - 1)(S - 1))). A difference of two runs has
    sqrt(2) times that. 0 with one gamma or one seed."""
    values = np.asarray(values, dtype=np.float64)
    n_gammas, n_seeds = values.shape
    if n_gammas < 2 or n_seeds < 2:
        return 0.0
    residual = values - values.mean(axis=0) - values.mean(axis=1, keepdims=True) + values.mean()
    return float(math.sqrt(2 * (residual ** 2).sum() / ((n_gammas - 1) * (n_seeds - 1))))


def _rule_position(rule_gamma, plateau, best) -> str | None:
    if rule_gamma is None:
        return None
    rule_gamma = float(rule_gamma)
    if rule_gamma in plateau:
        return "on the measured plateau" + (" (the best gamma)" if rule_gamma == best else "")
    low, high = min(plateau), max(plateau)
    if rule_gamma < low:
        return f"below the measured plateau ({low:g}-{high:g})"
    if rule_gamma > high:
        return f"above the measured plateau ({low:g}-{high:g})"
    return f"inside the plateau's span ({low:g}-{high:g}) but below the best by more than the spread"


# ---------------------------------------------------------------- on the terminal

def _checkpoints(steps: int) -> list[int]:
    """Step indices shown of a saturation curve: the first, each quarter and the last."""
    return sorted({0, *(round(steps * q) - 1 for q in (0.25, 0.5, 0.75)), steps - 1} - {-1})


def measured_headline(sweep) -> str:
    """The measured gamma as a first screen gives it: "1 measured (plateau 0.25-1; caption-caption
    proxy, 3 seeds) at B=128"."""
    plateau = sweep["plateau"]
    label = "caption-caption proxy" if sweep["mode"] == CAPTION_PROXY else "image-text proxy fine-tune"
    return (f"{sweep['measured_gamma']:g} measured (plateau {min(plateau):g}-{max(plateau):g}; {label}, "
            f"{len(sweep['seeds'])} seeds) at B={sweep['batch_size']}")


def beats_zero_text(sweep) -> str:
    """Whether gamma > 0 beat gamma 0 beyond the seed spread, in words: "yes, +1.20 points"."""
    best = next(p for p in sweep["points"] if p["gamma"] == sweep["measured_gamma"])
    if sweep["beats_zero"] is None:
        return "one seed, no spread to judge by"
    if sweep["measured_gamma"] == 0:
        return "no, gamma 0 is the best measured"
    return f"{'yes' if sweep['beats_zero'] else 'no'}, {best['gain_over_zero']:+.2f} points"


def describe_sweep(sweep) -> list[str]:
    """The sweep's result as short terminal lines (``sweep``: :meth:`GammaSweep.to_dict`'s mapping);
    lines starting with a space are details under the one before."""
    forward, backward = sweep["directions"]
    proxy = sweep["mode"] == CAPTION_PROXY
    label = "caption-caption proxy, not image-text retrieval" if proxy else "image-text"
    lines = [f"Measured gamma {sweep['measured_gamma']:g} ({label}; mean R@1 of {forward} and {backward} "
             f"on held-out images)",
             f" proxy fine-tune: residual linear adapter on the frozen "
             f"{'caption vectors' if proxy else 'text vectors' + (' and image vectors' if sweep['image_adapter'] else '')}"
             f", {sweep['steps']} steps of B {sweep['batch_size']}, s {sweep['logit_scale']:g}, "
             f"{len(sweep['seeds'])} seeds; {sweep['n_train_images']:,} training / {sweep['n_validation_images']:,} "
             f"held-out images (split by image)",
             f" {'gamma':>7} {'R@1 mean':>8} {'+-':>5} {'vs 0':>7} {'R@1 fwd':>7} {'R@5 fwd':>7} "
             f"{'R@1 back':>8} {'R@5 back':>8}"]
    before = sweep["before"]
    lines.append(f" {'before':>7} {before['mean_r1']:8.2f} {'':>5} {'':>7} {before['r1_forward']:7.2f} "
                 f"{before['r5_forward']:7.2f} {before['r1_backward']:8.2f} {before['r5_backward']:8.2f}")
    for point in sweep["points"]:
        mean, spread = point["mean"], point["spread"]
        gain = "" if point["gain_over_zero"] is None else f"{point['gain_over_zero']:+.2f}"
        mark = "*" if point["gamma"] == sweep["measured_gamma"] else "r" if point["from_rule"] else " "
        lines.append(f" {point['gamma']:>6g}{mark}{mean['mean_r1']:9.2f} {spread['mean_r1']:5.2f} "
                     f"{gain:>7} {mean['r1_forward']:7.2f} {mean['r5_forward']:7.2f} {mean['r1_backward']:8.2f} "
                     f"{mean['r5_backward']:8.2f}")
    lines.append(" (* the best, r the rule's suggestion; +-: standard deviation over seeds; vs 0: mean gain over "
                 "gamma 0 on the same seeds)")
    plateau = sweep["plateau"]
    lines.append(f" plateau (gammas within {sweep['spread']:.2f} points, the seed spread of a difference, of the "
                 f"best): {', '.join(f'{g:g}' for g in plateau)}; gamma > 0 beats gamma 0 beyond the spread: "
                 f"{beats_zero_text(sweep)}")
    if sweep["rule_gamma"] is not None:
        lines.append(f" the rule's suggestion {sweep['rule_gamma']:g} is {sweep['rule_position']}")
    steps = _checkpoints(sweep["steps"])
    shown = ", ".join(str(s + 1) for s in steps)
    lines.append(f" saturation at steps {shown}: share of batches with loss < {sweep['saturated_loss']:g} / of "
                 "negative logits with an exactly zero fp32 gradient")
    for curve in sweep["saturation"]:
        cells = " ".join(f"{curve['loss_below'][s]:.0%}/{curve['zero_gradients'][s]:.1%}" for s in steps)
        lines.append(f"   gamma {curve['gamma']:g}: {cells}")
    for note in sweep["notes"]:
        lines.append(f" note: {note}")
    return lines
