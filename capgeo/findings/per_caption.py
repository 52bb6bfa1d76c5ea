"""One row per caption: what the profile found about each caption, to join back to the user's data.

Everything here is read off what the profile's pass already computed (each caption's
top-k companions) plus the encoder's token counts; near-duplicate sets are the
components of `capgeo dupes-sets` at the profile's threshold, found from
the same companion lists (crowded captions re-searched exactly).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl

from capgeo.defaults import NEAR_DUPLICATE_THRESHOLD, PAIR_BLOCK_SIZE, PER_CAPTION_SUFFIXES
from capgeo.errors import CapgeoError
from capgeo.captions.exact_duplicates import normalized_texts

#: row file formats by suffix
TABLE_SUFFIXES = PER_CAPTION_SUFFIXES
#: the columns and their Parquet types
SCHEMA = {
    "caption_id": pl.String, "group_id": pl.String, "token_count": pl.Int64, "truncated": pl.Boolean,
    "hardest_id": pl.String, "hardest_cosine": pl.Float64, "top_ids": pl.List(pl.String),
    "top_cosines": pl.List(pl.Float64), "exact_duplicate_of": pl.String, "near_duplicate_set": pl.Int64,
    "hardness_quantile": pl.Float64,
}
COLUMNS = tuple(SCHEMA)


def table_format(path: str, suffixes: dict[str, str] = TABLE_SUFFIXES) -> str:
    """The row format a file name asks for, by its suffix."""
    fmt = suffixes.get(Path(path).suffix.lower())
    if fmt is None:
        raise CapgeoError(f"{path}: unknown file type; expected a name ending in {', '.join(suffixes)}")
    return fmt


def companion_scan(caption_ids, companions: dict) -> SimpleNamespace:
    """The profile's JSON companion lists back as index/cosine arrays (-1 / NaN where missing)."""
    if "top_ids" not in companions:
        raise CapgeoError("the profile has no per-caption companion lists (computed without them)")
    position = {caption_id: row for row, caption_id in enumerate(caption_ids)}
    index = np.array([[-1 if c is None else position[c] for c in row] for row in companions["top_ids"]],
                     dtype=np.int64).reshape(len(caption_ids), -1)
    cosine = np.array([[np.nan if c is None else c for c in row] for row in companions["top_cosines"]],
                      dtype=np.float64).reshape(len(caption_ids), -1)
    return SimpleNamespace(companion_index=index, companion_cosine=cosine)


def exact_duplicate_of(texts, caption_ids) -> list:
    """For each caption, the id of the first caption (in dataset order) with the same
    normalised text, or None when it is that first one or has no duplicate."""
    keys = normalized_texts(pl.Series("text", list(texts), dtype=pl.String))
    table = (pl.DataFrame({"key": keys, "caption_id": list(caption_ids)},
                          schema={"key": pl.String, "caption_id": pl.String})
             .with_columns(first=pl.col("caption_id").first().over("key")))
    return table.select(pl.when(pl.col("first") != pl.col("caption_id")).then(pl.col("first"))).to_series().to_list()


def hardness_quantiles(hardest: np.ndarray) -> np.ndarray:
    """Share of captions whose hardest-companion cosine is at or below each caption's
    (1.0 = the hardest caption of the dataset); NaN where a caption has no companion."""
    valid = np.isfinite(hardest)
    ranked = np.sort(hardest[valid])
    out = np.full(hardest.shape, np.nan)
    out[valid] = np.searchsorted(ranked, hardest[valid], side="right") / max(ranked.size, 1)
    return out


