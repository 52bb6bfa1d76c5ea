"""The one batch-size policy every command uses (profile, gamma, report, compare, truncation).

``--batch-size`` is the training run's *effective contrastive batch*: the number of
captions of different images whose similarities share one softmax. The first size
(default 128, the paper's effective batch) is the **headline**: the batch every
command headlines its gamma and in-batch statistics at. Further sizes are extra rows,
never the headline. Needs only the number of groups (images), so it runs before the
slow encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from numbers import Integral

from capgeo.errors import CapgeoError

#: The paper's effective contrastive batch (HN-CLIP, Long-CLIP-L on DOCCI).
DEFAULT_BATCH_SIZE = 128
#: Random batches drawn per batch size, for the in-batch statistics and the gamma rule alike:
#: one draw, so the same data and seed give the same headline gamma in every command.
DEFAULT_N_BATCHES = 200
#: The gamma rule matches the effective share of B - 1 negatives to the reference's (about 0.5);
#: a row's share cannot fall below 1/(B - 1), so batches of 2 or 3 captions have no answer.
MIN_GAMMA_BATCH_SIZE = 4


@dataclass(frozen=True)
class BatchSizes:
    """Resolved batch sizes: the headline first, then extra rows, and what was adapted and why."""

    headline: int
    extra: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def sizes(self) -> list[int]:
        """All sizes, headline first (the order of every ``batches`` list in a profile)."""
        return [self.headline, *self.extra]


def _outside(size: int, n_groups: int) -> CapgeoError:
    return CapgeoError(f"--batch-size {size}: a batch needs captions of B different images, so B must be between 2 "
                       f"and the number of groups (images) in the dataset, {n_groups}")


def resolve_batch_sizes(requested: Sequence[int] | None, n_groups: int, *,
                        extra_defaults: Sequence[int] = ()) -> BatchSizes:
    """Validate and resolve the batch sizes for a dataset of ``n_groups`` images.

    ``requested`` (the user's ``--batch-size`` values, in order) empty or None: headline
    DEFAULT_BATCH_SIZE, or every image when the dataset has fewer (with a note), plus the
    command's ``extra_defaults`` that fit. Given: the first is the headline, the rest are
    extra rows (duplicates dropped); each must fit the dataset or a CapgeoError says so.
    """
    n_groups = int(n_groups)
    if isinstance(requested, Integral):  # one batch size given as a number, not a list
        requested = (int(requested),)
    if requested is not None:
        if isinstance(requested, (str, bytes)) or not hasattr(requested, "__iter__") or getattr(requested, "ndim", 1) == 0:
            raise CapgeoError(f"batch sizes are whole numbers (one, or a list), got {requested!r}")
        # a numpy array (whose truth value is ambiguous) or any iterable: its items, as a tuple
        requested = tuple(size.item() if hasattr(size, "item") else size for size in requested)
    if requested and not all(isinstance(size, Integral) and not isinstance(size, bool)
                             for size in requested):
        raise CapgeoError(f"batch sizes are whole numbers, got {list(requested)!r}")
    if n_groups < 2:
        raise CapgeoError(f"the dataset has {n_groups} group(s) (images); a batch needs captions of at least 2 images")
    notes: list[str] = []
    if requested:
        sizes = []
        for size in (int(size) for size in requested):
            if not 2 <= size <= n_groups:
                raise _outside(size, n_groups)
            if size not in sizes:
                sizes.append(size)
        return BatchSizes(sizes[0], tuple(sizes[1:]))
    headline = DEFAULT_BATCH_SIZE
    if n_groups < DEFAULT_BATCH_SIZE:
        headline = n_groups
        notes.append(f"batch size {n_groups}: the dataset has only {n_groups} images (default {DEFAULT_BATCH_SIZE}).")
    extra = []
    for size in extra_defaults:
        if size > n_groups:
            notes.append(f"batch size {size} left out: the dataset has only {n_groups} images.")
        elif size != headline and size not in extra:
            extra.append(int(size))
    return BatchSizes(headline, tuple(extra), tuple(notes))


def check_gamma_batch_size(size: int, n_groups: int | None = None) -> None:
    """The gamma rule's own floor on B (see MIN_GAMMA_BATCH_SIZE), one wording everywhere."""
    if size < MIN_GAMMA_BATCH_SIZE:
        raise CapgeoError(gamma_batch_size_problem(size, n_groups))


def gamma_batch_size_problem(size: int, n_groups: int | None = None) -> str:
    """Why B = ``size`` is below the rule's floor. A size equal to the dataset's group count is
    the dataset's limit (the default was cut to it, or no larger size is possible): that is named
    rather than a --batch-size the user may never have given."""
    why = (f"with {size - 1} negative(s) per row the effective share cannot fall to the reference's (about 0.5)")
    if n_groups is not None and (size >= n_groups or n_groups < MIN_GAMMA_BATCH_SIZE):  # no size would do
        return (f"the dataset has only {n_groups} images, too few for the gamma rule: in-batch {why}; "
                f"it needs batches of at least {MIN_GAMMA_BATCH_SIZE} images")
    return f"--batch-size {size} is too small for the gamma rule: {why}; use a batch size of at least {MIN_GAMMA_BATCH_SIZE}"
