"""Hard-negative export: each caption's K most similar captions of other images within a cosine range.

For losses that train on mined (anchor, negatives) tuples. HN-CLIP itself needs none of
this: its Gbar term weighs the negatives already in the batch.

A negative of an anchor is a caption of another image with ``min_cosine`` <= cosine <
``max_cosine`` that also passes these rules, as sentence-transformers' ``mine_hard_negatives``
applies them (its positives are the other captions of the anchor's image):

- its text is not the text of a caption of the anchor's own image (that would be a positive
  said again: a false negative);
- its text is not already in the list (a text is listed once, at its hardest);
- at most ``per_image`` of the list come from one image (None: no limit);
- with ``margin`` M, its cosine is at most the anchor's lowest positive cosine minus M
  (``absolute_margin``); an anchor alone in its image has no positive and no such bound.

Texts compare as exact duplicates do (NFKC, casefold, whitespace collapsed:
:func:`capgeo.captions.exact_duplicates.normalize_text`).

The candidates are the pairwise pass's top-k companion lists (scanned with a slack of
columns beyond K). A caption whose list is full yet yields fewer than K negatives (candidates
above the range or refused by the rules took the slots) is re-searched exactly, in blocks,
with longer lists until K are found or none is left, so every row is exact. Order: cosine
descending, equal cosines by the lower caption row, as in pairwise.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capgeo.defaults import (
    FIXED_BLOCK_SIZE,
    NEGATIVE_SUFFIXES,
    NEGATIVES_K,
    NEGATIVES_MAX_COSINE,
    NEGATIVES_MIN_COSINE,
    NEGATIVES_PER_IMAGE,
)
from capgeo.errors import CapgeoError

DEFAULT_K = NEGATIVES_K
#: cosine at or above which a companion is treated as a false negative (an exact or
#: near-exact duplicate: the same scene), the near-duplicate threshold of `capgeo profile`
DEFAULT_MAX_COSINE = NEGATIVES_MAX_COSINE
DEFAULT_MIN_COSINE = NEGATIVES_MIN_COSINE
DEFAULT_PER_IMAGE = NEGATIVES_PER_IMAGE
#: extra companions scanned per caption so that a few candidates above the range or refused by
#: the rules rarely force a re-search (results do not depend on it)
SCAN_SLACK = 10
QUANTILE_LEVELS = (0.01, 0.1, 0.5, 0.9, 0.99)


@dataclass(frozen=True)
class NegativeOptions:
    """Which captions are an anchor's negatives (the rules of the module docstring): at most ``k``,
    with ``min_cosine`` <= cosine < ``max_cosine``, at most ``per_image`` from one image (None: no
    limit), with ``margin`` at most the anchor's lowest positive cosine minus it (None: no margin)."""

    k: int = DEFAULT_K
    min_cosine: float = DEFAULT_MIN_COSINE
    max_cosine: float = DEFAULT_MAX_COSINE
    per_image: int | None = DEFAULT_PER_IMAGE
    margin: float | None = None

    def check(self) -> None:
        """CapgeoError naming the option out of range."""
        check_range(self.min_cosine, self.max_cosine)
        check_rules(self.per_image, self.margin)
        if self.k < 1:
            raise CapgeoError(f"-k: expected at least 1 negative per caption, got {self.k}")


@dataclass(frozen=True)
class NegativeCosines:
    """Anchor-negative cosine at one negative ``rank`` ("1" = the hardest, "all" = every rank): how
    many, their mean and quantiles (``(name, value)`` pairs, "p1" ... "p99"); None where there are none."""

    rank: str
    count: int
    mean: float | None
    quantiles: tuple[tuple[str, float | None], ...]

    def to_dict(self) -> dict:
        return {"rank": self.rank, "count": self.count, "mean": self.mean, "quantiles": dict(self.quantiles)}


