"""Assemble the whole geometry profile of one dataset as one JSON-ready dict.

The dict follows the versioned schema ``capgeo.profile/1`` documented field by field
in docs/profile-schema.md; the report, gamma and other commands read it back with
``load_profile`` instead of recomputing.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from capgeo import __version__
from capgeo.captions.exact_duplicates import find_exact_duplicates
from capgeo.errors import CapgeoError
from capgeo.geometry.batch_size import DEFAULT_BATCH_SIZE, DEFAULT_N_BATCHES, resolve_batch_sizes  # noqa: F401
from capgeo.geometry.estimate import resolved_mode, scan_or_estimate
from capgeo.geometry.inbatch import InBatchOptions, inbatch_statistics
from capgeo.geometry.profile_options import ProfileOptions
from capgeo.geometry.scan_options import ScanOptions
from capgeo.geometry.typed_profile import Profile
from capgeo.preflight import check_has_negatives

# the schema and its readers live in profile_schema.py, which the typed Profile reads too
from capgeo.geometry.profile_schema import (REQUIRED_SECTIONS, SCHEMA, SCHEMA_NAME, SCHEMA_VERSION,  # noqa: F401
                                            check_profile, load_profile)
#: Decimals kept for per-caption companion cosines (float32 carries ~7 digits).
COMPANION_DECIMALS = 6
#: Target number of bins of the token-count histogram.
LENGTH_BINS = 60


def provenance(command: str | None, started: float, **extra) -> dict:
    """The ``provenance`` section every result carries: version, time, command, duration.

    ``started`` is the ``time.perf_counter()`` reading taken when the work began."""
    return {
        "capgeo_version": __version__,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        # relative paths in dataset.source and encoder.spec are relative to this folder
        # (report PROFILE --fill-missing, run from elsewhere, finds them through it)
        "working_directory": _working_directory(),
        "elapsed_s": round(time.perf_counter() - started, 3),
        **extra,
    }


def _working_directory() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under the process
        return None


@dataclasses.dataclass(frozen=True)
class ProfileRun:
    """How one profile is built, beside what it is asked for (ProfileOptions): on which device, with
    which progress bars, for which command (its provenance), and what the caller gets besides it.

    ``on_scan``: called with the pairwise scan (a PairScan), so a caller can reuse it (the report's
    dupes section does). ``companion_lists=False`` leaves the ``companions`` section None: its
    N x k lists are most of the work outside the pass at a million captions, wasted when nothing
    saves them."""

    device: str | None = None
    progress: bool | None = None
    command: str | None = None
    on_scan: Callable | None = None
    companion_lists: bool = True


def build_profile(captions, embeddings, options: ProfileOptions | None = None, run: ProfileRun | None = None,
                  **values) -> Profile:
    """Profile ``captions`` (a CaptionSet) from their ``embeddings`` (an Embeddings).

    ``options`` is a :class:`ProfileOptions`, ``run`` a :class:`ProfileRun` (device, progress,
    command, on_scan, companion_lists); the fields of either may also be given as keyword arguments
    (``batch_sizes=(16, 128)``, ``progress=False``), which override them. Returns the typed, frozen
    ``capgeo.profile/1`` :class:`~capgeo.geometry.typed_profile.Profile` (docs/profile-schema.md;
    ``.to_dict()`` for JSON). Deterministic for a seed.
    Raises CapgeoError for bad options, a batch size above the number of groups, or a dataset
    with a single group (it has no negatives).
    """
    started = time.perf_counter()
    run_fields = {field.name for field in dataclasses.fields(ProfileRun)}
    run_values = {name: values.pop(name) for name in list(values) if name in run_fields}
    run = dataclasses.replace(run or ProfileRun(), **run_values)
    device, progress = run.device, run.progress
    options = ProfileOptions.of(options, **values)
    vectors = _checked_vectors(captions, embeddings)
    resolved = options.checked_for(captions.n_groups)
    if resolved is None:  # not yet checked by the pipeline (a library call)
        # the headline first (capgeo.geometry.batch_size): default 128, or every image of a smaller dataset
        options, resolved = options.resolved(captions.n_groups)

    group_codes = np.asarray(captions.group_codes)
    caption_ids = captions.ids
    group_ids = captions.groups
    mode_used = resolved_mode(options.mode, captions.group_codes, options.sampled_above, options.sampled_pairs)
    with ThreadPoolExecutor(max_workers=1) as beside_the_pass:
        # the sections that do not need the pass are built while it runs: on a GPU the host
        # would otherwise wait on it (seconds at a million captions: docs/geometry.md)
        dataset_section = beside_the_pass.submit(summarize_dataset, captions)
        exact_duplicates = beside_the_pass.submit(find_exact_duplicates, captions.texts, caption_ids, group_ids)
        lengths = beside_the_pass.submit(summarize_lengths, embeddings)
        scan = scan_or_estimate(vectors, group_codes, _scan_options(options, device, progress),
                                estimate_threshold=options.sampled_above, mode=options.mode)
    if run.on_scan is not None:
        run.on_scan(scan)
    cosines = _cosine_summaries(scan, len(captions))
    companion_index = np.asarray(scan.companion_index)
    companion_cosine = np.asarray(scan.companion_cosine, dtype=np.float64)
    batches = _batch_statistics(vectors, captions, scan, options, progress)

    profile = {
        "schema": SCHEMA,
        "dataset": dataset_section.result(),
        "encoder": embeddings.info.to_dict(),
        "lengths": lengths.result(),
        "pairwise": cosines.pairwise,
        "within_group": cosines.within_group,
        "hardest_companion": cosines.hardest_companion,
        "companions": None,  # filled in below, already JSON-ready
        "exact_duplicates": exact_duplicates.result(),
        "near_duplicates": _near_duplicates(scan.negatives, cosines.pairwise, companion_index, companion_cosine,
                                            options.near_duplicate_threshold,
                                            companions_exact=cosines.companions_exact,
                                            pairwise_exact=cosines.pairwise_exact,
                                            counted=scan.extra.get("count_at_or_above")),
        "batches": batches,
        "options": options.to_dict(mode_used, device, headline_batch_size=resolved.headline,
                                   block_size_used=int(scan.block_size)),
        "provenance": provenance(run.command, started, embeddings_origin=getattr(embeddings, "origin", None)),
    }
    profile = to_json_ready(profile)
    if run.companion_lists:
        profile["companions"] = _companions(caption_ids, companion_index, companion_cosine,
                                            options.include_companions)
    return Profile.from_dict(profile)


def _scan_options(options: ProfileOptions, device, progress) -> ScanOptions:
    """The pairwise pass (exact or sampled) that ``options`` ask for."""
    return ScanOptions(top_k=options.top_k, block_size=options.block_size, bins=options.bins,
                       precision=options.precision, device=device, progress=progress,
                       # tf32 / bf16 histograms are within a bound, not a bin: count the
                       # near-duplicate pairs exactly in the pass instead (re-scored)
                       count_at_or_above=options.near_duplicate_threshold if options.precision != "fp32" else None,
                       n_pairs=options.sampled_pairs, seed=options.seed, companions=options.companions)


def _checked_vectors(captions, embeddings) -> np.ndarray:
    """The embeddings as float32 rows, one per caption; CapgeoError for a mismatch or no negatives."""
    vectors = np.asarray(embeddings.vectors, dtype=np.float32)
    n_captions = len(captions)
    if vectors.ndim != 2 or vectors.shape[0] != n_captions:
        raise CapgeoError(f"embeddings have shape {vectors.shape}, expected one row per caption ({n_captions})")
    check_has_negatives(captions)
    return vectors


@dataclasses.dataclass(frozen=True)
class _CosineSummaries:
    """The scan's three distributions in their documented form, and whether each kind is exact."""

    pairwise: dict
    within_group: dict | None
    hardest_companion: dict
    pairwise_exact: bool
    companions_exact: bool


