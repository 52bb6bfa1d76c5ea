"""An epoch of training batches with no false negative inside a batch, planned in numpy.

HN-CLIP (and CLIP) treat every other caption of a batch as a negative. Two captions of one
image, two exact copies of a text, or two near-duplicate captions (cosine >= a threshold) in
one batch are false negatives: the loss pushes apart what describes the same scene. The planner
keeps them in different batches.

The plan of an epoch (:func:`plan_epoch`), for ``n`` captions and batch size ``B``:

1. A seeded random order, cut into ``n // B`` batches of ``B`` (a plain shuffle with
   ``drop_last``: contrastive training keeps the batch, and so the negatives per caption, fixed).
   The ``n % B`` captions past the last full batch wait, as every caption that conflicts with one
   already in its batch does (the first of the two stays).
2. Each waiting caption goes to the first batch with room where it conflicts with no member.
3. Repair, for each batch still short: a waiting caption ``i`` takes the place of a member ``x``
   of another batch where ``i`` conflicts with nothing but ``x`` (or with nothing), and ``x``
   moves into the short batch, when ``x`` fits there.

Captions still waiting are *not placed*: left out of this epoch (the next epoch's order differs,
so the ``n % B`` left over by the cut are others each time). Batches stay short only when no
waiting caption can fill them: a dataset where one image has more captions than there are
batches cannot place them all. A batch is *rearranged* when its captions differ from the plain
shuffle's batch of the same seed. ``shuffle_conflicts`` counts the pairs of each kind that the
plain shuffle would have put in one batch: what the plan avoids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capgeo.errors import CapgeoError

#: the kinds of conflict, each pair counted under the first that applies
KINDS = ("same_image", "exact_copy", "near_duplicate")
#: waiting captions tried per short batch during repair, and batches tried per waiting caption
REPAIR_CAPTIONS = 32
REPAIR_BATCHES = 64
#: members of a conflict-free batch tried as the one that moves out
REPAIR_MEMBERS = 8
#: short batches a waiting caption may fail to reach before repair gives it up
REPAIR_FAILURES = 4


@dataclass(frozen=True)
class Conflicts:
    """What must not share a batch: one integer per caption for its image (``group_codes``) and for
    its normalised text (``text_codes``, equal for exact copies), and near-duplicate pairs
    (``near_a[k]``, ``near_b[k]``, cosine >= ``threshold``; any order, any kind)."""

    group_codes: np.ndarray
    text_codes: np.ndarray
    near_a: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    near_b: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    threshold: float | None = None

    def __post_init__(self):
        n = len(self.group_codes)
        for name in ("group_codes", "text_codes", "near_a", "near_b"):
            value = np.asarray(getattr(self, name), dtype=np.int64).reshape(-1)
            object.__setattr__(self, name, value)
        if len(self.text_codes) != n:
            raise CapgeoError(f"text codes: {len(self.text_codes)} for {n} captions; expected one per caption")
        if len(self.near_a) != len(self.near_b):
            raise CapgeoError("near-duplicate pairs: as many first as second indices expected")
        if len(self.near_a) and (min(self.near_a.min(), self.near_b.min()) < 0
                                 or max(self.near_a.max(), self.near_b.max()) >= n):
            raise CapgeoError(f"near-duplicate pairs: caption indices must lie in 0..{n - 1}")

    @property
    def n(self) -> int:
        return len(self.group_codes)

    def neighbours(self) -> dict[int, list[int]]:
        """Each caption's near-duplicates (only captions that have some)."""
        found: dict[int, list[int]] = {}
        for a, b in zip(self.near_a.tolist(), self.near_b.tolist()):
            if a != b:
                found.setdefault(a, []).append(b)
                found.setdefault(b, []).append(a)
        return found

    def pair_counts(self) -> dict[str, int]:
        """Pairs of captions of each kind in the whole dataset, each pair under its first kind."""
        return _pairs_by_kind(self, np.zeros(self.n, np.int64))