@dataclass(frozen=True)
class NegativesExport:
    """What `capgeo negatives` wrote to ``output`` (docs/negatives.md): ``n_negatives`` negatives for
    ``n_anchors`` captions under ``rules`` (its ``k`` capped at the most any caption can have),
    ``n_anchors_short`` of them with fewer than ``k``, and the cosines per rank."""

    output: str
    n_anchors: int
    rules: NegativeOptions
    n_anchors_short: int
    n_negatives: int
    encoder: object | None            # the EncoderInfo of the embeddings, None for bare vectors
    cosines: tuple[NegativeCosines, ...]

    SCHEMA = "capgeo.negatives/1"

    def to_dict(self) -> dict:
        """The `capgeo negatives --json` object (``capgeo.negatives/1``)."""
        rules = self.rules
        return {
            "schema": self.SCHEMA, "output": self.output, "n_anchors": self.n_anchors,
            "k": rules.k, "min_cosine": rules.min_cosine, "max_cosine": rules.max_cosine,
            "per_image": rules.per_image, "margin": rules.margin,
            "n_anchors_short": self.n_anchors_short, "n_negatives": self.n_negatives,
            "encoder": None if self.encoder is None else self.encoder.to_dict(),
            "cosines": [entry.to_dict() for entry in self.cosines],
        }


def check_range(min_cosine: float, max_cosine: float) -> None:
    for name, value in (("--min-cosine", min_cosine), ("--max-cosine", max_cosine)):
        if not -1.0 <= value <= 1.0:
            raise CapgeoError(f"{name}: expected a cosine between -1 and 1, got {value}")
    if min_cosine >= max_cosine:
        raise CapgeoError(f"--min-cosine ({min_cosine:g}) must be below --max-cosine ({max_cosine:g})")


def check_rules(per_image: int | None, margin: float | None) -> None:
    if per_image is not None and per_image < 1:
        raise CapgeoError(f"--per-image: expected at least 1 negative per image, got {per_image}")
    if margin is not None and not (np.isfinite(margin) and -2.0 <= margin <= 2.0):
        raise CapgeoError(f"--margin: expected a cosine difference between -2 and 2, got {margin}")


def _in_range(cosine: np.ndarray, min_cosine: float, max_cosine: float) -> np.ndarray:
    """``cosine`` clipped to [-1, 1] by the caller: float32 products of antipodal vectors reach
    -1.0000001, which the default floor of -1 (no floor) left out."""
    return np.isfinite(cosine) & (cosine >= min_cosine) & (cosine < max_cosine)


def text_codes(texts) -> np.ndarray:
    """One integer per caption, equal for captions whose texts are exact duplicates."""
    import polars as pl

    from capgeo.captions.exact_duplicates import normalized_texts

    keys = normalized_texts(pl.Series("text", list(texts), dtype=pl.String)).to_numpy()
    return np.unique(keys, return_inverse=True)[1].astype(np.int64).ravel()