def per_caption_rows(captions, embeddings, companions: dict, threshold: float, *,
                     block_size: int | None = PAIR_BLOCK_SIZE) -> list[dict]:
    """The per-caption rows (columns :data:`COLUMNS`, described in docs/profile-schema.md)."""
    from capgeo.findings.duplicates import near_duplicate_components

    ids, groups = captions.ids, captions.groups
    scan = companion_scan(ids, companions)
    set_of = np.zeros(len(ids), dtype=np.int64)
    if len(ids) > 1:
        components = near_duplicate_components(captions, embeddings.vectors, threshold, scan=scan,
                                               top_k=scan.companion_index.shape[1], block_size=block_size)
        for number, component in enumerate(components, start=1):
            set_of[list(component.members)] = number
    counts = np.asarray(embeddings.token_counts, dtype=np.int64)
    known = counts.size == len(ids) and bool(np.all(counts >= 0))
    hardest = scan.companion_cosine[:, 0] if scan.companion_cosine.size else np.full(len(ids), np.nan)
    quantiles = hardness_quantiles(hardest)
    duplicate_of = exact_duplicate_of(captions.texts, ids)
    top_ids, top_cosines = _companion_lists(ids, scan.companion_index, scan.companion_cosine)
    # whole columns as Python values first: one conversion each, not one per row and field
    token_counts = counts.tolist() if known else [None] * len(ids)
    truncated = (counts > embeddings.max_tokens).tolist() if known else [None] * len(ids)
    sets = [number or None for number in set_of.tolist()]
    quantile_values = np.where(np.isfinite(quantiles), quantiles, np.nan).tolist()
    return [{
        "caption_id": caption_id, "group_id": group_id, "token_count": token_count, "truncated": cut,
        "hardest_id": row_ids[0] if row_ids else None,
        "hardest_cosine": row_cosines[0] if row_cosines else None,
        "top_ids": row_ids, "top_cosines": row_cosines,
        "exact_duplicate_of": duplicate, "near_duplicate_set": number,
        "hardness_quantile": None if quantile != quantile else quantile,   # NaN: no companion
    } for caption_id, group_id, token_count, cut, row_ids, row_cosines, duplicate, number, quantile
        in zip(ids, groups, token_counts, truncated, top_ids, top_cosines, duplicate_of, sets, quantile_values)]


def _companion_lists(ids, index: np.ndarray, cosine: np.ndarray) -> tuple[list, list]:
    """Each caption's companion ids and cosines as lists, the missing ones (NaN) left out."""
    n = len(ids)
    if index.size == 0:
        return [[] for _ in range(n)], [[] for _ in range(n)]
    finite = np.isfinite(cosine)
    id_array = np.array(list(ids), dtype=object)
    complete = finite.all(axis=1)
    top_ids = id_array[np.where(finite, index, 0)].tolist()
    top_cosines = cosine.tolist()
    for row in np.flatnonzero(~complete).tolist():   # rows with fewer than k companions
        keep = finite[row]
        top_ids[row] = id_array[index[row][keep]].tolist()
        top_cosines[row] = cosine[row][keep].tolist()
    return top_ids, top_cosines


def profile_rows(captions, embeddings, profile) -> list[dict]:
    """The per-caption rows of a profile (typed, or its dict): its companion lists, threshold and tile size."""
    if not isinstance(profile, dict):
        profile = {"companions": profile.companions.to_dict(), "options": profile.options.to_dict()}
    options = profile.get("options") or {}
    return per_caption_rows(captions, embeddings, profile["companions"],
                            float(options.get("near_duplicate_threshold", NEAR_DUPLICATE_THRESHOLD)),
                            block_size=options.get("block_size_used") or options.get("block_size"))


def write_per_caption(captions, embeddings, profile, output: str) -> int:
    """Write the per-caption rows of a profile to ``output`` (format by suffix, atomically).
    Returns the number of rows."""
    from capgeo.findings.duplicates import write_rows

    fmt = table_format(output)
    rows = profile_rows(captions, embeddings, profile)
    write_rows(rows, fmt, output, columns=COLUMNS, parquet_schema=SCHEMA)
    return len(rows)


def per_caption_frame(captions, embeddings, profile) -> pl.DataFrame:
    """The per-caption rows of a profile (typed or dict) as a polars DataFrame of :data:`SCHEMA`."""
    return pl.DataFrame(profile_rows(captions, embeddings, profile), schema=SCHEMA)