@dataclass(frozen=True)
class EpochPlan:
    """One epoch's batches (caption indices, at most ``batch_size`` each, in the order to train),
    the captions not placed, and what the plan changed."""

    epoch: int
    seed: int
    batch_size: int
    batches: tuple[np.ndarray, ...]
    not_placed: np.ndarray
    n_rearranged: int
    shuffle_conflicts: dict[str, int]

    @property
    def n_placed(self) -> int:
        return int(sum(len(batch) for batch in self.batches))

    @property
    def n_short(self) -> int:
        return sum(len(batch) < self.batch_size for batch in self.batches)

    def summary(self) -> dict:
        n = self.n_placed + len(self.not_placed)
        return {"epoch": self.epoch, "seed": self.seed, "n_batches": len(self.batches), "n_placed": self.n_placed,
                "n_not_placed": int(len(self.not_placed)),
                "share_not_placed": len(self.not_placed) / n if n else 0.0,
                "n_rearranged_batches": self.n_rearranged, "n_short_batches": self.n_short,
                "shuffle_conflicts": dict(self.shuffle_conflicts)}


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of an epoch's order: ``seed + epoch``, as torch's DistributedSampler."""
    return int(seed) + int(epoch)


def check_batch_size(batch_size: int, n: int) -> None:
    if int(batch_size) != batch_size or batch_size < 2:
        raise CapgeoError(f"batch size: expected a whole number of at least 2, got {batch_size}")
    if batch_size > n:
        raise CapgeoError(f"batch size: {batch_size} is more than the {n} captions; expected at most {n}")


def check_seed(seed: int) -> None:
    # numpy's generators take no negative seed (a ValueError from deep inside)
    if int(seed) != seed or seed < 0:
        raise CapgeoError(f"seed: expected a whole number >= 0, got {seed}")


def check_epochs(epochs: int) -> None:
    if int(epochs) != epochs or epochs < 1:
        raise CapgeoError(f"epochs: expected a whole number of at least 1, got {epochs}")


class _Batches:
    """The batches being filled, and where each caption is: the planner's state."""

    def __init__(self, conflicts: Conflicts, n_batches: int, batch_size: int):
        self.size = batch_size
        self.groups = conflicts.group_codes.tolist()
        self.texts = conflicts.text_codes.tolist()
        self.neighbours = conflicts.neighbours()
        self.batch_of = [-1] * conflicts.n
        self.members: list[list[int]] = [[] for _ in range(n_batches)]
        self.batch_groups: list[set] = [set() for _ in range(n_batches)]
        self.batch_texts: list[set] = [set() for _ in range(n_batches)]
        # placed captions per image and per text, for the conflicts of one caption with every batch
        self.placed_of_group: dict[int, set] = {}
        self.placed_of_text: dict[int, set] = {}

    def fits(self, i: int, b: int) -> bool:
        if self.groups[i] in self.batch_groups[b] or self.texts[i] in self.batch_texts[b]:
            return False
        return not any(self.batch_of[j] == b for j in self.neighbours.get(i, ()))

    def put(self, i: int, b: int) -> None:
        self.batch_of[i] = b
        self.members[b].append(i)
        self.batch_groups[b].add(self.groups[i])
        self.batch_texts[b].add(self.texts[i])
        self.placed_of_group.setdefault(self.groups[i], set()).add(i)
        self.placed_of_text.setdefault(self.texts[i], set()).add(i)

    def take(self, i: int) -> None:
        b = self.batch_of[i]
        self.batch_of[i] = -1
        self.members[b].remove(i)
        self.batch_groups[b].discard(self.groups[i])
        self.batch_texts[b].discard(self.texts[i])
        self.placed_of_group[self.groups[i]].discard(i)
        self.placed_of_text[self.texts[i]].discard(i)

    def conflicting(self, i: int) -> dict[int, set]:
        """The placed captions ``i`` conflicts with, by batch."""
        found: dict[int, set] = {}
        others = (self.placed_of_group.get(self.groups[i], set()) | self.placed_of_text.get(self.texts[i], set())
                  | {j for j in self.neighbours.get(i, ()) if self.batch_of[j] >= 0})
        for j in others:
            if j != i:
                found.setdefault(self.batch_of[j], set()).add(j)
        return found

    def is_short(self, b: int) -> bool:
        return len(self.members[b]) < self.size