def lowest_positive_cosine(vectors: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Each caption's lowest cosine with another caption of its image (float32, as the candidates'
    cosines); +inf for a caption alone in its image (no positive: no margin bound)."""
    out = np.full(len(codes), np.inf, dtype=np.float32)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0, True])
    for start, stop in zip(bounds[:-1], bounds[1:]):
        if stop - start < 2:
            continue
        members = order[start:stop]
        similarity = np.clip(vectors[members] @ vectors[members].T, -1.0, 1.0)
        np.fill_diagonal(similarity, np.inf)
        out[members] = similarity.min(axis=1)
    return out


class _Rules:
    """What a candidate must pass besides the cosine range and another image (module docstring)."""

    def __init__(self, codes, texts, per_image, margin, vectors):
        self.codes = codes
        self.per_image = per_image
        self.texts = None if texts is None else text_codes(texts)
        if self.texts is not None:
            n_texts = int(self.texts.max()) + 1 if len(self.texts) else 1
            self.n_texts = n_texts
            # (image, text) of every caption: a candidate whose text its anchor's image holds is refused
            self.own = np.unique(codes.astype(np.int64) * n_texts + self.texts)
        self.ceiling = None if margin is None else lowest_positive_cosine(vectors, codes) - np.float32(margin)

    def select(self, anchors, index, cosine, k, min_cosine, max_cosine):
        """(index, cosine) (len(anchors), k) of the negatives among sorted candidate lists, and
        how many each anchor got."""
        valid = index >= 0
        safe = np.where(valid, index, 0)
        keep = valid & _in_range(cosine, min_cosine, max_cosine) & (self.codes[safe] != self.codes[anchors][:, None])
        if self.ceiling is not None:
            keep &= cosine <= self.ceiling[anchors][:, None]
        if self.texts is not None:
            keep &= ~np.isin(self.codes[anchors][:, None].astype(np.int64) * self.n_texts + self.texts[safe], self.own)
        out_index = np.full((len(anchors), k), -1, dtype=np.int64)
        out_cosine = np.full((len(anchors), k), np.nan, dtype=np.float32)
        if self.texts is None and self.per_image is None:  # no rule ties one candidate to another
            rank = np.cumsum(keep, axis=1) - 1
            rows, columns = np.nonzero(keep & (rank < k))
            out_index[rows, rank[rows, columns]] = index[rows, columns]
            out_cosine[rows, rank[rows, columns]] = cosine[rows, columns]
            return out_index, out_cosine, np.minimum(keep.sum(axis=1), k)
        # one column at a time, for every anchor at once: a candidate is taken when it passes and
        # neither its text nor (per_image times) its image is among those already taken; one that
        # is refused takes nothing
        taken_texts = np.full((len(anchors), k), -1, dtype=np.int64)
        taken_groups = np.full((len(anchors), k), -1, dtype=np.int64)
        found = np.zeros(len(anchors), dtype=np.int64)
        for column in range(index.shape[1]):
            passes = keep[:, column] & (found < k)
            if not passes.any():
                if (found >= k).all():
                    break
                continue
            group = self.codes[safe[:, column]]
            if self.texts is not None:
                text = self.texts[safe[:, column]]
                passes &= ~(taken_texts == text[:, None]).any(axis=1)
            if self.per_image is not None:
                passes &= (taken_groups == group[:, None]).sum(axis=1) < self.per_image
            rows = np.flatnonzero(passes)
            slots = found[rows]
            out_index[rows, slots] = index[rows, column]
            out_cosine[rows, slots] = cosine[rows, column]
            if self.texts is not None:
                taken_texts[rows, slots] = text[rows]
            taken_groups[rows, slots] = group[rows]
            found[rows] += 1
        return out_index, out_cosine, found


def most_negatives(group_codes, per_image: int | None) -> int:
    """The most negatives any caption can have: the captions of the other images, at most
    ``per_image`` of each (a caption of the smallest image has the most)."""
    sizes = np.unique(np.asarray(group_codes), return_counts=True)[1]
    if per_image is not None:
        sizes = np.minimum(sizes, per_image)
    return int(sizes.sum() - sizes.min())


def hard_negatives(vectors: np.ndarray, group_codes: np.ndarray, rules: NegativeOptions | None = None, *,
                   texts=None, block_size: int = FIXED_BLOCK_SIZE, progress: bool | None = None,
                   device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(index (N, k) int64, cosine (N, k) float32): each caption's k hardest negatives (captions
    of other groups with min_cosine <= cosine < max_cosine that pass the rules of the module
    docstring; ``rules``: :class:`NegativeOptions`, default the defaults; the text rules need
    ``texts``); -1 / NaN where fewer exist. ``k`` is capped at the most any caption can have
    (:func:`most_negatives`). ``device``: where the pass runs."""
    from capgeo.geometry.pairwise import scan_pairs
    from capgeo.geometry.row_norms import row_norms

    rules = rules or NegativeOptions()
    rules.check()
    k, min_cosine, max_cosine, per_image = rules.k, rules.min_cosine, rules.max_cosine, rules.per_image
    vectors = np.asarray(vectors, dtype=np.float32)
    vectors = vectors / row_norms(vectors)
    codes = np.asarray(group_codes)
    n = vectors.shape[0]
    if texts is not None and len(texts) != n:
        raise CapgeoError(f"texts: {len(texts)} for {n} vectors; expected one per vector")
    k = max(1, min(k, most_negatives(codes, per_image)))
    selection = _Rules(codes, texts, per_image, rules.margin, vectors)
    # the rules refuse some companions: more columns, so that a re-search stays rare
    columns = k + SCAN_SLACK if per_image is None and texts is None else 2 * k + SCAN_SLACK
    scan = scan_pairs(vectors, codes, top_k=max(1, min(columns, n - 1)), block_size=block_size,
                      histograms=False, progress=progress, device=device)
    index = np.asarray(scan.companion_index)
    cosine = np.clip(np.asarray(scan.companion_cosine, dtype=np.float32), -1.0, 1.0)
    everyone = np.arange(n)
    out_index, out_cosine, found = selection.select(everyone, index, cosine, k, min_cosine, max_cosine)
    # a full list whose last entry is still >= min_cosine may hide negatives beyond it
    short = everyone[_may_hide_more(found, k, index, cosine, min_cosine)]
    length = 4 * index.shape[1]
    while short.size:
        still = []
        for start in range(0, short.size, 256):
            rows = short[start:start + 256]
            listed_index, listed_cosine = _search_in_range(vectors, codes, rows, min(length, n), min_cosine,
                                                           max_cosine, block_size)
            out_index[rows], out_cosine[rows], found = selection.select(rows, listed_index, listed_cosine, k,
                                                                        min_cosine, max_cosine)
            if length < n:
                still.append(rows[_may_hide_more(found, k, listed_index, listed_cosine, min_cosine)])
        short = np.concatenate(still) if still else short[:0]
        length *= 4
    return out_index, out_cosine


