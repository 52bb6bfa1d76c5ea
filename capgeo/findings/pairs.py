"""The pairs, not only the captions: image-text alignment, retrieval at initialisation, cross-modal
false negatives, saturation at the training batch, image twins (docs/pairs.md).

A *pair* is one caption m with its own image c(m) (the dataset's row). S[g, k] is the cosine of
image g and caption k; the pair's *alignment* is a_m = S[c(m), m]. Cosines within TIE (1e-12) of
each other compare as equal.

Every count is exact: the pass runs over blocks of captions against every image, in float64 from
the float32 vectors, and keeps per block only what its counts need (the image-caption cosines at or
above each image's lowest own alignment less delta), so memory stays bounded at any N.

- Retrieval at initialisation. Text -> image: caption m is a hit at K when fewer than K other
  images score strictly higher for it than its own. Image -> text: image g is a hit at K when fewer
  than K captions of other images score strictly higher than g's best own caption (every caption of
  g counts as a hit). Ties count for the pair.
- Cross-modal false negatives: a row (pair m, caption k of another image) with
  S[c(m), k] >= a_m - delta. The positive it is compared with is the pair's own caption m: in a
  training batch image c(m) sits beside caption m and caption k would be scored against it. The
  boost HN-CLIP gives such a negative is gamma * Gbar[m, k], Gbar[m, k] the cosine of captions m, k.
- Mismatched pairs: neither direction retrieves the pair at R@5 (at least 5 captions of other
  images beat caption m for its image, and at least 5 other images beat image c(m) for caption m).
"""

from __future__ import annotations

import base64
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import numpy as np

from capgeo.defaults import (IMAGE_TWIN_THRESHOLD, PAIRS_DELTA, PAIRS_LISTED, PAIRS_MAX_EXPORT_ROWS,
                             PAIRS_THUMBNAIL_BYTES)
from capgeo.errors import CapgeoError
from capgeo.findings.gamma import SOLVED_LOSS
from capgeo.findings.result import Result, section
from capgeo.geometry.batch_size import DEFAULT_N_BATCHES
from capgeo.geometry.typed_profile import (Distribution, ImageTwinPair, ImageTwins, PairCaption, PairCard,
                                           PairFalseNegatives, PairGammaSaturation, PairHardestWrong,
                                           PairMismatched, PairNegativeRow, PairRetrieval, Pairs, PairSaturation,
                                           read_only)
from capgeo.images import ImageVectors

#: the K of R@K
RECALL_AT = (1, 5)
#: a pair neither direction finds among this many is mismatched
MISMATCH_RANK = 5
#: image-caption cosines held at once in a block (float64): 32 MB
BLOCK_VALUES = 1 << 22
#: a block's candidates are counted by sorting them unless comparing each involved pair's row of the
#: block costs at most this many times their number
DENSE_FACTOR = 256
#: pair rows compared at once there (float64 values): 2 MB, which stays in the CPU's cache
DENSE_CHUNK_VALUES = 1 << 18
#: two cosines this close are one value: float64 products of the same vectors in matrices of other
#: shapes differ in their last bits (BLAS sums in another order), and a caption written twice under
#: two images must tie with itself whichever product computed it
TIE = 1e-12

SCHEMA_KEYS = ("source", "n_pairs", "n_images", "n_images_missing", "alignment", "alignment_per_image",
               "retrieval", "mismatched", "false_negatives", "saturation", "twins", "thumbnails")


@dataclass(frozen=True)
class PassOptions:
    """What the exact pass (:func:`pair_pass`) counts and keeps; its fields' defaults are the only
    defaults of its keywords."""

    #: a false negative scores within this cosine of the pair's own caption
    delta: float = PAIRS_DELTA
    #: false-negative rows of largest margin kept
    listed: int = PAIRS_LISTED
    #: keep every false-negative row too (for --false-negatives FILE)
    export: bool = False
    max_export_rows: int = PAIRS_MAX_EXPORT_ROWS
    block_values: int = BLOCK_VALUES


