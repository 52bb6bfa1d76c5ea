"""Train/eval leakage: evaluation captions that have a twin in the training set.

An evaluation caption leaks when a training caption is its exact duplicate (same text
after the normalisation of :mod:`capgeo.captions.exact_duplicates`) or embeds at cosine
>= threshold with it. Removing every training caption that is such a twin of any
evaluation caption removes the leak; those ids are the drop list.

The pass over train x eval is :func:`capgeo.geometry.cross.scan_cross`: blockwise and exact.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import polars as pl

from capgeo.defaults import FIXED_BLOCK_SIZE, LEAK_NORMALIZE, LEAK_NORMALIZE_RULES, LEAK_THRESHOLD, LEAK_TOP
from capgeo.errors import CapgeoError
from capgeo.findings.highlight import highlight_pair
from capgeo.geometry.typed_profile import Encoder, EvalLeak, Leak, LeakTrain, LeakTwin
from capgeo.progress import labelled
from capgeo.captions.exact_duplicates import normalized_texts

SCHEMA = "capgeo.leak/1"
DEFAULT_THRESHOLD = LEAK_THRESHOLD
#: closest pairs shown per evaluation set
DEFAULT_TOP = LEAK_TOP


def twin_keys(texts: Sequence[str], normalize: str = LEAK_NORMALIZE) -> pl.Series:
    """The text two captions must share to be exact twins under ``normalize`` (LEAK_NORMALIZE_RULES,
    docs/leak.md): ``none`` the text as written; ``whitespace`` NFKC with whitespace collapsed;
    ``case`` that and casefolded (every command's exact-duplicate rule); ``period`` that and a
    final period dropped ("A dog." and "a dog" are twins)."""
    import unicodedata

    if normalize not in LEAK_NORMALIZE_RULES:
        raise CapgeoError(f"--normalize: expected one of {', '.join(LEAK_NORMALIZE_RULES)}, got {normalize!r}")
    series = pl.Series("text", list(texts), dtype=pl.String)
    if normalize == "none":
        return series
    if normalize == "whitespace":
        return pl.Series("text", [" ".join(unicodedata.normalize("NFKC", text).split()) for text in series],
                         dtype=pl.String)
    keys = normalized_texts(series)
    if normalize == "period":
        keys = keys.str.strip_chars_end(".").str.strip_chars_end(" ")
    return keys


def exact_twins(train_texts: Sequence[str], eval_texts: Sequence[str],
                normalize: str = LEAK_NORMALIZE) -> tuple[np.ndarray, np.ndarray]:
    """(eval row, train row) of every pair with the same text under ``normalize`` (twin_keys)."""
    def keyed(texts):
        return pl.DataFrame({"key": twin_keys(texts, normalize)}).with_row_index("row")

    joined = keyed(eval_texts).join(keyed(train_texts), on="key", suffix="_train").sort(["row", "row_train"])
    return joined["row"].to_numpy().astype(np.int64), joined["row_train"].to_numpy().astype(np.int64)


def twin_row(train, eval_set, train_row: int, eval_row: int, cosine: float, exact: bool | None = None) -> LeakTwin:
    """One (eval, train) pair, words highlighted as in `capgeo dupes`; ``exact``: whether the two are
    exact twins under the leak's --normalize rule (default: under every command's rule)."""
    eval_text, train_text = eval_set.texts[eval_row], train.texts[train_row]
    highlight = highlight_pair(eval_text, train_text)
    return LeakTwin(
        eval_id=eval_set.ids[eval_row], eval_group=eval_set.groups[eval_row], eval_text=eval_text,
        train_id=train.ids[train_row], train_group=train.groups[train_row], train_text=train_text,
        cosine=float(cosine), jaccard=highlight.jaccard,
        exact_duplicate=highlight.exact_duplicate if exact is None else bool(exact),
        shared_words=tuple(highlight.shared), only_eval_words=tuple(highlight.only_a),
        only_train_words=tuple(highlight.only_b),
        spans_eval=highlight.spans_a, spans_train=highlight.spans_b)


@dataclass(frozen=True)
class LeakOptions:
    """What `capgeo leak` counts as a twin and shows (docs/leak.md)."""

    #: an eval caption leaks when a training caption has cosine >= threshold with it
    threshold: float = DEFAULT_THRESHOLD
    #: closest (eval, train) pairs listed per evaluation set
    top: int = DEFAULT_TOP
    #: what two texts may differ by and still be exact twins (LEAK_NORMALIZE_RULES)
    normalize: str = LEAK_NORMALIZE
    #: rows per block of the train x eval pass
    block_size: int = FIXED_BLOCK_SIZE
    #: image cosine at which two images are one (None: capgeo.findings.image_leak's default)
    image_threshold: float | None = None

    def checked(self) -> "LeakOptions":
        """These options, or CapgeoError naming the first bad one (before any pass)."""
        if not -1.0 <= self.threshold <= 1.0:
            raise CapgeoError(f"--threshold: expected a cosine between -1 and 1, got {self.threshold}")
        if self.top < 0:
            raise CapgeoError(f"--top: expected 0 or more pairs to show, got {self.top}")
        twin_keys([], self.normalize)  # an unknown rule is refused before the pass
        return self


@dataclass(frozen=True)
class LeakImageVectors:
    """The sets' ImageVectors for the image twins across them (capgeo.findings.image_leak): the
    training set's, and one per evaluation set (None where a set has none)."""

    train: Any = None
    evals: Sequence = ()