def _cosine_summaries(scan, n_captions: int) -> _CosineSummaries:
    # tf32 / bf16 products: the distribution is within a stated bound, not exact
    pairwise_exact = getattr(scan, "mode", "exact") == "exact" and "precision" not in scan.extra
    companions_exact = getattr(scan, "companion_mode", "exact") == "exact"
    pairwise = _with_exact_flag(scan.pairwise_summary(), pairwise_exact)
    within_group = None
    if scan.same_group is not None and scan.same_group.n:
        same_group_bounds = (getattr(scan, "extra", None) or {}).get("same_group_bounds")
        within_group = _with_exact_flag(scan.same_group_summary(), not (same_group_bounds or {}).get("sampled"))
        if same_group_bounds is not None:
            within_group["bounds"] = same_group_bounds
    hardest_companion = _with_exact_flag(scan.hardest_companion_summary(), companions_exact)
    hardest_companion["n_captions"] = n_captions
    if getattr(scan, "mode", "exact") == "sampled" and companions_exact and hardest_companion.get("max") is not None:
        # the sample's largest cosine would sit below the hardest companion's, which is itself a negative pair:
        # the largest negative cosine is exactly the largest hardest-companion cosine
        pairwise["max"] = max(float(hardest_companion["max"]), pairwise.get("max") or -1.0)
        bounds = pairwise.get("bounds")
        if bounds and bounds.get("quantile_intervals"):
            # no quantile of the negatives exceeds their exact largest cosine: an interval the DKW
            # band opened to 1 ends there
            top = pairwise["max"]
            bounds = dict(bounds)
            bounds["quantile_intervals"] = {level: [min(low, top), min(high, top)]
                                            for level, (low, high) in bounds["quantile_intervals"].items()}
            pairwise["bounds"] = bounds
    return _CosineSummaries(pairwise, within_group, hardest_companion, pairwise_exact, companions_exact)