def _first_fit(state: _Batches, waiting: list[int]) -> list[int]:
    """Place each waiting caption in the first batch with room where it fits; the rest, in order."""
    short = [b for b in range(len(state.members)) if state.is_short(b)]
    left = []
    for i in waiting:
        for b in short:
            if state.fits(i, b):
                state.put(i, b)
                if not state.is_short(b):
                    short.remove(b)
                break
        else:
            left.append(i)
    return left


def _repair(state: _Batches, waiting: list[int], rng: np.random.Generator) -> list[int]:
    """Fill short batches by moving a member of another batch into them and a waiting caption into
    its place (see the module's docstring); the captions still waiting."""
    n_batches = len(state.members)

    def hopeless(i: int) -> bool:
        # a caption whose image or text is in every batch already can only swap with its own twin,
        # which then has nowhere to go
        return (len(state.placed_of_group.get(state.groups[i], ())) >= n_batches
                or len(state.placed_of_text.get(state.texts[i], ())) >= n_batches)

    candidates = list(waiting)
    failures: dict[int, int] = {}
    for hole in range(n_batches):
        while state.is_short(hole) and candidates:
            tried = [candidates[k] for k in rng.permutation(len(candidates))[:REPAIR_CAPTIONS]]
            gone = {i for i in tried if hopeless(i)}
            hopeful = [i for i in tried if i not in gone]
            placed = next((i for i in hopeful if _swap_in(state, i, hole, rng)), None)
            if placed is not None:
                gone.add(placed)
            else:
                # bounded work: a caption that fits no short batch after a few tries is left out
                for i in hopeful:
                    failures[i] = failures.get(i, 0) + 1
                gone |= {i for i in hopeful if failures[i] >= REPAIR_FAILURES}
            candidates = [i for i in candidates if i not in gone]
            if placed is None and hopeful:
                break
    return [i for i in waiting if state.batch_of[i] < 0]


def _swap_in(state: _Batches, i: int, hole: int, rng: np.random.Generator) -> bool:
    """Put ``i`` into a batch other than ``hole`` by moving one member of that batch into ``hole``."""
    n_batches = len(state.members)
    conflicts = state.conflicting(i)
    free = [b for b in rng.permutation(n_batches)[:REPAIR_BATCHES].tolist() if b not in conflicts and b != hole]
    if not free and len(conflicts) < n_batches:
        # most batches hold a conflict of i (one image with a caption in nearly every batch): look at all
        free = [b for b in range(n_batches) if b not in conflicts and b != hole]
        free = [free[k] for k in rng.permutation(len(free))[:REPAIR_BATCHES]]
    single = [b for b, members in conflicts.items() if len(members) == 1 and b != hole]
    single = [single[k] for k in rng.permutation(len(single))[:REPAIR_BATCHES]]
    for b in free + single:
        if b not in conflicts and state.is_short(b):
            state.put(i, b)
            return True
        if b in conflicts:
            movers = list(conflicts[b])
        else:
            members = state.members[b]
            movers = [members[k] for k in rng.permutation(len(members))[:REPAIR_MEMBERS]]
        for x in movers:
            if state.fits(x, hole):
                # i conflicts with no member of b but x, so it fits once x is gone
                state.take(x)
                state.put(x, hole)
                state.put(i, b)
                return True
    return False