def eval_leak(train, train_vectors, eval_set, eval_vectors, options: LeakOptions = LeakOptions(), *,
              device: str | None = None, progress: bool | None = None) -> EvalLeak:
    """The leak of one evaluation set into the training set (fields in docs/leak.md)."""
    from capgeo.geometry.cross import scan_cross

    threshold, top, normalize = options.threshold, options.top, options.normalize

    # the float32 tile products pick candidates a little below the threshold; the float64 cosines
    # decide (so which pairs leak, their cosines and their order do not move with the tile size,
    # and a listed pair is never below the threshold), the margin covering float32's rounding
    width = np.shape(eval_vectors)[1]
    margin = width * 2.0 ** -22 + 1e-6
    scan = scan_cross(eval_vectors, train_vectors, threshold=max(-1.0, threshold - margin), top_k=0,
                      block_size=options.block_size, device=device, progress=progress, asked_threshold=threshold)
    scan_cosine = _cosines64(eval_vectors, train_vectors, scan.pair_query, scan.pair_reference)
    near = scan_cosine >= threshold
    exact_eval, exact_train = exact_twins(train.texts, eval_set.texts, normalize)
    twin_eval = np.concatenate([scan.pair_query[near], exact_eval])
    twin_train = np.concatenate([scan.pair_reference[near], exact_train])
    leaked = np.unique(twin_eval)
    drop = np.unique(twin_train)
    # each leaked eval caption's closest training twin (an exact twin below the threshold, by
    # float rounding, counts too): the largest float64 cosine, ties to the lower training row
    twin_cosine = np.concatenate([scan_cosine[near], _cosines64(eval_vectors, train_vectors, exact_eval, exact_train)])
    by_eval = np.lexsort((twin_train, -twin_cosine, twin_eval))
    first = by_eval[np.r_[True, np.diff(twin_eval[by_eval]) != 0]] if by_eval.size else by_eval
    best_train, best_cosine = twin_train[first], twin_cosine[first]   # aligned with ``leaked``
    order = np.lexsort((leaked, -best_cosine))[:top]
    exact_pairs = set(zip(exact_eval.tolist(), exact_train.tolist()))
    return dataclasses.replace(
        image_counts(eval_set, leaked, train, drop), source=str(eval_set.source), format=eval_set.format,
        n_captions=len(eval_set), n_leaked=int(leaked.size), share_leaked=leaked.size / len(eval_set),
        n_exact=int(np.unique(exact_eval).size), n_train_twins=int(drop.size),
        leaked_ids=tuple(eval_set.ids[row] for row in leaked), train_ids_to_drop=tuple(train.ids[row] for row in drop),
        pairs=tuple(twin_row(train, eval_set, int(best_train[index]), int(leaked[index]), best_cosine[index],
                             exact=(int(leaked[index]), int(best_train[index])) in exact_pairs)
                    for index in order))


def image_counts(eval_set, leaked: np.ndarray, train, drop: np.ndarray) -> EvalLeak:
    """The images behind the leaked captions (an EvalLeak of these counts alone): the evaluation images
    with at least one caption twinned in training, those with every caption twinned, and the training
    images holding a twin (groups in dataset order, by first caption)."""
    codes = np.asarray(eval_set.group_codes)
    sizes = np.bincount(codes, minlength=eval_set.n_groups)
    twinned = np.bincount(codes[leaked], minlength=eval_set.n_groups)
    names = eval_set.group_names
    some, every = np.flatnonzero(twinned > 0), np.flatnonzero((twinned == sizes) & (sizes > 0))
    train_codes = np.asarray(train.group_codes)
    return EvalLeak(n_groups=int(eval_set.n_groups), n_groups_leaked=int(some.size),
                    n_groups_all_leaked=int(every.size), n_train_groups_twinned=int(np.unique(train_codes[drop]).size),
                    leaked_groups=tuple(names[code] for code in some),
                    all_leaked_groups=tuple(names[code] for code in every))


#: pairs re-scored at a time (each holds two float64 rows)
RESCORE_CHUNK = 1 << 14