def _may_hide_more(found, k, index, cosine, min_cosine) -> np.ndarray:
    """Rows with fewer than k negatives whose candidate list was full and still in range at its end."""
    last = cosine[:, -1]
    return (found < k) & (index[:, -1] >= 0) & np.isfinite(last) & (last >= min_cosine)


def _search_in_range(vectors, codes, rows, k, min_cosine, max_cosine, block_size):
    """Exact top-k in-range other-group companions of ``rows``, blockwise."""
    best_cosine = np.full((len(rows), 0), -np.inf, dtype=np.float32)
    best_index = np.full((len(rows), 0), -1, dtype=np.int64)
    for start in range(0, vectors.shape[0], block_size):
        columns = np.arange(start, min(start + block_size, vectors.shape[0]))
        similarity = np.clip(vectors[rows] @ vectors[columns].T, -1.0, 1.0)
        allowed = _in_range(similarity, min_cosine, max_cosine) & (codes[rows][:, None] != codes[columns][None, :])
        similarity = np.where(allowed, similarity, -np.inf).astype(np.float32)
        merged_cosine = np.concatenate([best_cosine, similarity], axis=1)
        merged_index = np.concatenate([best_index, np.broadcast_to(columns, similarity.shape)], axis=1)
        # stable: running entries (lower rows) stay ahead of equal cosines from this block
        order = np.argsort(-merged_cosine, axis=1, kind="stable")[:, :k]
        best_cosine = np.take_along_axis(merged_cosine, order, axis=1)
        best_index = np.take_along_axis(merged_index, order, axis=1)
    missing = ~np.isfinite(best_cosine)
    best_index[missing] = -1
    best_cosine[missing] = np.nan
    pad = k - best_cosine.shape[1]
    if pad > 0:
        best_index = np.pad(best_index, ((0, 0), (0, pad)), constant_values=-1)
        best_cosine = np.pad(best_cosine, ((0, 0), (0, pad)), constant_values=np.nan)
    return best_index, best_cosine


