"""Everything a profile run is asked for, as one frozen object checked in one place.

:func:`capgeo.pipeline.profile_dataset` and :func:`capgeo.geometry.profile.build_profile` take a
:class:`ProfileOptions`; :meth:`ProfileOptions.checked` refuses bad values with one clear error.
Each field's default is the one default of that option: the command line's --help reads it from
here. Whether the pairwise pass is exact or sampled is decided by
:func:`capgeo.geometry.estimate.pairwise_mode` alone.

This module imports no numerical library (``capgeo profile --help`` reads its defaults): the
checks import theirs when they run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from capgeo import defaults
from capgeo.errors import CapgeoError
from capgeo.geometry.batch_size import DEFAULT_N_BATCHES


@dataclass(frozen=True)
class ProfileOptions:
    """The options of one profile run (recorded in the profile's ``options`` section)."""

    #: None: the batch-size policy's (capgeo.geometry.batch_size: 128, or every image of a smaller set)
    batch_sizes: Sequence[int] | None = None
    buckets: Sequence[float] = defaults.BUCKET_EDGES
    relative_buckets: bool = False
    relative_quantiles: Sequence[float] = defaults.RELATIVE_LEVELS
    n_batches: int = DEFAULT_N_BATCHES
    top_k: int = defaults.TOP_K
    block_size: int | None = defaults.PAIR_BLOCK_SIZE  # None: sized from the device (capgeo.geometry.tile_size)
    precision: str = defaults.PRECISIONS[0]
    bins: int = defaults.BINS
    seed: int = 0
    near_duplicate_threshold: float = defaults.NEAR_DUPLICATE_THRESHOLD
    mode: str = defaults.PAIRWISE_MODES[0]
    sampled_above: int = defaults.ESTIMATE_THRESHOLD
    sampled_pairs: int = defaults.SAMPLED_PAIRS
    companions: str = defaults.COMPANION_MODES[0]
    include_companions: bool = True

    def __post_init__(self):
        # each field by its annotation (capgeo.arguments), before anything uses it: a seed of 1.5 or
        # batch_sizes=[] is refused here, not met as a TypeError inside numpy or taken as the default
        from capgeo.arguments import check_values

        check_values("ProfileOptions", {field.name: getattr(self, field.name) for field in dataclasses.fields(self)},
                     {field.name: field.type for field in dataclasses.fields(self)})

    @classmethod
    def of(cls, options: "ProfileOptions | None" = None, **values) -> "ProfileOptions":
        """``options`` (default: all defaults) with the fields in ``values`` replaced; an unknown
        field is one CapgeoError naming it."""
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise CapgeoError(f"unknown profile option {unknown[0]!r}; ProfileOptions has "
                              f"{', '.join(f.name for f in dataclasses.fields(cls))}")
        options = options or cls()
        return dataclasses.replace(options, **values) if values else options

    def resolved(self, n_groups: int, *, extra_defaults: Sequence[int] = ()):
        """These options checked (:meth:`checked`) with their batch sizes resolved against a dataset of
        ``n_groups`` groups (capgeo.geometry.batch_size), and the resolved BatchSizes. The options
        returned remember it, so the profile built from them checks nothing again."""
        from capgeo.geometry.batch_size import resolve_batch_sizes

        resolved = resolve_batch_sizes(self.batch_sizes, n_groups, extra_defaults=extra_defaults)
        options = self.checked(resolved.sizes)
        object.__setattr__(options, "_checked_for", (n_groups, resolved))
        return options, resolved

    def checked_for(self, n_groups: int):
        """The BatchSizes these options were resolved to by :meth:`resolved` for ``n_groups`` groups, or None."""
        done = getattr(self, "_checked_for", None)
        return done[1] if done is not None and done[0] == n_groups else None

    def with_checked(self, **changes) -> "ProfileOptions":
        """These resolved options with ``changes`` to fields that need no check (include_companions)."""
        options = dataclasses.replace(self, **changes)
        if hasattr(self, "_checked_for"):
            object.__setattr__(options, "_checked_for", self._checked_for)
        return options

    def checked(self, batch_sizes: Sequence[int]) -> "ProfileOptions":
        """These options with bad values refused (CapgeoError), the bucket edges and relative levels
        in their checked form, and ``batch_sizes`` (already checked against the dataset) in place."""
        from capgeo.geometry.estimate import pairwise_mode
        from capgeo.geometry.precision import check_precision
        from capgeo.preflight import check_bucket_edges, check_counts, check_pair_threshold, check_quantile_levels

        pairwise_mode(self.mode, 0)  # refuses an unknown mode before any work
        edges = check_bucket_edges(self.buckets)
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
        if self.companions not in defaults.COMPANION_MODES:
            raise CapgeoError(f"companions must be one of {', '.join(defaults.COMPANION_MODES)}, "
                              f"got {self.companions!r}")
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