def _batch_statistics(vectors: np.ndarray, captions, scan, options: ProfileOptions, progress) -> list[dict]:
    """In-batch statistics per batch size (options.batch_sizes, headline first)."""
    from capgeo.progress import progress_bar

    relative_edges = None
    if options.relative_buckets:
        # the dataset's own pairwise quantiles, read from the fine histogram (one bin of accuracy)
        relative_edges = [float(edge) for edge in scan.negatives.quantile(list(options.relative_quantiles))]
    group_codes = np.asarray(captions.group_codes)
    drawn = InBatchOptions(n_batches=options.n_batches, seed=options.seed, edges=options.buckets,
                           relative_edges=relative_edges,
                           relative_levels=options.relative_quantiles if options.relative_buckets else None,
                           near_duplicate_threshold=options.near_duplicate_threshold)
    batches = []
    for batch_size in options.batch_sizes:
        with progress_bar(f"Batches of {batch_size}", options.n_batches, enabled=progress) as bar:
            batches.append(inbatch_statistics(vectors, group_codes, batch_size, drawn, caption_ids=captions.ids,
                                              group_ids=captions.groups, progress=bar))
    return batches


def _with_exact_flag(summary: dict | None, exact: bool) -> dict | None:
    """A distribution summary in the documented form: ``count``, ``bin_width``,
    ``exact`` and histogram ``edges`` added to what the summary gives."""
    if summary is None:
        return None
    summary = dict(summary)
    summary.setdefault("count", summary.get("n"))
    summary.setdefault("n", summary.get("count"))
    summary.setdefault("exact", exact)
    histogram = summary.get("histogram")
    if isinstance(histogram, dict) and "edges" not in histogram and "width" in histogram:
        counts = list(histogram.get("counts") or [])
        start, width = float(histogram["start"]), float(histogram["width"])
        edges = np.round(start + width * np.arange(len(counts) + 1), 10).tolist()
        summary["histogram"] = {"edges": edges, "counts": counts, "start": start, "width": width}
    if isinstance(summary.get("histogram"), dict):
        edges = summary["histogram"].get("edges") or []
        width = summary["histogram"].get("width")
        if width is None and len(edges) > 1:
            width = float(edges[1] - edges[0])
        summary.setdefault("bin_width", width)
    return summary


def _count_at_or_above(histogram, threshold: float) -> tuple[int, float]:
    """Pairs with cosine >= threshold from the binned negatives, and the bin width.

    Bins are counted from the bin edge nearest the threshold (the rule of
    ``Histogram.share_at_or_above``), so the count is exact up to the pairs within one
    bin width of the threshold."""
    counts = np.asarray(histogram.counts, dtype=np.int64)
    width = float(histogram.width)
    # at most the last bin's left edge: it holds the cosines up to 1.0 itself (a threshold of 1,
    # identical captions' cosine, counted nothing)
    start = int(np.clip(round((float(threshold) - histogram.low) / width), 0, counts.size - 1))
    return int(counts[start:].sum()), width


def _pairs_above_from_companions(companion_index: np.ndarray, companion_cosine: np.ndarray,
                                 threshold: float) -> int | None:
    """Exact count of negative pairs >= threshold from the top-k lists, or None.

    When no caption's k-th companion reaches the threshold, every pair above it sits
    in both captions' top-k lists, so the distinct pairs there are all of them."""
    if companion_cosine.size == 0:
        return 0
    last = companion_cosine[:, -1]
    if np.any(np.nan_to_num(last, nan=-np.inf) >= threshold):
        return None
    return _distinct_pairs_listed(companion_index, companion_cosine, threshold)


