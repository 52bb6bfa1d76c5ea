"""What one pairwise pass is asked for, as one frozen object.

The exact pass (:func:`capgeo.geometry.pairwise.scan_pairs`), its tiles
(:func:`~capgeo.geometry.pairwise.tile_partial`), the Ray driver (capgeo.scale) and the sampled
estimate (:func:`capgeo.geometry.estimate.estimate_pairs`) all read a :class:`ScanOptions`;
:func:`capgeo.geometry.profile.build_profile` builds one from its ProfileOptions. Each function
also takes the fields as keywords (``scan_pairs(vectors, codes, top_k=5)``), which replace those
of the object given: :meth:`ScanOptions.of` is the one place they are merged.

This module imports no numerical library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capgeo import defaults

#: captions whose exact companions are looked up to measure the recall of approximate (faiss) ones
RECALL_QUERIES = 1000


@dataclass(frozen=True)
class ScanOptions:
    """The options of one pass over the caption pairs (exact or sampled)."""

    top_k: int = defaults.TOP_K
    #: rows per tile; None sizes it from the device and N (capgeo.geometry.tile_size)
    block_size: int | None = defaults.PAIR_BLOCK_SIZE
    bins: int = defaults.BINS
    #: fp32 (exact), or tf32 / bf16 tile products (capgeo.geometry.precision); exact pass only
    precision: str = defaults.PRECISIONS[0]
    #: False: the hardest companions only, no distributions
    histograms: bool = True
    #: also keep every different-group pair with cosine >= threshold (exact pass only)
    threshold: float | None = None
    #: also count the different-group pairs with cosine >= this, exactly, without keeping them
    count_at_or_above: float | None = None
    #: with ``threshold``: stop (TooManyPairs) as soon as more pairs than this reach it
    max_pairs: int | None = None
    device: Any = None
    #: None: a bar on a terminal only
    progress: bool | None = None
    #: CPU threads for the torch pass's bookkeeping (histogram, top-k, merges); None keeps torch's
    bookkeeping_threads: int | None = 1
    # the sampled estimate's own (capgeo.geometry.estimate)
    n_pairs: int = defaults.SAMPLED_PAIRS
    seed: int = 0
    companions: str = defaults.COMPANION_MODES[0]
    recall_queries: int = RECALL_QUERIES

    @classmethod
    def of(cls, options: "ScanOptions | None" = None, caller: str = "scan_pairs", **values) -> "ScanOptions":
        """``options`` (default: all defaults) with the fields in ``values`` replaced; an unknown
        field is a TypeError naming ``caller``, as for any unknown keyword argument."""
        from capgeo.arguments import with_fields

        return with_fields(cls, options, caller, values)
