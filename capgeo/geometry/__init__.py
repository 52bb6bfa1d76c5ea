"""Caption geometry: pairwise, hardest-companion and in-batch statistics, and the profile.

Public names are resolved lazily (PEP 562) so that ``import capgeo.geometry`` stays
cheap and never pulls in torch: each name is imported from its module on first use.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    # the profile as a whole (schema: docs/profile-schema.md)
    "build_profile": "capgeo.geometry.profile",
    "ProfileRun": "capgeo.geometry.profile",
    "load_profile": "capgeo.geometry.profile",
    "check_profile": "capgeo.geometry.profile",
    "SCHEMA": "capgeo.geometry.profile",
    # the same profile as typed, frozen objects
    "Profile": "capgeo.geometry.typed_profile",
    "load_typed_profile": "capgeo.geometry.typed_profile",
    # in-batch statistics
    "inbatch_statistics": "capgeo.geometry.inbatch",
    "InBatchOptions": "capgeo.geometry.inbatch",
    "DEFAULT_BUCKET_EDGES": "capgeo.geometry.inbatch",
    "DEFAULT_RELATIVE_LEVELS": "capgeo.geometry.inbatch",
    "DEFAULT_NEAR_DUPLICATE_THRESHOLD": "capgeo.geometry.inbatch",
    "sample_batches": "capgeo.geometry.batches",
    # the one batch-size policy (headline first)
    "resolve_batch_sizes": "capgeo.geometry.batch_size",
    "BatchSizes": "capgeo.geometry.batch_size",
    "DEFAULT_BATCH_SIZE": "capgeo.geometry.batch_size",
    # the blockwise pass and its pieces
    "scan_pairs": "capgeo.geometry.pairwise",
    "ScanOptions": "capgeo.geometry.scan_options",
    "PairScan": "capgeo.geometry.pairwise",
    "Histogram": "capgeo.geometry.distribution",
    "summarize_values": "capgeo.geometry.distribution",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'capgeo.geometry' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
