"""What the near-duplicate findings are asked (capgeo.findings.duplicates): one frozen options object
per concern, so that the engine takes four objects rather than nineteen keywords.

- :class:`MiningOptions`: how the pairwise passes run (companions kept per caption, block size,
  the most pairs held in memory, the device), shared by every question;
- :class:`PairListOptions`: the pair list of `capgeo dupes` (floor, length, exact copies left out);
- :class:`ExampleOptions`: the example queries of `capgeo dupes-examples`;
- :class:`SetOptions`: the near-duplicate sets of `capgeo dupes-sets` and the dedup decision.

Defaults live in capgeo.defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from capgeo.defaults import DUPES_NEIGHBOURS, DUPES_PER_QUANTILE, DUPES_QUANTILES, DUPES_TOP, PAIR_BLOCK_SIZE, TOP_K

#: the most pairs a pass keeps in memory (each end of a pair keeps a list of that length)
MAX_PAIRS = 1_000_000


@dataclass(frozen=True)
class MiningOptions:
    """How near-duplicates are mined: ``top_k`` companions kept per caption by the scan (crowded
    captions are re-searched exactly), ``block_size`` rows per block of the pass, at most
    ``max_pairs`` pairs held in memory, the pass run on ``device`` (None: the best available)."""

    top_k: int = TOP_K
    block_size: int | None = PAIR_BLOCK_SIZE
    max_pairs: int = MAX_PAIRS
    device: str | None = None

    @classmethod
    def of(cls, given: "MiningOptions | None" = None, **changes) -> "MiningOptions":
        """``given`` (default: the defaults) with ``changes`` (top_k=..., device=...) applied."""
        from capgeo.arguments import with_fields

        return with_fields(cls, given, cls.__name__, changes)


@dataclass(frozen=True)
class PairListOptions:
    """The pairs of different images with cosine >= ``threshold`` (None: no floor), at most ``limit``
    of them (None: every such pair), most similar first; ``skip_exact`` leaves exact copies out."""

    threshold: float | None = None
    limit: int | None = DUPES_TOP
    skip_exact: bool = False


@dataclass(frozen=True)
class ExampleOptions:
    """``per_quantile`` query captions at each of ``quantiles`` of the hardest-companion distribution,
    each with its ``neighbours`` nearest captions of other images."""

    quantiles: Sequence[float] = DUPES_QUANTILES
    per_quantile: int = DUPES_PER_QUANTILE
    neighbours: int = DUPES_NEIGHBOURS


@dataclass(frozen=True)
class SetOptions:
    """Sets of captions joined by pairs with cosine >= ``threshold``; with ``keep`` (a policy of
    capgeo.defaults.KEEP_POLICIES; ``seed`` for random) the dedup decision keeping one per set."""

    threshold: float
    keep: str | None = None
    seed: int = 0