def plan_epoch(conflicts: Conflicts, batch_size: int, seed: int = 0, epoch: int = 0) -> EpochPlan:
    """The batches of one epoch (order seeded by ``seed + epoch``); see the module's docstring."""
    n = conflicts.n
    check_batch_size(batch_size, n)
    check_seed(seed)
    if int(epoch) != epoch or epoch < 0:
        raise CapgeoError(f"epoch: expected a whole number >= 0, got {epoch}")
    rng = np.random.default_rng(epoch_seed(seed, epoch))
    order = rng.permutation(n)
    n_batches = n // batch_size
    state = _Batches(conflicts, n_batches, batch_size)
    waiting = []
    for position, i in enumerate(order[:n_batches * batch_size].tolist()):
        b = position // batch_size
        if state.fits(i, b):
            state.put(i, b)
        else:
            waiting.append(i)
    waiting += order[n_batches * batch_size:].tolist()
    waiting = _first_fit(state, waiting)
    if waiting and any(state.is_short(b) for b in range(n_batches)):
        waiting = _repair(state, waiting, rng)
    home = order[:n_batches * batch_size].reshape(n_batches, batch_size)
    batches = tuple(np.array(members, dtype=np.int64) for members in state.members)
    rearranged = sum(set(members) != set(row) for members, row in zip(state.members, home.tolist()))
    shuffle_batch = np.full(n, -1, dtype=np.int64)
    shuffle_batch[home.reshape(-1)] = np.repeat(np.arange(n_batches), batch_size)
    return EpochPlan(epoch, int(seed), int(batch_size), batches, np.sort(np.array(waiting, dtype=np.int64)),
                     int(rearranged), _pairs_by_kind(conflicts, shuffle_batch))


