"""Dedup decisions: keep one caption per near-duplicate set, drop the others, and say what that changes.

The sets are the connected components of `capgeo dupes-sets`; which caption
stays is a named policy (:data:`KEEP_POLICIES`). The summary counts the captions and the
images (groups left with no caption) removed, and the hardest-companion mean before and
after, the latter read off the same top-k companion lists (each remaining caption's first
companion that is not dropped), with captions whose whole list was dropped re-searched exactly.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# KEEP_POLICIES: first: lowest row in the dataset; longest / shortest: most / fewest characters
# (ties: first); random: uniform, seeded
from capgeo.defaults import FIXED_BLOCK_SIZE, KEEP_POLICIES
from capgeo.errors import CapgeoError
from capgeo.findings.result import section
from capgeo.geometry.typed_profile import DedupDecision


def choose_kept(texts: Sequence[str], components, keep: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(kept, dropped) caption rows: one kept per component, the other members dropped."""
    if keep not in KEEP_POLICIES:
        raise CapgeoError(f"--keep: expected one of {', '.join(KEEP_POLICIES)}, got {keep!r}")
    rng = np.random.default_rng(seed)
    kept, dropped = [], []
    for component in components:
        members = np.asarray(component.members)  # ascending rows, so argmax/argmin ties go to the first
        if keep == "first":
            choice = 0
        elif keep == "random":
            choice = int(rng.integers(len(members)))
        else:
            lengths = np.array([len(texts[m]) for m in members])
            choice = int(np.argmax(lengths) if keep == "longest" else np.argmin(lengths))
        kept.append(int(members[choice]))
        dropped.extend(int(m) for m in np.delete(members, choice))
    return np.array(sorted(kept), dtype=np.int64), np.array(sorted(dropped), dtype=np.int64)


def hardest_after_drop(vectors: np.ndarray, group_codes: np.ndarray, scan, dropped: np.ndarray,
                       block_size: int = FIXED_BLOCK_SIZE, device: str | None = None) -> np.ndarray:
    """Hardest-companion cosine of every remaining caption once ``dropped`` rows are gone
    (NaN for dropped rows and for captions left with no caption of another group)."""
    from capgeo.geometry.pairwise import query_companions

    index = np.asarray(scan.companion_index)
    cosine = np.asarray(scan.companion_cosine, dtype=np.float64)
    n = index.shape[0]
    is_dropped = np.zeros(n, dtype=bool)
    is_dropped[dropped] = True
    valid = (index >= 0) & np.isfinite(cosine)
    alive = valid & ~is_dropped[np.where(index >= 0, index, 0)]
    has = alive.any(axis=1)
    first = np.argmax(alive, axis=1)
    hardest = np.where(has, cosine[np.arange(n), first], np.nan)
    # a full list with every entry dropped may hide a remaining companion further down
    search = np.flatnonzero(~has & valid[:, -1] & ~is_dropped)
    remaining = np.flatnonzero(~is_dropped)
    remaining_codes = np.asarray(group_codes)[remaining]
    # the remaining captions of one image only (or one caption) have no companion: NaN below
    alone = np.unique(remaining_codes).size < 2
    if search.size and not alone:
        local = np.searchsorted(remaining, search)
        _, found = query_companions(vectors[remaining], remaining_codes, local, top_k=1,
                                    block_size=block_size, device=device)
        hardest[search] = found[:, 0]
    hardest[is_dropped] = np.nan
    if alone:
        hardest[:] = np.nan
    return hardest


def dedup_section(captions, vectors: np.ndarray | None, scan, components, keep: str, seed: int = 0,
                  block_size: int = FIXED_BLOCK_SIZE, device: str | None = None) -> DedupDecision:
    """The dedup decision of a dupes section (its ``dedup`` part, fields in docs/dupes.md)."""
    if vectors is None:
        raise CapgeoError("dedup decisions need the caption vectors, not only a pair scan")
    kept, dropped = choose_kept(captions.texts, components, keep, seed)
    codes = np.asarray(captions.group_codes)
    n_groups = captions.n_groups
    remaining_groups = np.unique(np.delete(codes, dropped)).size
    before = np.asarray(scan.companion_cosine, dtype=np.float64)[:, 0]
    after = hardest_after_drop(vectors, codes, scan, dropped, block_size, device)
    ids = captions.ids
    return section(
        DedupDecision, keep=keep, seed=int(seed) if keep == "random" else None, n_sets=len(kept),
        n_captions_dropped=int(dropped.size), n_groups_dropped=int(n_groups - remaining_groups),
        n_captions_after=int(len(ids) - dropped.size), n_groups_after=int(remaining_groups),
        hardest_companion_mean_before=_nan_mean(before), hardest_companion_mean_after=_nan_mean(after),
        kept_ids=tuple(ids[i] for i in kept), dropped_ids=tuple(ids[i] for i in dropped))


def _nan_mean(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.astype(np.float64).mean()) if finite.size else None
