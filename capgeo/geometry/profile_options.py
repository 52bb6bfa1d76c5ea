"""Everything a profile run is asked for, as one frozen object checked in one place.

:func:`capgeo.geometry.profile.build_profile` takes a :class:`ProfileOptions` (or its fields as
keyword arguments); :meth:`ProfileOptions.checked` refuses bad values with one clear error.
Whether the pairwise pass is exact or sampled is decided by
:func:`capgeo.geometry.estimate.pairwise_mode` alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from capgeo.errors import CapgeoError
from capgeo.geometry.estimate import COMPANION_MODES, DEFAULT_ESTIMATE_THRESHOLD, DEFAULT_SAMPLED_PAIRS, pairwise_mode
from capgeo.geometry.batch_size import DEFAULT_N_BATCHES
from capgeo.geometry.inbatch import (
    DEFAULT_BUCKET_EDGES,
    DEFAULT_NEAR_DUPLICATE_THRESHOLD,
    DEFAULT_RELATIVE_LEVELS,
    check_edges,
)
from capgeo.geometry.precision import check_precision
from capgeo.preflight import check_counts, check_pair_threshold, check_quantile_levels


@dataclass(frozen=True)
class ProfileOptions:
    """The options of one profile run (recorded in the profile's ``options`` section)."""

    batch_sizes: Sequence[int] | None = None
    buckets: Sequence[float] = DEFAULT_BUCKET_EDGES
    relative_buckets: bool = False
    relative_quantiles: Sequence[float] = DEFAULT_RELATIVE_LEVELS
    n_batches: int = DEFAULT_N_BATCHES
    top_k: int = 10
    block_size: int | None = None  # None: sized from the device (capgeo.geometry.tile_size)
    precision: str = "fp32"
    bins: int = 4000
    seed: int = 0
    near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD
    mode: str = "auto"
    sampled_above: int = DEFAULT_ESTIMATE_THRESHOLD
    sampled_pairs: int = DEFAULT_SAMPLED_PAIRS
    companions: str = "exact"
    include_companions: bool = True

    def checked(self, batch_sizes: Sequence[int]) -> "ProfileOptions":
        """These options with bad values refused (CapgeoError), the bucket edges and relative levels
        in their checked form, and ``batch_sizes`` (already checked against the dataset) in place."""
        pairwise_mode(self.mode, 0)  # refuses an unknown mode before any work
        edges = check_edges(self.buckets)
        check_pair_threshold(self.near_duplicate_threshold, "near-duplicate threshold")
        levels = tuple(float(level) for level in self.relative_quantiles)
        if self.relative_buckets:
            levels = tuple(check_quantile_levels(levels))
        check_counts(n_batches=self.n_batches, top_k=self.top_k, sampled_pairs=self.sampled_pairs)
        for name in ("n_batches", "top_k", "block_size", "bins", "sampled_pairs"):
            value = getattr(self, name)
            if value is not None and int(value) < 1:
                raise CapgeoError(f"{name.replace('_', ' ')} must be at least 1, got {value}")
        if int(self.seed) < 0:  # numpy's generators take none (a ValueError from deep inside)
            raise CapgeoError(f"seed must be 0 or more, got {self.seed}")
        check_precision(self.precision)
        if self.companions not in COMPANION_MODES:
            raise CapgeoError(f"companions must be one of {', '.join(COMPANION_MODES)}, got {self.companions!r}")
        return dataclasses.replace(self, batch_sizes=tuple(batch_sizes), buckets=tuple(edges), relative_quantiles=levels)

    def to_dict(self, mode_used: str, device: str | None, *, headline_batch_size: int,
                block_size_used: int) -> dict:
        """The profile's ``options`` section (docs/profile-schema.md)."""
        return {
            "batch_sizes": list(self.batch_sizes),
            "headline_batch_size": int(headline_batch_size),
            "buckets": list(self.buckets),
            "relative_buckets": bool(self.relative_buckets),
            "relative_quantiles": list(self.relative_quantiles),
            "n_batches": int(self.n_batches),
            "top_k": int(self.top_k),
            "block_size": None if self.block_size is None else int(self.block_size),
            "block_size_used": int(block_size_used),
            # what the mode used: products of the exact pass only, faiss in sampled mode only
            "precision": self.precision if mode_used == "exact" else "fp32",
            "bins": int(self.bins),
            "seed": int(self.seed),
            "near_duplicate_threshold": float(self.near_duplicate_threshold),
            "mode": self.mode,
            "mode_used": mode_used,
            "sampled_above": int(self.sampled_above),
            "sampled_pairs": int(self.sampled_pairs),
            "companions": self.companions if mode_used == "sampled" else "exact",
            "include_companions": bool(self.include_companions),
            "device": device,
        }


def options_unused_by(mode_used: str, *, precision: str = "fp32", companions: str = "exact",
                      mode: str = "auto") -> list[str]:
    """Notes on options asked for that the mode in use does not apply (else they pass silently)."""
    notes = []
    if mode == "sampled" and mode_used == "exact":
        notes.append("--mode sampled: --sampled-pairs covers every negative pair, so all of them were taken "
                     "(the exact pass) instead of drawing a sample")
    if mode_used == "sampled" and precision != "fp32":
        notes.append(f"--precision {precision} applies to the exact pass; the sampled estimate scores its pairs "
                     "in fp32")
    if mode_used == "exact" and companions != "exact":
        notes.append(f"--companions {companions} applies to --mode sampled; the exact pass finds the exact "
                     "companions")
    return notes