@dataclass(frozen=True)
class PairSectionOptions:
    """What the ``pairs`` section computes beside its inputs (:func:`pairs_section`)."""

    #: the headline batch size of the saturation and per-batch findings; None: left out
    batch_size: int | None = None
    n_batches: int | None = None
    seed: int = 0
    #: None: the checkpoint's logit scale, else the paper's
    logit_scale: float | None = None
    #: the headline gamma; None: the paper's 0.5
    gamma: float | None = None
    delta: float = PAIRS_DELTA
    image_threshold: float = IMAGE_TWIN_THRESHOLD
    listed: int = PAIRS_LISTED
    #: write every false-negative row there too (Parquet, CSV or JSONL by suffix)
    false_negatives_output: str | None = None


# ---------------------------------------------------------------- results

#: how retrieval counts ties (the ``retrieval`` part's ``ties``)
RETRIEVAL_TIES = "count for the pair: a hit when fewer than K others score strictly higher"


@dataclass(frozen=True)
class BatchFalseNegatives(Result):
    share_batches: float
    mean_per_batch: float


@dataclass(frozen=True)
class BatchFindings(Result):
    """:func:`batch_findings`: false negatives per batch, and saturation at gamma 0 and the headline gamma."""

    false_negatives: BatchFalseNegatives
    solved_loss: float
    gammas: tuple[PairGammaSaturation, ...]


class _Pairs(NamedTuple):
    """The pairs the section reads (the captions whose image is present), in compact numbering."""

    captions: Any
    kept: np.ndarray           # row of each pair's caption in ``captions``
    text: np.ndarray           # (n, d) its vector
    codes: np.ndarray          # (n,) its image, 0..G-1
    done: "PairPass"
    image_names: list
    image_vectors: np.ndarray  # (G, d)
    gamma: float


# ---------------------------------------------------------------- image vectors

def _checked(images: ImageVectors, n_groups: int, width: int) -> ImageVectors:
    if not isinstance(images, ImageVectors):
        raise CapgeoError(f"image vectors: expected capgeo.images.ImageVectors, got {type(images).__name__}")
    vectors, present = np.asarray(images.vectors), np.asarray(images.present, dtype=bool)
    if vectors.ndim != 2 or vectors.shape != (n_groups, width) or present.shape != (n_groups,):
        raise CapgeoError(f"{images.source}: image vectors {vectors.shape} (present {present.shape}) do not match "
                          f"the dataset's {n_groups} images and the text vectors' width {width}")
    if not np.isfinite(vectors[present]).all():
        raise CapgeoError(f"{images.source}: image vectors contain NaN or infinite values")
    return images


# ---------------------------------------------------------------- counting by rows

def keys_above(key_rows, key_values, query_rows, query_values, n_rows: int, *, ties: bool) -> np.ndarray:
    """For each query (row r, value q): how many keys of row r have a value >= q (``ties``) or > q.

    One sort of keys and queries together by (row, value), queries placed before equal keys when ties
    count and after them when not: the keys after a query in its row are those it counts. Exact:
    values are compared, never rounded into a combined key."""
    n_keys = len(key_rows)
    rows = np.concatenate([key_rows, query_rows])
    values = np.concatenate([key_values, query_values])
    is_key = np.concatenate([np.ones(n_keys, dtype=bool), np.zeros(len(query_rows), dtype=bool)])
    tie_order = is_key if ties else ~is_key
    order = np.lexsort((tie_order, values, rows))
    sorted_key = is_key[order].astype(np.int64)
    keys_before = np.cumsum(sorted_key) - sorted_key
    per_row = np.bincount(np.asarray(key_rows, dtype=np.int64), minlength=n_rows)
    below_row = np.cumsum(per_row) - per_row
    at = np.flatnonzero(~is_key[order])
    query = order[at] - n_keys
    counts = np.empty(len(query_rows), dtype=np.int64)
    q_rows = np.asarray(query_rows, dtype=np.int64)[query]
    counts[query] = per_row[q_rows] - (keys_before[at] - below_row[q_rows])
    return counts


# ---------------------------------------------------------------- the pass

@dataclass
class PairPass:
    """What one blockwise pass over every (image, caption) cosine found; arrays over the pairs (the
    captions whose image is present) and the present images, in compact numbering."""

    alignment: np.ndarray         # (n,) a_m, float64
    text_rank: np.ndarray         # (n,) other images scoring higher than the own one, for caption m
    image_rank: np.ndarray        # (n,) captions of other images scoring higher than m, for image c(m)
    false_negatives: np.ndarray   # (n,) captions k of other images with S[c(m), k] >= a_m - delta
    top_rows: np.ndarray          # (L, 2): pair m, negative caption k, of the largest margins
    top_cosines: np.ndarray       # (L,) S[c(m), k]
    exported: tuple | None        # (pairs, negatives, cosines) of every false-negative row, when asked