def _pairs_in_cells(*keys: np.ndarray) -> int:
    """Pairs of rows equal in every key (rows with a negative first key are in no cell)."""
    keep = keys[0] >= 0
    if not keep.any():
        return 0
    _, counts = np.unique(np.stack([key[keep] for key in keys]), axis=1, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


def _pairs_by_kind(conflicts: Conflicts, batch: np.ndarray) -> dict[str, int]:
    """Pairs of captions in one batch (``batch[i]``: caption i's batch, -1 none) of each kind: of one
    image; exact copies of different images; near-duplicates neither of those."""
    groups, texts = conflicts.group_codes, conflicts.text_codes
    same_image = _pairs_in_cells(batch, groups)
    exact = _pairs_in_cells(batch, texts) - _pairs_in_cells(batch, texts, groups)
    a, b = conflicts.near_a, conflicts.near_b
    if len(a):
        # each unordered pair once
        low, high = np.minimum(a, b), np.maximum(a, b)
        pairs = np.unique(np.stack([low, high]), axis=1)
        low, high = pairs[0], pairs[1]
        near = int(np.count_nonzero((batch[low] >= 0) & (batch[low] == batch[high]) & (low != high)
                                    & (groups[low] != groups[high]) & (texts[low] != texts[high])))
    else:
        near = 0
    return {"same_image": same_image, "exact_copy": exact, "near_duplicate": near}


def conflicts_of(captions, vectors, threshold: float, *, block_size: int | None = None,
                 device: str | None = None) -> Conflicts:
    """The conflicts of a CaptionSet: its images, its exact copies (one rule with every command:
    capgeo.captions.exact_duplicates.normalize_text) and its pairs of different images at cosine
    >= ``threshold`` under ``vectors`` (normalised, or Embeddings), from the exact all-pairs pass
    of `capgeo dupes` (capgeo.findings.duplicates.near_duplicate_pairs)."""
    from capgeo.findings.duplicates import near_duplicate_pairs, text_codes

    try:
        pairs = near_duplicate_pairs(captions, vectors, threshold=threshold, limit=None, block_size=block_size,
                                     device=device)
    except CapgeoError as error:
        if str(error).startswith("more than"):  # its advice names dupes' options
            raise CapgeoError(f"more than 1,000,000 caption pairs reach cosine {threshold:g}: "
                              "raise --threshold") from None
        raise
    return Conflicts(np.asarray(captions.group_codes), text_codes(captions.texts),
                     np.array([p.index_a for p in pairs], dtype=np.int64),
                     np.array([p.index_b for p in pairs], dtype=np.int64), float(threshold))


def plan_epochs(conflicts: Conflicts, batch_size: int, *, seed: int = 0, epochs: int = 1) -> list[EpochPlan]:
    """The plans of epochs 0 .. ``epochs`` - 1 (:func:`plan_epoch`, seeds ``seed + epoch``)."""
    from capgeo.progress import progress_bar

    check_epochs(epochs)
    check_batch_size(batch_size, conflicts.n)
    plans = []
    with progress_bar("Planning batches", int(epochs)) as bar:
        for epoch in range(int(epochs)):
            plans.append(plan_epoch(conflicts, batch_size, seed, epoch))
            bar.advance(1)
    return plans


SCHEMA = "capgeo.batches/1"


@dataclass(frozen=True)
class BatchPlan:
    """Epochs of training batches without false negatives: the ``capgeo.batches/1`` result of
    `capgeo batches` and ``capgeo.plan_batches`` (fields in docs/batches.md). ``batches`` holds
    the batches themselves (``batches[epoch][k]``: caption row numbers) when they were kept; it is
    not part of the JSON."""

    n_captions: int
    n_groups: int
    batch_size: int
    threshold: float
    seed: int
    epochs: int
    encoder: dict | None               # the encoder's info, None for vectors without it
    conflict_pairs: dict               # pairs of each kind in the whole dataset
    n_batches: int                     # over all epochs
    n_placed: int
    n_not_placed: int
    share_not_placed: float
    n_rearranged_batches: int
    n_short_batches: int
    conflicts_avoided: dict            # pairs a plain shuffle puts in one batch, by kind
    per_epoch: tuple[dict, ...]        # each epoch's EpochPlan.summary()
    output: str | None                 # batches.jsonl, when written
    batches: tuple[tuple[tuple[int, ...], ...], ...] | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """The `capgeo batches --json` object (``capgeo.batches/1``), a copy."""
        import copy

        return {"schema": SCHEMA, "n_captions": self.n_captions, "n_groups": self.n_groups,
                "batch_size": self.batch_size, "threshold": self.threshold, "seed": self.seed,
                "epochs": self.epochs, "encoder": copy.deepcopy(self.encoder),
                "conflict_pairs": dict(self.conflict_pairs), "n_batches": self.n_batches,
                "n_placed": self.n_placed, "n_not_placed": self.n_not_placed,
                "share_not_placed": self.share_not_placed, "n_rearranged_batches": self.n_rearranged_batches,
                "n_short_batches": self.n_short_batches, "conflicts_avoided": dict(self.conflicts_avoided),
                "per_epoch": copy.deepcopy(list(self.per_epoch)), "output": self.output}

    def to_polars(self):
        """One row per batch: epoch, batch, indices (the lines of batches.jsonl, without ids)."""
        import polars as pl

        rows = [{"epoch": e, "batch": k, "indices": list(batch)} for e, epoch in enumerate(self.batches or ())
                for k, batch in enumerate(epoch)]
        if not rows:
            return pl.DataFrame(schema={"epoch": pl.Int64, "batch": pl.Int64, "indices": pl.List(pl.Int64)})
        return pl.DataFrame(rows, infer_schema_length=None)


def plan_section(conflicts: Conflicts, plans: list[EpochPlan], *, n_groups: int, encoder: dict | None = None,
                 output: str | None = None, keep_batches: bool = False) -> BatchPlan:
    """The ``capgeo.batches/1`` result: the totals over ``plans`` and each epoch's summary; with
    ``keep_batches`` the batches too."""
    epochs = [plan.summary() for plan in plans]
    n_not_placed = sum(entry["n_not_placed"] for entry in epochs)
    batches = (tuple(tuple(tuple(batch.tolist()) for batch in plan.batches) for plan in plans)
               if keep_batches else None)
    return BatchPlan(
        n_captions=conflicts.n, n_groups=int(n_groups),
        batch_size=plans[0].batch_size, threshold=conflicts.threshold, seed=plans[0].seed,
        epochs=len(plans),
        encoder=encoder,
        conflict_pairs=conflicts.pair_counts(),
        n_batches=sum(entry["n_batches"] for entry in epochs),
        n_placed=sum(entry["n_placed"] for entry in epochs),
        n_not_placed=n_not_placed,
        share_not_placed=n_not_placed / (conflicts.n * len(plans)),
        n_rearranged_batches=sum(entry["n_rearranged_batches"] for entry in epochs),
        n_short_batches=sum(entry["n_short_batches"] for entry in epochs),
        conflicts_avoided={kind: sum(entry["shuffle_conflicts"][kind] for entry in epochs) for kind in KINDS},
        per_epoch=tuple(epochs),
        output=output,
        batches=batches,
    )