def _distinct_pairs_listed(companion_index: np.ndarray, companion_cosine: np.ndarray, threshold: float) -> int:
    """Distinct negative pairs >= threshold in the top-k lists: all of them when the lists are
    complete, and always real pairs, so a lower bound on the count whatever found them."""
    if companion_cosine.size == 0:
        return 0
    rows, columns = np.nonzero(np.nan_to_num(companion_cosine, nan=-np.inf) >= threshold)
    partners = companion_index[rows, columns].astype(np.int64)
    low, high = np.minimum(rows, partners), np.maximum(rows, partners)
    n = companion_index.shape[0]
    return int(np.unique(low * n + high).size)


def _near_duplicates(histogram, pairwise: dict, companion_index, companion_cosine, threshold: float, *,
                     companions_exact: bool, pairwise_exact: bool, counted: dict | None = None) -> dict:
    hardest = companion_cosine[:, 0] if companion_cosine.size else np.zeros(0)
    n_hardest_above = int(np.count_nonzero(np.nan_to_num(hardest, nan=-np.inf) >= threshold))
    binned, bin_width = _count_at_or_above(histogram, threshold)
    total_pairs = int(pairwise.get("pairs_total") or pairwise.get("count") or 0)
    if not pairwise_exact and histogram.n:
        # sampled pairs: scale the sample's share up to all negatives of the dataset
        binned = int(round(binned / histogram.n * total_pairs))
    from_companions = (_pairs_above_from_companions(companion_index, companion_cosine, threshold)
                       if companions_exact else None)
    if from_companions is not None:
        n_pairs, method = from_companions, "top_k"
    elif counted is not None and counted["threshold"] == threshold:
        n_pairs, method = counted["pairs"], "counted"  # in the pass, re-scored (tf32 / bf16)
    elif pairwise_exact:
        n_pairs, method = binned, "histogram"
    else:
        # the pairs the companion lists hold are real (even from an approximate search): a sample
        # scaled up to 0 pairs beside "6 captions have one" contradicted itself
        n_pairs, method = max(binned, _distinct_pairs_listed(companion_index, companion_cosine, threshold)), "sampled"
    n_captions = int(companion_cosine.shape[0])
    return {
        "threshold": float(threshold),
        "n_pairs_cross_group": int(n_pairs),
        "count_method": method,
        "n_pairs_from_histogram": int(binned),
        "bin_width": bin_width,
        "share_pairs": float(n_pairs / total_pairs) if total_pairs else None,
        "n_captions_hardest_above": n_hardest_above,
        "share_captions_hardest_above": float(n_hardest_above / n_captions) if n_captions else None,
        "exact": method in ("top_k", "counted"),
    }


def _companions(caption_ids: list[str], index: np.ndarray, cosine: np.ndarray, include_top: bool) -> dict:
    """Parallel lists, already JSON-ready (NaN -> None), built without a per-item walk:
    they hold N x k values, the bulk of a large profile."""
    id_array = np.array(list(caption_ids) + [None], dtype=object)  # index -1 (no companion) -> None

    def ids_of(indices: np.ndarray) -> list:
        return id_array[indices].tolist()

    def cosines_of(values: np.ndarray) -> list:
        rounded = np.round(values, COMPANION_DECIMALS)
        finite = np.isfinite(rounded)
        if finite.all():
            return rounded.tolist()
        return np.where(finite, rounded, None).tolist()

    section = {
        "caption_id": list(caption_ids),
        "hardest_id": ids_of(index[:, 0]) if index.size else [None] * len(caption_ids),
        "hardest_cosine": cosines_of(cosine[:, 0]) if cosine.size else [None] * len(caption_ids),
        "top_k": int(index.shape[1]) if index.ndim == 2 else 0,
    }
    if include_top:
        section["top_ids"] = ids_of(index)
        section["top_cosines"] = cosines_of(cosine)
    return section


def groups_digest(captions) -> str:
    """sha256 over the captions' group (image) ids in order: with the texts digest, the identity of
    the grouping that the gamma and near-duplicate sections count by."""
    from capgeo.captions.model import texts_sha256

    return texts_sha256(captions.groups)