def _own_alignment(text: np.ndarray, images: np.ndarray, codes: np.ndarray, block: int) -> np.ndarray:
    """a_m: float64 products of each block of images with its own captions (within TIE of the pass's
    products of the same vectors)."""
    n_images = len(images)
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(n_images + 1))
    out = np.empty(len(codes))
    step = max(1, block // 8)
    for first in range(0, n_images, step):
        last = min(first + step, n_images)
        captions = order[starts[first]:starts[last]]
        product = images[first:last].astype(np.float64) @ text[captions].astype(np.float64).T
        out[captions] = product[codes[captions] - first, np.arange(len(captions))]
    return out


def pair_pass(text: np.ndarray, images: np.ndarray, codes: np.ndarray, options: PassOptions | None = None, *,
              progress: bool | None = None, **fields) -> PairPass:
    """The exact pass: ``text`` (n, d) unit caption vectors, ``images`` (G, d) unit image vectors,
    ``codes`` (n,) each caption's image 0..G-1 (every image holding a caption); ``options`` a
    :class:`PassOptions`, its ``fields`` set by keyword (``delta=0.05``)."""
    from capgeo.progress import progress_bar

    options = dataclasses.replace(options or PassOptions(), **fields)
    delta, listed, export = options.delta, options.listed, options.export
    max_export_rows, block_values = options.max_export_rows, options.block_values

    if not (math.isfinite(delta) and delta >= 0):
        raise CapgeoError(f"--delta: expected a cosine margin of 0 or more, got {delta}")
    text = np.asarray(text, dtype=np.float32)
    codes = np.asarray(codes, dtype=np.int64)
    n, n_images = len(text), len(images)
    images64 = np.asarray(images, dtype=np.float64)
    block = max(16, min(n, block_values // max(n_images, 1)))
    alignment = _own_alignment(text, images, codes, block)
    threshold = alignment - delta - TIE
    lowest = np.full(n_images, np.inf)
    np.minimum.at(lowest, codes, threshold)
    # each image's own captions by threshold, ascending: a candidate (g, v) meets the first few of them
    by_threshold = np.lexsort((threshold, codes))
    image_start = np.searchsorted(codes[by_threshold], np.arange(n_images))
    text_rank = np.zeros(n, dtype=np.int64)
    image_rank = np.zeros(n, dtype=np.int64)
    false_negatives = np.zeros(n, dtype=np.int64)
    exported, n_exported = [], 0
    per_image = np.bincount(codes, minlength=n_images)
    top = _TopRows(alignment, listed)
    with progress_bar("image-text pairs", n, enabled=progress) as bar:
        for start in range(0, n, block):
            stop = min(start + block, n)
            columns = np.arange(start, stop)
            scores = images64 @ text[start:stop].astype(np.float64).T     # (G, b)
            scores[codes[columns], columns - start] = -np.inf             # a pair never counts itself
            text_rank[columns] = (scores > alignment[columns] + TIE).sum(axis=0)
            candidate = scores >= lowest[:, None]
            n_candidates = int(np.count_nonzero(candidate))
            if not n_candidates:
                bar.advance(stop - start)
                continue
            mine = np.flatnonzero(candidate.any(axis=1)[codes])
            if len(mine) * (stop - start) <= DENSE_FACTOR * n_candidates:
                # many candidates: each pair's row of the block compared with its thresholds is cheaper
                # than sorting the candidates
                found = _dense_block(scores, start, mine, codes, (alignment, threshold), (image_rank, false_negatives),
                                     None if export else listed)
            else:
                rows, cols = np.nonzero(candidate)
                values = scores[rows, cols]
                image_rank[mine] += keys_above(rows, values, codes[mine], alignment[mine] + TIE, n_images, ties=False)
                false_negatives[mine] += keys_above(rows, values, codes[mine], threshold[mine], n_images, ties=True)
                # each candidate meets the thresholds of its image's captions at or below its value
                met = per_image[rows] - keys_above(codes[mine], threshold[mine], rows, values, n_images, ties=False)
                keep = np.flatnonzero(met > 0)
                # the largest margins: the candidates whose best margin (against their image's lowest own
                # caption) is largest hold every top row (docs/pairs.md); all of them when exported
                if not export:
                    keep = keep[np.argsort(-(values[keep] - lowest[rows[keep]]), kind="stable")[:listed]]
                found = _rows_of(keep, rows, cols + start, values, met, by_threshold, image_start)
            top.add(*found)
            if export:
                n_exported += len(found[0])
                if n_exported > max_export_rows:
                    raise CapgeoError(f"--false-negatives: more than {max_export_rows:,} rows (image, caption of "
                                      f"another image) within delta {delta:g}; a smaller --delta lists fewer")
                exported.append(found)
            bar.advance(stop - start)
    top_pair, top_negative, top_cosine = top.rows
    if export:
        exported = tuple(np.concatenate([part[i] for part in exported]) if exported else
                         np.empty(0, dtype=np.float64 if i == 2 else np.int64) for i in range(3))
    return PairPass(alignment, text_rank, image_rank, false_negatives,
                    np.stack([top_pair, top_negative], axis=1), top_cosine, exported if export else None)


class _TopRows:
    """The ``listed`` false-negative rows of largest margin S[c(m), k] - a_m seen so far (ties: lower
    pair, then lower caption)."""

    def __init__(self, alignment: np.ndarray, listed: int):
        self.alignment, self.listed = alignment, listed
        self.rows = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0))

    def add(self, pair, negative, cosine) -> None:
        if not len(pair):
            return
        if len(pair) > self.listed:   # a block's rows cut to their own top first
            margin = cosine - self.alignment[pair]
            chosen = np.flatnonzero(margin >= np.partition(margin, len(margin) - self.listed)[-self.listed])
            pair, negative, cosine = pair[chosen], negative[chosen], cosine[chosen]
        pair, negative, cosine = (np.concatenate([mine, new]) for mine, new in zip(self.rows, (pair, negative, cosine)))
        order = np.lexsort((negative, pair, -(cosine - self.alignment[pair])))[:self.listed]
        self.rows = (pair[order], negative[order], cosine[order])


def _dense_block(scores, start, mine, codes, limits, counters, listed: int | None):
    """A block's counts for the pairs ``mine`` by comparing each pair's row with its thresholds
    (``limits``: the pairs' alignments and false-negative thresholds), added to ``counters`` (their
    image ranks and false-negative counts), in chunks of pairs; returns the block's false-negative
    rows (pair, negative caption, cosine): all of them, or with ``listed`` only those that can be
    among the ``listed`` of largest margin (they lie in the rows of the ``listed`` pairs whose best
    margin is largest)."""
    (alignment, threshold), (image_rank, false_negatives) = limits, counters
    found = ([], [], [])
    step = max(1, DENSE_CHUNK_VALUES // max(scores.shape[1], 1))
    for first in range(0, len(mine), step):
        chunk = mine[first:first + step]
        rows = scores[codes[chunk]]
        image_rank[chunk] += np.count_nonzero(rows > (alignment[chunk] + TIE)[:, None], axis=1)
        hit = rows >= threshold[chunk][:, None]
        counts = np.count_nonzero(hit, axis=1)
        false_negatives[chunk] += counts
        if listed is not None:
            with_hit = np.flatnonzero(counts)
            best = rows[with_hit].max(axis=1) - alignment[chunk[with_hit]]
            kept = with_hit[np.argsort(-best, kind="stable")[:listed]]
            pair, column = np.nonzero(hit[kept])
            pair = kept[pair]
        else:
            pair, column = np.nonzero(hit)
        found[0].append(chunk[pair])
        found[1].append(column + start)
        found[2].append(rows[pair, column])
    return tuple(np.concatenate(part) for part in found)


def _rows_of(chosen, rows, negatives, values, met, by_threshold, image_start):
    """(pair, negative caption, cosine) of every row the ``chosen`` candidates make: each candidate
    (image g, caption k, value v) with each of g's ``met`` captions of lowest threshold."""
    counts = met[chosen]
    total = int(counts.sum())
    within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    pairs = by_threshold[np.repeat(image_start[rows[chosen]], counts) + within]
    return pairs, np.repeat(negatives[chosen], counts), np.repeat(values[chosen], counts)


# ---------------------------------------------------------------- batches

def batch_findings(text: np.ndarray, images: np.ndarray, codes: np.ndarray, batches: np.ndarray, *,
                   logit_scale: float, gamma: float, delta: float) -> BatchFindings:
    """On the seeded training batches: false negatives per batch, and saturation (loss below
    SOLVED_LOSS, negative-logit gradients exactly zero in float32) at gamma 0 and ``gamma``."""
    from capgeo.findings.gamma import image_loss_diagnostics

    with_negative, per_batch = 0, []
    zero = {0.0: 0, float(gamma): 0}
    for batch in batches:
        texts32, images32 = text[batch], images[codes[batch]]
        similarity = images32.astype(np.float64) @ texts32.astype(np.float64).T
        own = np.diagonal(similarity).copy()
        np.fill_diagonal(similarity, -np.inf)
        found = int((similarity >= own[:, None] - delta - TIE).sum())
        per_batch.append(found)
        with_negative += found > 0
        for value in zero:
            zero[value] += int(zero_negative_gradients(images32, texts32, logit_scale, value))
    losses = image_loss_diagnostics(text, images, codes, batches, logit_scale, [gamma])
    size = batches.shape[1]
    entries = len(batches) * size * (size - 1)
    return BatchFindings(
        false_negatives=BatchFalseNegatives(with_negative / len(batches), float(np.mean(per_batch))),
        solved_loss=SOLVED_LOSS,
        gammas=(_gamma_saturation(0.0, losses.plain, zero[0.0] / entries),
                _gamma_saturation(float(gamma), losses.boosted[0], zero[float(gamma)] / entries)))


def _gamma_saturation(gamma: float, losses, share_zero_gradients: float) -> PairGammaSaturation:
    return PairGammaSaturation(gamma=gamma, share_batches_below=losses.share_batches_below,
                               mean_loss=losses.mean_loss, share_zero_gradients=share_zero_gradients)


def zero_negative_gradients(images32: np.ndarray, texts32: np.ndarray, logit_scale: float, gamma: float) -> int:
    """How many of a batch's B(B-1) negative logits get a gradient of exactly 0 in float32, as autograd
    computes the symmetric cross-entropy's: softmax(logits) * (0.5 / B) along rows plus the same along
    columns (the targets are on the diagonal only). logits = s * (S + gamma * Gbar) in float32."""
    images32 = np.asarray(images32, dtype=np.float32)
    texts32 = np.asarray(texts32, dtype=np.float32)
    size = len(texts32)
    logits = images32 @ texts32.T
    if gamma:
        caption = texts32 @ texts32.T
        np.fill_diagonal(caption, 0)
        logits = logits + np.float32(gamma) * caption
    logits = np.float32(logit_scale) * logits
    weight = np.float32(0.5) / np.float32(size)
    gradient = _softmax32(logits, 1) * weight + _softmax32(logits, 0) * weight
    np.fill_diagonal(gradient, 1)
    return int((gradient == 0).sum())


def _softmax32(logits: np.ndarray, axis: int) -> np.ndarray:
    """exp(log_softmax) in float32, as log_softmax's backward reads it: a negative whose log-probability
    is below about -103.3 gets exactly 0."""
    shifted = logits - logits.max(axis=axis, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True, dtype=np.float32))
    return np.exp(log_probabilities)


# ---------------------------------------------------------------- image twins

def image_twins(images: np.ndarray, hashes, names: list[str], *, threshold: float = IMAGE_TWIN_THRESHOLD,
                listed: int = PAIRS_LISTED) -> ImageTwins:
    """Images of different group ids that are one image: the same bytes (``hashes``, where known)
    or image-image cosine >= ``threshold`` (exact, float64, blockwise). ``names``: each row's id."""
    if not -1.0 <= threshold <= 1.0:
        raise CapgeoError(f"--image-threshold: expected a cosine between -1 and 1, got {threshold}")
    exact_sets = []
    if hashes is not None:
        by_hash: dict[str, list[int]] = {}
        for row, digest in enumerate(hashes):
            if digest is not None:
                by_hash.setdefault(digest, []).append(row)
        exact_sets = [rows for rows in by_hash.values() if len(rows) > 1]
    first, second, cosine = near_pairs(images, images, threshold, same=True)
    order = np.lexsort((second, first, -cosine))[:listed]
    return ImageTwins(
        threshold=float(threshold), hashes_known=hashes is not None, n_exact_sets=len(exact_sets),
        n_exact_images=sum(len(rows) for rows in exact_sets),
        exact_sets=tuple(tuple(names[row] for row in rows) for rows in exact_sets[:listed]),
        n_near_pairs=int(len(cosine)), n_near_images=int(np.unique(np.concatenate([first, second])).size),
        near_pairs=tuple(ImageTwinPair(a=names[first[i]], b=names[second[i]], cosine=float(cosine[i]))
                         for i in order))


def near_pairs(a: np.ndarray, b: np.ndarray, threshold: float, *, same: bool = False,
               block_values: int = BLOCK_VALUES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (row of a, row of b) at cosine >= threshold, float64 products in blocks; ``same``: a is b,
    each unordered pair once (i < j)."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    step = max(1, block_values // max(len(b64), 1))
    found = ([], [], [])
    for start in range(0, len(a64), step):
        scores = a64[start:start + step] @ b64.T
        if same:
            scores[np.tril_indices(len(scores), k=start, m=len(b64))] = -np.inf
        rows, cols = np.nonzero(scores >= threshold)
        found[0].append(rows + start)
        found[1].append(cols)
        found[2].append(scores[rows, cols])
    if not found[0]:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0)
    return tuple(np.concatenate(part) for part in found)


# ---------------------------------------------------------------- the section

def _summary(values: np.ndarray) -> Distribution:
    from capgeo.geometry.inbatch import summarize_sample

    summary = summarize_sample(values)
    counts, edges = np.histogram(values, bins=40, range=(-1.0, 1.0))
    summary["histogram"] = {"start": -1.0, "width": 0.05, "counts": counts.tolist()}
    return Distribution.from_dict(summary)


def pairs_section(captions, embeddings, images: ImageVectors, options: PairSectionOptions | None = None, *,
                  progress: bool | None = None, **fields) -> Pairs:
    """The ``pairs`` section of a profile (docs/pairs.md) for ``captions``, their ``embeddings`` (an
    Embeddings or an (N, d) array) and ``images`` (row g: the image of group code g). ``options``: a
    :class:`PairSectionOptions`, its ``fields`` set by keyword (``batch_size=8``)."""
    from capgeo.findings.gamma import REFERENCE, _resolve_logit_scale
    from capgeo.geometry.batches import sample_batches

    options = dataclasses.replace(options or PairSectionOptions(), **fields)
    checkpoint_scale = getattr(getattr(embeddings, "info", None), "logit_scale", None)
    text = np.ascontiguousarray(getattr(embeddings, "vectors", embeddings), dtype=np.float32)
    codes = np.asarray(captions.group_codes, dtype=np.int64)
    n_groups = int(captions.n_groups)
    if text.ndim != 2 or len(text) != len(codes):
        raise CapgeoError(f"caption vectors {text.shape} do not match {len(codes)} captions")
    images = _checked(images, n_groups, text.shape[1])
    scale, scale_source = _resolve_logit_scale(options.logit_scale, checkpoint_scale)
    gamma = REFERENCE.gamma if options.gamma is None else float(options.gamma)
    delta, listed, output = options.delta, options.listed, options.false_negatives_output
    present = np.asarray(images.present, dtype=bool)
    kept = np.flatnonzero(present[codes])                       # the pairs: captions whose image is there
    image_rows = np.flatnonzero(present)
    compact = np.full(n_groups, -1, dtype=np.int64)
    compact[image_rows] = np.arange(len(image_rows))
    pair_codes = compact[codes[kept]]
    image_vectors = np.asarray(images.vectors, dtype=np.float32)[image_rows]
    pair_text = text[kept]
    if len(image_rows) < 2:
        raise CapgeoError(f"{images.source}: the pair analyses need at least 2 images, {len(image_rows)} present")
    done = pair_pass(pair_text, image_vectors, pair_codes, delta=delta, listed=listed, export=output is not None,
                     progress=progress)
    names = captions.group_names
    image_names = [names[g] for g in image_rows]
    pairs = _Pairs(captions, kept, pair_text, pair_codes, done, image_names, image_vectors, gamma)
    n = len(kept)
    # retrieval
    best_rank = np.full(len(image_rows), np.iinfo(np.int64).max)
    np.minimum.at(best_rank, pair_codes, done.image_rank)
    recall = {f"text_to_image_r{k}": float((done.text_rank < k).mean()) for k in RECALL_AT}
    recall.update({f"image_to_text_r{k}": float((best_rank < k).mean()) for k in RECALL_AT})
    retrieval = PairRetrieval(**recall, n_queries_text=n, n_queries_image=len(image_rows), ties=RETRIEVAL_TIES)
    # mismatched pairs, the lowest alignment first, one per image
    bad = np.flatnonzero((done.image_rank >= MISMATCH_RANK) & (done.text_rank >= MISMATCH_RANK))
    bad = bad[np.lexsort((bad, done.alignment[bad]))]
    _, first_of_image = np.unique(pair_codes[bad], return_index=True)
    shown = bad[np.sort(first_of_image)][:listed]
    per_image = np.bincount(pair_codes, weights=done.alignment) / np.bincount(pair_codes)
    mismatched = PairMismatched(rule=f"neither direction retrieves the pair at R@{MISMATCH_RANK}",
                                n_pairs=int(len(bad)), n_images=int(np.unique(pair_codes[bad]).size),
                                pairs=tuple(_pair_card(pairs, m) for m in shown))
    # false negatives: batch_size and output written, as null where they do not apply; the per-batch
    # shares and n_written only where they do
    negatives = dict(
        delta=float(delta),
        rule="caption k of another image with S[image of m, k] >= S[image of m, m] - delta, per pair m",
        n_rows=int(done.false_negatives.sum()), n_pairs=int((done.false_negatives > 0).sum()),
        n_images=int(np.unique(pair_codes[done.false_negatives > 0]).size), gamma=gamma,
        rows=tuple(_negative_row(pairs, int(m), int(k), float(c))
                   for (m, k), c in zip(done.top_rows, done.top_cosines)),
        batch_size=None, output=None)
    saturation = None
    headline = options.batch_size
    if headline is not None and headline > len(image_rows):
        headline = len(image_rows)
    if headline is not None and headline >= 2:
        n_batches = options.n_batches or DEFAULT_N_BATCHES
        batches = sample_batches(pair_codes, headline, n_batches, options.seed)
        found = batch_findings(pair_text, image_vectors, pair_codes, batches, logit_scale=scale, gamma=gamma,
                               delta=delta)
        negatives.update(batch_size=headline, batch_share_batches=found.false_negatives.share_batches,
                         batch_mean_per_batch=found.false_negatives.mean_per_batch)
        saturation = PairSaturation(batch_size=headline, n_batches=int(n_batches), seed=options.seed,
                                    logit_scale=scale, logit_scale_source=scale_source, solved_loss=found.solved_loss,
                                    gammas=found.gammas)
    if output is not None:
        negatives.update(output=str(output), n_written=write_false_negatives(pairs, output))
    false_negatives = section(PairFalseNegatives, **negatives)
    twins = image_twins(image_vectors, None if images.content_hashes is None
                        else [images.content_hashes[g] for g in image_rows], image_names,
                        threshold=options.image_threshold, listed=listed)
    thumbnails = thumbnails_for(images, image_rows, image_names, mismatched, false_negatives, twins)
    return section(
        Pairs, source=images.source, n_pairs=n, n_images=int(len(image_rows)),
        n_images_missing=int(n_groups - len(image_rows)), alignment=_summary(done.alignment),
        alignment_per_image=_summary(per_image), retrieval=retrieval, mismatched=mismatched,
        false_negatives=false_negatives, saturation=saturation, twins=twins,
        thumbnails=None if thumbnails is None else read_only(thumbnails))


def _pair_card(pairs: _Pairs, m: int) -> PairCard:
    """One flagged image: its captions with their alignment, and its hardest wrong caption."""
    captions, kept, image_names, done = pairs.captions, pairs.kept, pairs.image_names, pairs.done
    g = int(pairs.codes[m])
    own = np.flatnonzero(pairs.codes == g)
    scores = pairs.image_vectors[g].astype(np.float64) @ pairs.text.astype(np.float64).T
    scores[own] = -np.inf
    wrong = int(np.argmax(scores))
    return PairCard(
        image=image_names[g], caption_id=captions.ids[kept[m]], text=captions.texts[kept[m]],
        alignment=float(done.alignment[m]), image_rank=int(done.image_rank[m]), text_rank=int(done.text_rank[m]),
        captions=tuple(PairCaption(id=captions.ids[kept[k]], text=captions.texts[kept[k]],
                                   alignment=float(done.alignment[k])) for k in own),
        hardest_wrong=PairHardestWrong(id=captions.ids[kept[wrong]], image=image_names[int(pairs.codes[wrong])],
                                       text=captions.texts[kept[wrong]], cosine=float(scores[wrong])))


def _negative_row(pairs: _Pairs, m: int, k: int, cosine: float) -> PairNegativeRow:
    from capgeo.findings.highlight import highlight_pair

    captions, kept, image_names = pairs.captions, pairs.kept, pairs.image_names
    own_cosine = float(pairs.done.alignment[m])
    caption_cosine = float(pairs.text[m].astype(np.float64) @ pairs.text[k].astype(np.float64))
    own_text, other_text = captions.texts[kept[m]], captions.texts[kept[k]]
    highlight = highlight_pair(own_text, other_text)
    return PairNegativeRow(
        image=image_names[int(pairs.codes[m])], caption_id=captions.ids[kept[m]], text=own_text,
        negative_id=captions.ids[kept[k]], negative_image=image_names[int(pairs.codes[k])], negative_text=other_text,
        cosine=cosine, own_cosine=own_cosine, margin=cosine - own_cosine, caption_cosine=caption_cosine,
        boost=pairs.gamma * caption_cosine, shared_words=tuple(highlight.shared),
        spans_a=tuple(highlight.spans_a), spans_b=tuple(highlight.spans_b))


#: the columns of a false-negative export, and their Parquet types
EXPORT_COLUMNS = ("image_id", "caption_id", "negative_image_id", "negative_caption_id", "cosine", "own_cosine",
                  "caption_cosine", "boost")


def write_false_negatives(pairs: _Pairs, output) -> int:
    """Every false-negative row of ``pairs``' pass to ``output`` (Parquet, CSV or JSONL by suffix,
    atomically): ids and cosines, to mask during training."""
    import polars as pl

    from capgeo.findings.duplicates import write_rows
    from capgeo.findings.per_caption import table_format

    captions, kept, pair_text, pair_codes, done, image_names, _, gamma = pairs
    fmt = table_format(str(output))
    pairs, negatives, cosines = done.exported
    caption = np.einsum("ij,ij->i", pair_text[pairs].astype(np.float64), pair_text[negatives].astype(np.float64))
    ids = captions.ids
    rows = [{"image_id": image_names[pair_codes[m]], "caption_id": ids[kept[m]],
             "negative_image_id": image_names[pair_codes[k]], "negative_caption_id": ids[kept[k]],
             "cosine": float(c), "own_cosine": float(done.alignment[m]), "caption_cosine": float(g),
             "boost": float(gamma * g)}
            for m, k, c, g in zip(pairs.tolist(), negatives.tolist(), cosines.tolist(), caption.tolist())]
    schema = {name: pl.String for name in EXPORT_COLUMNS[:4]} | {name: pl.Float64 for name in EXPORT_COLUMNS[4:]}
    write_rows(rows, fmt, str(output), columns=EXPORT_COLUMNS, parquet_schema=schema)
    return len(rows)


def thumbnails_for(images: ImageVectors, image_rows, image_names, mismatched: PairMismatched,
                   false_negatives: PairFalseNegatives, twins: ImageTwins) -> Mapping[str, str] | None:
    """Small JPEGs (base64) of the images the section lists (its ``mismatched``, ``false_negatives``,
    ``twins``), within PAIRS_THUMBNAIL_BYTES in all; None when the images have no thumbnails (vectors
    read from a file)."""
    if images.thumbnail is None:
        return None
    row_of = {name: row for row, name in zip(image_rows, image_names)}
    wanted = [card.image for card in mismatched.pairs]
    for row in false_negatives.rows:
        wanted += [row.image, row.negative_image]
    for pair in twins.near_pairs:
        wanted += [pair.a, pair.b]
    for names in twins.exact_sets:
        wanted += names[:2]
    out, total = {}, 0
    for name in dict.fromkeys(wanted):
        data = images.thumbnail(int(row_of[name])) if name in row_of else None
        if not data:
            continue
        if total + len(data) > PAIRS_THUMBNAIL_BYTES:
            break
        out[name] = base64.b64encode(data).decode("ascii")
        total += len(data)
    return out