def _cosines64(eval_vectors, train_vectors, eval_rows: np.ndarray, train_rows: np.ndarray) -> np.ndarray:
    """Cosines of the given (eval, train) pairs in float64, clipped to [-1, 1]. Written as
    a.b / sqrt(a.a * b.b), which is exactly 1.0 for two equal vectors (sqrt(x*x) == x in IEEE
    arithmetic; a.b / (|a| |b|) gives 0.9999999999999998)."""
    out = np.empty(len(eval_rows), dtype=np.float64)
    for start in range(0, len(eval_rows), RESCORE_CHUNK):
        rows = slice(start, start + RESCORE_CHUNK)
        a = np.asarray(eval_vectors[eval_rows[rows]], dtype=np.float64)
        b = np.asarray(train_vectors[train_rows[rows]], dtype=np.float64)
        out[rows] = np.einsum("ij,ij->i", a, b) / np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    return np.clip(out, -1.0, 1.0)


def leak_section(train, train_embeddings, evals, options: LeakOptions | None = None, *,
                 images: LeakImageVectors | None = None, device: str | None = None, progress: bool | None = None,
                 **fields) -> Leak:
    """The whole `capgeo leak` result: one entry per evaluation set and the union of the training
    ids to drop. ``evals`` is a list of (CaptionSet, Embeddings); all embeddings from one encoder;
    ``options`` a LeakOptions, or its ``fields`` (threshold=, top=, ...). Each entry's ``images`` says
    which of its images are training images (capgeo.findings.image_leak: by file name, and with
    ``images``' ImageVectors, by content hash and image cosine >= ``image_threshold``); None where
    no way applies."""
    from capgeo.findings.image_leak import image_leak

    options = (options or LeakOptions(**fields)).checked()
    train_names = train.group_names
    images = images or LeakImageVectors()
    eval_images = list(images.evals) or [None] * len(evals)
    image_options = {} if options.image_threshold is None else {"threshold": options.image_threshold}
    train_info = getattr(train_embeddings, "info", None)
    _check_rows(train, train_embeddings, "TRAIN")
    sets = []
    for eval_set, eval_embeddings in evals:
        _check_rows(eval_set, eval_embeddings, "EVAL")
        info = getattr(eval_embeddings, "info", None)
        if train_info is not None and info is not None and info.fingerprint != train_info.fingerprint:
            raise CapgeoError(f"{eval_set.source}: encoded with {info.spec!r}, the training set with "
                              f"{train_info.spec!r}; leakage needs one encoder for both")
        cut = (getattr(train_embeddings, "max_tokens", None), getattr(eval_embeddings, "max_tokens", None))
        if None not in cut and cut[0] != cut[1]:
            raise CapgeoError(f"{eval_set.source}: embedded at {cut[1]} tokens, the training set at {cut[0]}; "
                              "leakage compares captions cut to one length")
        with labelled(f"EVAL {eval_set.source.name}"):
            entry = eval_leak(train, train_embeddings.vectors, eval_set, eval_embeddings.vectors, options,
                              device=device, progress=progress)
        sets.append(dataclasses.replace(entry, images=image_leak(
            train_names, eval_set.group_names, train_images=images.train, eval_images=eval_images[len(sets)],
            **image_options)))
    drop = sorted(set().union(*(entry.train_ids_to_drop for entry in sets)), key=_row_of(train))
    return Leak(schema=SCHEMA, train=LeakTrain(source=str(train.source), format=train.format, n_captions=len(train),
                                               n_groups=train.n_groups),
                encoder=None if train_info is None else _encoder(train_info),
                threshold=float(options.threshold), normalize=options.normalize, evals=tuple(sets),
                train_ids_to_drop=tuple(drop), nulls=frozenset() if train_info is not None else frozenset({"encoder"}))


def _encoder(info) -> Encoder:
    """The typed encoder of an EncoderInfo, its unknown fields (logit_scale) written as null."""
    fields = info.to_dict()
    return Encoder(**fields, nulls=frozenset(key for key, value in fields.items() if value is None))


def _check_rows(captions, embeddings, role: str) -> None:
    """One vector per caption: other vectors would give silent twins at cosine 1.0, or an IndexError."""
    vectors = getattr(embeddings, "vectors", None)
    if vectors is None:
        raise CapgeoError(f"{role} {captions.source}: expected Embeddings (capgeo.encoders.embed), "
                          f"got {type(embeddings).__name__}")
    if len(vectors) != len(captions):
        raise CapgeoError(f"{role} {captions.source}: {len(vectors)} vectors for {len(captions)} captions; "
                          "expected one per caption")


def _row_of(captions):
    position = {caption_id: row for row, caption_id in enumerate(captions.ids)}
    return position.__getitem__


def write_id_list(ids: Sequence[str], output: str) -> None:
    """One id per line, atomically. An id holding a line break is refused: written as it is, it
    came back as two ids that are not the dataset's, and the list could not be joined to it."""
    from capgeo._atomic import atomic_open

    for caption_id in ids:
        if len(f"{caption_id}x".splitlines()) != 1:  # "\n", "\r", and the other breaks splitlines knows
            raise CapgeoError(f"{output}: caption id {caption_id!r} holds a line break, which a list of one id "
                              "a line cannot hold; give the captions ids without one (or use the --json output, "
                              "which names the same captions)")
    with atomic_open(output) as handle:
        handle.write("".join(f"{caption_id}\n" for caption_id in ids))
