"""Option checks that need no vectors, run by the library (capgeo.pipeline) before every encoding.

Encoding is the slow step (seconds to minutes), so anything that can be
rejected without vectors is rejected first, by one function per concern, so
that every command words the same mistake the same way. Batch sizes are the
batch-size policy's (not here).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

from capgeo.errors import CapgeoError

#: bounds on counts that otherwise run until killed; each with why it is enough
MAX_N_BATCHES = 100_000
MAX_TOP_K = 1_000
MAX_SAMPLED_PAIRS = 50_000_000


def check_has_negatives(captions, group_option: bool = True) -> None:
    """A dataset whose captions all describe one image has no negatives to measure. ``group_option``:
    the command takes --group-column (every command that reads a dataset does; a library caller may not)."""
    if int(captions.n_groups) < 2:
        advice = ("give --group-column if another column names the image" if group_option else
                  "profile it with `capgeo profile --group-column COLUMN` if another column names the image")
        raise CapgeoError(f"{captions.source}: all {len(captions)} captions belong to one group (image): "
                          f"there are no negatives (captions of different images); {advice}")


def pair_threshold_problem(value: float) -> str | None:
    """What is wrong with a threshold on pair cosines (dupes, profile's near-duplicates, truncation),
    or None: it must be a cosine the float32 pass can reach, -1 to MAX_PAIR_THRESHOLD."""
    from capgeo.defaults import MAX_PAIR_THRESHOLD

    if not -1.0 <= value <= 1.0:  # (NaN fails this too)
        return f"expected a cosine between -1 and 1, got {value}"
    if value > MAX_PAIR_THRESHOLD:
        return (f"{value:g} is above {MAX_PAIR_THRESHOLD}: cosines are float32 products, and two identical vectors' "
                f"falls up to about 1e-6 below 1, so no pair would reach it; use {MAX_PAIR_THRESHOLD} for identical "
                "embeddings (identical texts are counted apart, as exact duplicates)")
    return None


def check_pair_threshold(value: float, name: str = "threshold") -> None:
    problem = pair_threshold_problem(value)
    if problem is not None:
        raise CapgeoError(f"{name}: {problem}")


def check_bucket_edges(edges: Sequence[float] | None, option: str = "--buckets") -> tuple[float, ...] | None:
    """Strictly ascending cosines in [-1, 1]; None means the command's default."""
    if edges is None:
        return None
    from capgeo.geometry.inbatch import check_edges

    return check_edges(edges, what=option)


def check_quantile_levels(levels: Sequence[float] | None,
                          option: str = "--relative-quantiles") -> tuple[float, ...] | None:
    """Strictly ascending quantile levels strictly between 0 and 1."""
    if levels is None:
        return None
    values = tuple(float(level) for level in levels)
    if not values or any(not 0 < q < 1 for q in values) or any(b <= a for a, b in zip(values, values[1:])):
        raise CapgeoError(f"{option}: expected strictly ascending levels between 0 and 1 (exclusive), "
                          f"e.g. 0.5,0.9,0.99, got {list(values)}")
    return values


def check_counts(n_batches: int | None = None, top_k: int | None = None, sampled_pairs: int | None = None,
                 negatives: int | None = None) -> None:
    """Bounds on the counts that can run away (time and memory grow with them)."""
    bounds = (  # option, value, least (a sampled mean's error needs two draws), most, why the most is enough
        ("--n-batches", n_batches, 1, MAX_N_BATCHES,
         "batch shares are then already within about +-0.3% (1/sqrt(n)); memory grows with n x batch size"),
        ("--top-k", top_k, 1, MAX_TOP_K, "memory grows as captions x k (12 bytes each)"),
        ("-k/--negatives", negatives, 1, MAX_TOP_K, "memory and the rows written grow as captions x k"),
        ("--sampled-pairs", sampled_pairs, 2, MAX_SAMPLED_PAIRS,
         f"every share is then within +-{math.sqrt(math.log(40) / (2 * MAX_SAMPLED_PAIRS)):.5f} at 95%; "
         "memory grows by 16 bytes a pair"),
    )
    for option, value, least, bound, why in bounds:
        if value is None:
            continue
        if int(value) < least:
            raise CapgeoError(f"{option}: expected at least {least}, got {value}")
        if int(value) > bound:
            raise CapgeoError(f"{option}: expected at most {bound:,}, got {int(value):,} ({why})")


def check_cache_folder(cache_dir: str | os.PathLike | None, use_cache: bool = True) -> None:
    """The embedding cache must be writable before encoding starts, not after."""
    if not use_cache:
        return
    from capgeo.encoders.cache import CACHE_REMEDY, default_cache_dir

    if cache_dir is not None and not str(cache_dir).strip():
        raise CapgeoError(f"--cache-dir {str(cache_dir)!r}: expected a folder (leave the option out for the default "
                          "cache)")
    given = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    source = "--cache-dir" if cache_dir else ("CAPGEO_CACHE" if os.environ.get("CAPGEO_CACHE") else "default")
    folder, seen = given, set()
    while not folder.exists() and folder != folder.parent:
        # a link to a folder not made yet: the cache is made where it leads, so look there (once: links in a loop)
        followed = Path(os.path.realpath(folder)) if folder.is_symlink() else folder.parent
        if followed in seen:
            raise CapgeoError(f"cannot write the embedding cache {given} ({source}): its links form a loop; "
                              f"{CACHE_REMEDY}")
        seen.add(followed)
        folder = followed
    if not folder.is_dir():
        raise CapgeoError(f"cannot write the embedding cache {given} ({source}): {folder} is not a folder; "
                          f"{CACHE_REMEDY}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CapgeoError(f"cannot write the embedding cache {given} ({source}): {folder} is not writable; "
                          f"{CACHE_REMEDY}")


def check_faiss() -> None:
    """--companions faiss needs faiss installed: known before hours of encoding, not after."""
    import importlib.util

    if importlib.util.find_spec("faiss") is None:
        raise CapgeoError("approximate companions need faiss: pip install faiss-cpu (or 'capgeo[faiss]')")