def summarize_dataset(captions) -> dict:
    """The ``dataset`` section: the captions engineer's summary when available."""
    try:
        from capgeo.captions import summarize_captions
    except ImportError:
        summarize_captions = None
    if summarize_captions is not None:
        summary = dict(summarize_captions(captions))
    else:
        summary = {}
    sizes = np.bincount(np.asarray(captions.group_codes)) if len(captions) else np.zeros(0, dtype=np.int64)
    summary.setdefault("source", str(captions.source))
    summary.setdefault("format", captions.format)
    summary.setdefault("fingerprint", _fingerprint(captions))
    summary.setdefault("texts_digest", captions.texts_digest())
    summary.setdefault("groups_digest", groups_digest(captions))
    summary.setdefault("n_captions", len(captions))
    summary.setdefault("n_groups", int(captions.n_groups))
    summary.setdefault("captions_per_group", {
        "min": int(sizes.min()) if sizes.size else 0,
        "max": int(sizes.max()) if sizes.size else 0,
        "mean": float(sizes.mean()) if sizes.size else 0.0,
    })
    summary.setdefault("skipped", [
        {"reason": item.reason, "count": int(item.count), "examples": list(item.examples)} for item in captions.skipped
    ])
    return summary


def _fingerprint(captions) -> str | None:
    try:
        return captions.fingerprint
    except OSError:
        # built in memory (no file behind it): the texts identify it instead
        return None


def summarize_lengths(embeddings) -> dict:
    """The ``lengths`` section from the untruncated token counts."""
    counts = np.asarray(embeddings.token_counts, dtype=np.int64)
    context_length = int(embeddings.info.context_length)
    max_tokens = int(embeddings.max_tokens)
    known = counts.size > 0 and bool(np.all(counts >= 0))
    if not known:
        # precomputed vectors: no tokenizer, so no lengths
        return {"known": False, "n": int(counts.size), "mean": None, "median": None, "p95": None, "p99": None,
                "min": None, "max": None, "context_length": context_length, "max_tokens": max_tokens,
                "n_truncated": None, "share_truncated": None, "histogram": None}
    longest = int(counts.max())
    width = _nice_width(longest + 1, LENGTH_BINS)
    edges = np.arange(0, longest + width + 1, width)
    if edges[-1] <= longest:
        edges = np.append(edges, edges[-1] + width)
    histogram, _ = np.histogram(counts, bins=edges)
    n_truncated = int(np.count_nonzero(counts > max_tokens))
    return {
        "known": True,
        "n": int(counts.size),
        "mean": float(counts.mean()),
        "median": float(np.median(counts)),
        "p95": float(np.quantile(counts, 0.95)),
        "p99": float(np.quantile(counts, 0.99)),
        "min": int(counts.min()),
        "max": longest,
        "context_length": context_length,
        "max_tokens": max_tokens,
        "n_truncated": n_truncated,
        "share_truncated": n_truncated / int(counts.size),
        "histogram": {"edges": edges.astype(int).tolist(), "counts": histogram.astype(int).tolist()},
    }


def _nice_width(span: int, target_bins: int) -> int:
    """Smallest width of 1, 2, 5 x 10^k giving at most ``target_bins`` bins over ``span``."""
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            width = step * magnitude
            if math.ceil(span / width) <= target_bins:
                return width
        magnitude *= 10


_PLAIN_KINDS = frozenset((str, int, bool, type(None)))


def _plain_list(values):
    """``values`` as to_json_ready returns them when they hold only plain values and finite floats
    (or lists of them, as a profile's N companion lists are), in C-level steps; else None."""
    kinds = set(map(type, values))
    if kinds - {float} <= _PLAIN_KINDS:
        return list(values) if _all_finite(values, kinds) else None
    if kinds == {list} or kinds == {tuple}:
        inner = set(map(type, itertools.chain.from_iterable(values)))
        if inner - {float} <= _PLAIN_KINDS and _all_finite(itertools.chain.from_iterable(values), inner):
            return list(map(list, values))
    return None


def _all_finite(values, kinds) -> bool:
    """Is every float of ``values`` (whose types are ``kinds``) finite?"""
    if float not in kinds:
        return True
    floats = values if kinds == {float} else (value for value in values if type(value) is float)
    return all(map(math.isfinite, floats))


def to_json_ready(value):
    """Recursively turn numpy scalars/arrays into Python values and NaN/inf into None."""
    if isinstance(value, dict):
        return {str(key): to_json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        plain = _plain_list(value)
        if plain is not None:
            return plain
        return [to_json_ready(item) for item in value]
    if isinstance(value, np.ndarray):
        return to_json_ready(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value