def negative_rows(captions, index: np.ndarray, cosine: np.ndarray) -> list[dict]:
    """One row per anchor caption, its negatives hardest first (columns in docs/negatives.md)."""
    ids, groups, texts = captions.ids, captions.groups, captions.texts
    rows = []
    for anchor in range(len(ids)):
        found = index[anchor] >= 0
        negatives = index[anchor][found]
        rows.append({
            "anchor_id": ids[anchor], "anchor_group": groups[anchor], "anchor_text": texts[anchor],
            "negative_ids": [ids[j] for j in negatives], "negative_groups": [groups[j] for j in negatives],
            "negative_texts": [texts[j] for j in negatives],
            "negative_cosines": [float(c) for c in cosine[anchor][found]],
        })
    return rows


def cosine_quantiles(cosine: np.ndarray) -> tuple[NegativeCosines, ...]:
    """Quantiles of anchor-negative cosine per negative rank (1 = hardest) and over all."""
    summaries = []
    for label, values in [(str(rank + 1), cosine[:, rank]) for rank in range(cosine.shape[1])] + [("all", cosine)]:
        values = np.asarray(values, dtype=np.float64).ravel()
        values = values[np.isfinite(values)]
        summaries.append(NegativeCosines(
            rank=label, count=int(values.size), mean=float(values.mean()) if values.size else None,
            quantiles=tuple((f"p{round(level * 100):g}", float(np.quantile(values, level)) if values.size else None)
                            for level in QUANTILE_LEVELS)))
    return tuple(summaries)


def export_negatives(captions, embeddings, output: str, *, rules: NegativeOptions | None = None,
                     block_size: int = FIXED_BLOCK_SIZE, progress: bool | None = None, device: str | None = None,
                     force: bool = False) -> NegativesExport:
    """Mine hard negatives under ``rules`` (:class:`NegativeOptions`, default the defaults), write
    them to ``output`` (JSONL or Parquet by suffix, atomically), and return the summary (`capgeo
    negatives`, docs/negatives.md). ``output`` never replaces the dataset, nor, unless ``force``, an
    existing file capgeo did not write."""
    import polars as pl

    from capgeo.findings.duplicates import write_rows
    from capgeo.findings.per_caption import table_format

    fmt = table_format(output, NEGATIVE_SUFFIXES)
    # as the command does (the CLI checks this before encoding): never over the dataset being mined,
    # nor over a user's file
    from capgeo.paths import check_outputs

    check_outputs({"DATA": getattr(captions, "source", None)}, {"output": output}, force=force)
    rules = rules or NegativeOptions()
    index, cosine = hard_negatives(embeddings.vectors, captions.group_codes, rules, texts=captions.texts,
                                   block_size=block_size, progress=progress, device=device)
    k = index.shape[1]  # as hard_negatives capped it
    rows = negative_rows(captions, index, cosine)
    schema = {"anchor_id": pl.String, "anchor_group": pl.String, "anchor_text": pl.String,
              "negative_ids": pl.List(pl.String), "negative_groups": pl.List(pl.String),
              "negative_texts": pl.List(pl.String), "negative_cosines": pl.List(pl.Float64)}
    write_rows(rows, fmt, output, columns=tuple(schema), parquet_schema=schema)
    found = (index >= 0).sum(axis=1)
    written = NegativeOptions(int(k), float(rules.min_cosine), float(rules.max_cosine), rules.per_image,
                              None if rules.margin is None else float(rules.margin))
    return NegativesExport(output=str(output), n_anchors=len(rows), rules=written,
                           n_anchors_short=int((found < k).sum()), n_negatives=int(found.sum()),
                           encoder=embeddings.info if hasattr(embeddings, "info") else None,
                           cosines=cosine_quantiles(cosine))
