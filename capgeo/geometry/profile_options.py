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
from capgeo.geometry.inbatch import (
    DEFAULT_BUCKET_EDGES,
    DEFAULT_NEAR_DUPLICATE_THRESHOLD,
    DEFAULT_RELATIVE_LEVELS,
    check_edges,
)


@dataclass(frozen=True)
class ProfileOptions:
    """The options of one profile run (recorded in the profile's ``options`` section)."""

    batch_sizes: Sequence[int] | None = None
    buckets: Sequence[float] = DEFAULT_BUCKET_EDGES
    relative_buckets: bool = False
    relative_quantiles: Sequence[float] = DEFAULT_RELATIVE_LEVELS
    n_batches: int = 200
    top_k: int = 10
    block_size: int = 2048
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
        if not -1.0 <= self.near_duplicate_threshold <= 1.0:
            raise CapgeoError("near-duplicate threshold must be a cosine between -1 and 1, "
                              f"got {self.near_duplicate_threshold}")
        levels = tuple(float(level) for level in self.relative_quantiles)
        if self.relative_buckets and (not levels or any(not 0 < q < 1 for q in levels)
                                      or list(levels) != sorted(set(levels))):
            raise CapgeoError(f"relative bucket quantiles must be ascending levels between 0 and 1, got {list(levels)}")
        for name in ("n_batches", "top_k", "block_size", "bins", "sampled_pairs"):
            if int(getattr(self, name)) < 1:
                raise CapgeoError(f"{name.replace('_', ' ')} must be at least 1, got {getattr(self, name)}")
        if self.companions not in COMPANION_MODES:
            raise CapgeoError(f"companions must be one of {', '.join(COMPANION_MODES)}, got {self.companions!r}")
        return dataclasses.replace(self, batch_sizes=tuple(batch_sizes), buckets=tuple(edges), relative_quantiles=levels)

    def to_dict(self, mode_used: str, device: str | None) -> dict:
        """The profile's ``options`` section (docs/profile-schema.md)."""
        return {
            "batch_sizes": list(self.batch_sizes),
            "buckets": list(self.buckets),
            "relative_buckets": bool(self.relative_buckets),
            "relative_quantiles": list(self.relative_quantiles),
            "n_batches": int(self.n_batches),
            "top_k": int(self.top_k),
            "block_size": int(self.block_size),
            "bins": int(self.bins),
            "seed": int(self.seed),
            "near_duplicate_threshold": float(self.near_duplicate_threshold),
            "mode": self.mode,
            "mode_used": mode_used,
            "sampled_above": int(self.sampled_above),
            "sampled_pairs": int(self.sampled_pairs),
            "companions": self.companions,
            "include_companions": bool(self.include_companions),
            "device": device,
        }
