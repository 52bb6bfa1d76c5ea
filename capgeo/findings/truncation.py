"""What the context length does to the caption geometry.

A text encoder sees at most its context length in tokens; dense captions run
far longer, so what a model trains on is the geometry of caption *openings*.
This module takes one dataset's embeddings at several maximum token lengths L
(the encoder's full context always included, as the reference; capgeo.pipeline
encodes them) and compares, per L:

* how many captions are cut at L;
* the distribution of negative (different-group) cosines and of each caption's
  hardest companion (:func:`capgeo.geometry.pairwise.scan_pairs`);
* the in-batch bucket composition at one batch size, on the *same* batches for
  every L (same seed), so the comparison is paired;
* the number of near-duplicate pairs of different groups at or above a
  threshold (exact, every pair: :func:`near_duplicates_at_length`);
* the pairs that are near-duplicates *only because of truncation*: at or above
  the threshold at L, below it at the full context; each listed with the
  character offset where the L-token prefix of each caption ends;
* how far each caption's embedding moves when more of it is seen: the cosine
  between its embedding at L and at the full context.

The cut point is found generically, for any tokenizer, with the encoder's own
``token_counts`` (see :func:`cut_offsets`). The whole result is the
``truncation`` section of a ``capgeo.profile/1`` dict; docs/truncation.md
documents every field.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from capgeo.defaults import PAIR_BLOCK_SIZE, TOP_K, TRUNCATION_LISTED_PAIRS
from capgeo.errors import CapgeoError, EncoderError
from capgeo.findings.result import section
from capgeo.geometry.batch_size import DEFAULT_N_BATCHES
from capgeo.geometry.typed_profile import (BatchNearDuplicates, Buckets, CutCaption, Dataset, Distribution, Encoder,
                                           Movement, Options, Profile, Provenance, Truncation, TruncationLength,
                                           TruncationNearDuplicates, TruncationPair)
from capgeo.progress import labelled, pass_label

#: Lengths compared when none are given (those above the encoder's context are left out).
#: 77: CLIP's context; 248: Long-CLIP's; 32/64: where caption-trained encoders stop gaining.
DEFAULT_LENGTHS = (32, 64, 77, 128, 248)
#: Truncation-only pairs listed per length (all are counted).
DEFAULT_LISTED_PAIRS = TRUNCATION_LISTED_PAIRS
#: Pairs whose full-context cosines are computed at once (memory: 2 x PAIR_CHUNK x width floats).
PAIR_CHUNK = 65536
#: Quantile levels of the per-length summaries (the profile's keys p1..p99).

_WORD_END = re.compile(r"\S+")


@dataclass(frozen=True)
class TruncationOptions:
    """What the truncation section computes at each length: its fields' defaults are the only
    defaults of :func:`truncation_section`'s keywords."""

    #: None: the profile's (128, or the number of groups when smaller)
    batch_size: int | None = None
    n_batches: int = DEFAULT_N_BATCHES
    seed: int = 0
    #: None: the profile's near-duplicate threshold
    threshold: float | None = None
    #: None: the profile's bucket edges
    edges: Sequence[float] | None = None
    top_k: int = TOP_K
    block_size: int | None = PAIR_BLOCK_SIZE
    #: truncation-only pairs listed per length (all are counted)
    max_listed: int = DEFAULT_LISTED_PAIRS
    device: str | None = None


@dataclass(frozen=True)
class LengthEncoding:
    """How `capgeo truncation` embeds the captions at each length (:func:`capgeo.pipeline.embed_at_lengths`)."""

    #: None: DEFAULT_LENGTHS below the encoder's context; the context is always added
    lengths: Sequence[int] | None = None
    cache_dir: object = None
    use_cache: bool = True


def split_options(encoding: LengthEncoding | None = None, options: TruncationOptions | None = None,
                  **fields) -> tuple[LengthEncoding, TruncationOptions]:
    """``encoding`` and ``options`` (default: the defaults) with ``fields`` set, each to the one it names."""
    encoding, options = encoding or LengthEncoding(), options or TruncationOptions()
    mine = {field.name for field in dataclasses.fields(LengthEncoding)}
    return (dataclasses.replace(encoding, **{key: value for key, value in fields.items() if key in mine}),
            dataclasses.replace(options, **{key: value for key, value in fields.items() if key not in mine}))


# --------------------------------------------------------------------------- lengths


def parse_lengths(text: str) -> list[int]:
    """'32,64,128' -> [32, 64, 128]; a CapgeoError naming the bad part otherwise."""
    lengths = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            lengths.append(int(part))
        except ValueError:
            raise CapgeoError(f"--lengths: expected comma-separated token counts such as 32,64,77, "
                              f"got {part!r}") from None
    if not lengths:
        raise CapgeoError("--lengths: give at least one token count, e.g. 32,64,77")
    return lengths


def resolve_lengths(lengths: Sequence[int] | None, info) -> list[int]:
    """Ascending distinct lengths to compare, the encoder's context length always last.

    ``None`` takes :data:`DEFAULT_LENGTHS` up to the context. A length given
    explicitly above the context (or below 2) is an error naming the length,
    the encoder and its context.
    """
    context = int(info.context_length)
    if lengths is None:
        chosen = [length for length in DEFAULT_LENGTHS if length < context]
    else:
        chosen = []
        for length in lengths:
            length = int(length)
            if length > context:
                raise EncoderError(f"--lengths: {length} is above the context length of encoder {info.spec!r} "
                                   f"({info.name}): {context} tokens; choose lengths up to {context}")
            if length < 2:
                raise EncoderError(f"--lengths: {length} is too short: a caption needs at least 2 tokens "
                                   f"(start and end); choose lengths between 2 and {context}")
            chosen.append(length)
    return sorted(set(chosen) | {context})


def check_encoder(encoder) -> None:
    """Precomputed vectors cannot be re-cut: they have no tokenizer and no model."""
    if encoder.info.kind == "precomputed":
        raise _cannot_recut(encoder.info.spec)


def check_encoder_spec(spec: str | None) -> None:
    """:func:`check_encoder` from the spec alone, before anything is loaded or encoded."""
    from capgeo.encoders.registry import spec_kind

    try:
        kind = spec_kind(spec)[0]
    except EncoderError:
        return  # the encoder's own error comes when it is loaded
    if kind == "precomputed":
        raise _cannot_recut(spec)


def _cannot_recut(spec: str) -> EncoderError:
    return EncoderError(f"{spec}: precomputed vectors have no tokenizer and cannot be re-encoded at other lengths; "
                        "pass an encoder to run (--encoder, e.g. ViT-L-14/openai or the default all-MiniLM-L6-v2)")


# --------------------------------------------------------------------------- cut points


def cut_offset(text: str, length: int, token_counts: Callable[[Sequence[str]], np.ndarray]) -> int:
    """Character offset where the ``length``-token prefix of ``text`` ends, at a word boundary.

    ``token_counts`` is the encoder's own (special tokens included). The answer
    is the end of the longest whole-word prefix ``text[:offset]`` whose token
    count is at most ``length``: binary search over word ends, since a longer
    prefix never has fewer tokens. ``len(text)`` when the whole caption fits;
    0 when not even its first word does. Sub-word tokenizers may also have seen
    the first pieces of the word after the offset.
    """
    return cut_offsets([text], length, token_counts)[0]


def cut_offsets(texts: Sequence[str], length: int, token_counts: Callable[[Sequence[str]], np.ndarray]) -> list[int]:
    """:func:`cut_offset` of many captions; their binary searches run in lock step, so
    each step is one batched ``token_counts`` call."""
    texts = list(texts)
    if not texts:
        return []
    counts = np.asarray(token_counts(texts))
    offsets = [len(text) for text in texts]
    # word ends of each caption that is cut; search for the last one that still fits
    pending = {}
    for row, (text, count) in enumerate(zip(texts, counts)):
        if count > length:
            ends = [match.end() for match in _WORD_END.finditer(text)]
            # invariant: prefix ending at ends[low - 1] fits (low = 0: the empty prefix), ends[high] does not
            pending[row] = [ends, 0, len(ends) - 1]
    while True:
        active = [row for row, (ends, low, high) in pending.items() if low < high]
        if not active:
            break
        middles = {row: (pending[row][1] + pending[row][2]) // 2 for row in active}
        prefix_counts = np.asarray(token_counts([texts[row][:pending[row][0][middles[row]]] for row in active]))
        for row, count in zip(active, prefix_counts):
            middle = middles[row]
            if count <= length:
                pending[row][1] = middle + 1
            else:
                pending[row][2] = middle
    for row, (ends, low, _) in pending.items():
        offsets[row] = ends[low - 1] if low > 0 else 0
    return offsets


# --------------------------------------------------------------------------- statistics


def summarize_finite(values: np.ndarray) -> Distribution:
    """summarize_sample (count, mean, std, min, max, p1..p99) of the finite values; nulls when none."""
    from capgeo.geometry.inbatch import summarize_sample

    values = np.asarray(values, dtype=np.float64)
    return _typed(Distribution, summarize_sample(values[np.isfinite(values)]))


def _typed(kind: type, summary):
    """Section ``kind`` of a geometry summary, its values as JSON writes them (numpy as Python, NaN as null)."""
    from capgeo.geometry.profile import to_json_ready

    return kind.from_dict(to_json_ready(summary))


def movement(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Row-wise cosine between each caption's embedding and its full-context embedding."""
    vectors = np.asarray(vectors, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    dots = np.einsum("ij,ij->i", vectors, reference)
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1)
    return np.clip(dots / norms, -1.0, 1.0)


def _distribution(summary) -> Distribution:
    """The compact form kept per length: count, mean, std, min, max, quantiles."""
    keys = ("count", "mean", "std", "min", "max", "quantiles", "quantile_resolution", "exact")
    compact = {key: summary[key] for key in keys if key in summary}
    compact.setdefault("count", summary.get("n"))
    return _typed(Distribution, compact)


@dataclass(frozen=True)
class NearDuplicates:
    """Different-group pairs at or above the threshold at one length, and those of them below it at full context."""

    n_pairs: int
    n_captions: int                 # captions in at least one such pair
    n_truncation_only: int
    truncation_only: list           # (index_a, index_b, cosine at L, cosine at full), best ``keep``, cosine at L desc


#: near-duplicate pairs at one length the pass keeps at most (then it stops with an error naming the limit)
TWIN_PAIRS_KEPT = 5_000_000


def near_duplicates_at_length(vectors: np.ndarray, full_vectors: np.ndarray, group_codes: np.ndarray,
                              cut: np.ndarray, threshold: float, *, keep: int,
                              block_size: int | None = PAIR_BLOCK_SIZE, device=None) -> NearDuplicates:
    """Count the different-group pairs with cosine >= ``threshold`` (exact, every pair) and find
    the truncation-only ones among them: full-context cosine < ``threshold`` and at least one
    of the two captions cut (``cut``: (N,) bool). A pair of two uncut captions saw the same
    tokens at both lengths, so a difference there would be float noise, not truncation.

    The pairs come from the all-pairs pass (:func:`capgeo.geometry.pairwise.scan_pairs` with a
    threshold); :func:`length_statistics` takes them from the pass it runs anyway."""
    from capgeo.geometry.pairwise import scan_pairs

    scan = scan_pairs(vectors, group_codes, top_k=0, block_size=block_size, device=device, histograms=False,
                      threshold=threshold, max_pairs=TWIN_PAIRS_KEPT)
    return near_duplicates_from_pairs(scan.extra["pairs"], full_vectors, cut, threshold, keep=keep)


def near_duplicates_from_pairs(pairs, full_vectors: np.ndarray, cut: np.ndarray, threshold: float, *,
                               keep: int) -> NearDuplicates:
    """:class:`NearDuplicates` from the pass's (rows, columns, cosines) of the pairs at or above ``threshold``."""
    a, b, at_length = (np.asarray(part) for part in pairs)
    full_vectors = np.asarray(full_vectors, dtype=np.float64)
    cut = np.asarray(cut, dtype=bool)
    in_pair = np.zeros(len(cut), dtype=bool)
    in_pair[a] = True
    in_pair[b] = True
    full_cosine = np.zeros(len(a))
    # the pairs may be many: their full-context cosines in chunks, never (pairs x width) at once
    for start in range(0, len(a), PAIR_CHUNK):
        chunk = slice(start, start + PAIR_CHUNK)
        full_cosine[chunk] = np.einsum("ij,ij->i", full_vectors[a[chunk]], full_vectors[b[chunk]])
    only = (full_cosine < threshold) & (cut[a] | cut[b])
    rows = np.zeros((0, 4))
    if keep and only.any():
        rows = _best(np.stack([a[only], b[only], at_length[only].astype(np.float64), full_cosine[only]], axis=1),
                     keep)
    kept = [(int(x), int(y), float(at), float(full)) for x, y, at, full in rows]
    return NearDuplicates(len(a), int(in_pair.sum()), int(only.sum()), kept)


def _best(rows: np.ndarray, keep: int) -> np.ndarray:
    """The ``keep`` rows of (a, b, cosine at L, cosine full) with the highest cosine at L, ties by a, b."""
    order = np.lexsort((rows[:, 1], rows[:, 0], -rows[:, 2]))
    return rows[order[:keep]]


def length_statistics(captions, vectors: np.ndarray, full_vectors: np.ndarray, token_counts: np.ndarray,
                      length: int, reference_length: int, options: TruncationOptions,
                      progress: bool | None = None) -> tuple[TruncationLength, NearDuplicates]:
    """Statistics of the captions' geometry at one length, and its near-duplicate pairs
    (``options``: checked, as :func:`truncation_section` resolves them)."""
    from capgeo.geometry.inbatch import inbatch_statistics
    from capgeo.geometry.pairwise import scan_pairs

    threshold = options.threshold
    group_codes = np.asarray(captions.group_codes)
    k = max(1, min(options.top_k, len(captions) - 1))
    # one pass: distributions, companions and the near-duplicate pairs from the same tiles
    scan = scan_pairs(vectors, group_codes, top_k=k, block_size=options.block_size, device=options.device,
                      progress=progress, threshold=threshold, max_pairs=TWIN_PAIRS_KEPT)
    # captions of which the reference sees more than L tokens (none at the reference itself)
    more_seen = np.minimum(token_counts, reference_length) > length
    near = near_duplicates_from_pairs(scan.extra["pairs"], full_vectors, more_seen, threshold,
                                      keep=options.max_listed)
    inbatch = inbatch_statistics(vectors, group_codes, options.batch_size, n_batches=options.n_batches,
                                 seed=options.seed, edges=options.edges, near_duplicate_threshold=threshold)
    n_cut = int(np.count_nonzero(token_counts > length))
    cosine_to_full = movement(vectors, full_vectors)
    stats = section(
        TruncationLength, max_tokens=int(length), n_cut=n_cut, share_cut=n_cut / len(captions),
        pairwise=_distribution(scan.pairwise_summary()),
        hardest_companion=_distribution(scan.hardest_companion_summary()),
        buckets=_typed(Buckets, inbatch["buckets"]), hardest_in_batch=_typed(Distribution, inbatch["hardest_in_batch"]),
        near_duplicate_in_batch=_typed(BatchNearDuplicates, inbatch["near_duplicate"]),
        near_duplicates=section(TruncationNearDuplicates, threshold=float(threshold), n_pairs=near.n_pairs,
                                n_captions=near.n_captions, n_truncation_only=near.n_truncation_only),
        reference=length == reference_length,
        movement=Movement(all=summarize_finite(cosine_to_full), cut=summarize_finite(cosine_to_full[more_seen])))
    return stats, near


def _pair_rows(captions, rows, length: int, token_counts: np.ndarray, token_counter) -> list[TruncationPair]:
    """The listed truncation-only pairs, each caption with its cut offset at ``length``."""
    if not rows:
        return []
    texts, ids, groups = captions.texts, captions.ids, captions.groups
    needed = sorted({index for row in rows for index in row[:2]})
    offsets = {}
    if token_counter is not None:
        offsets = dict(zip(needed, cut_offsets([texts[i] for i in needed], length, token_counter)))

    def caption(index: int) -> CutCaption:
        offset = offsets.get(index)
        return section(CutCaption, index=int(index), id=ids[index], group=groups[index], text=texts[index],
                       tokens=int(token_counts[index]), cut=bool(token_counts[index] > length),
                       cut_offset=None if offset is None else int(offset))

    return [TruncationPair(max_tokens=int(length), cosine_at_length=float(cosine), cosine_full=float(full_cosine),
                           a=caption(a), b=caption(b))
            for a, b, cosine, full_cosine in rows]


# --------------------------------------------------------------------------- the section


def check_options(captions, threshold: float | None, edges: Sequence[float] | None, batch_size: int | None,
                  max_listed: int) -> tuple[float, tuple[float, ...], int]:
    """Validate the options (before any encoding); return the threshold, edges and batch size to use."""
    from capgeo.geometry.inbatch import DEFAULT_BUCKET_EDGES, DEFAULT_NEAR_DUPLICATE_THRESHOLD, check_edges
    from capgeo.geometry.batch_size import resolve_batch_sizes
    from capgeo.preflight import check_has_negatives, check_pair_threshold

    check_has_negatives(captions)
    n_groups = int(captions.n_groups)
    threshold = DEFAULT_NEAR_DUPLICATE_THRESHOLD if threshold is None else float(threshold)
    check_pair_threshold(threshold)
    edges = check_edges(DEFAULT_BUCKET_EDGES if edges is None else edges)
    batch_size = resolve_batch_sizes(None if batch_size is None else [batch_size], n_groups).headline
    if max_listed < 0:
        raise CapgeoError(f"pairs listed per length must be >= 0, got {max_listed}")
    return threshold, edges, batch_size


def truncation_section(captions, embeddings_by_length: Mapping, encoder=None, options: TruncationOptions | None = None,
                       *, progress: bool | None = None, **fields) -> Truncation:
    """The ``truncation`` section (docs/truncation.md) from embeddings at several lengths.

    ``embeddings_by_length`` maps each maximum token length to the captions'
    :class:`~capgeo.encoders.base.Embeddings` (:func:`capgeo.pipeline.embed_at_lengths`); its
    largest length is the reference (normally the encoder's context).
    ``encoder`` (with ``token_counts``) places the cut points of listed pairs;
    without it they are left out (``cut_offset`` null). ``options``: a
    :class:`TruncationOptions`, its ``fields`` set by keyword (``batch_size=6``);
    ``threshold`` defaults to the profile's near-duplicate threshold, ``batch_size``
    to the profile's (128, or the number of groups when smaller).
    """
    started = time.perf_counter()
    options = dataclasses.replace(options or TruncationOptions(), **fields)
    if not embeddings_by_length:
        raise CapgeoError("truncation: no lengths to compare")
    lengths = sorted(int(length) for length in embeddings_by_length)
    reference_length = lengths[-1]
    reference = embeddings_by_length[reference_length]
    n = len(captions)
    for length in lengths:
        shape = np.shape(embeddings_by_length[length].vectors)
        if len(shape) != 2 or shape[0] != n:
            raise CapgeoError(f"truncation: embeddings at length {length} have shape {shape}, "
                              f"expected one row per caption ({n})")
    token_counts = np.asarray(reference.token_counts, dtype=np.int64)
    if token_counts.size != n or np.any(token_counts < 0):
        raise EncoderError("truncation needs token counts from the encoder's tokenizer; "
                           "precomputed vectors have none")
    threshold, edges, batch_size = check_options(captions, options.threshold, options.edges, options.batch_size,
                                                 options.max_listed)
    options = dataclasses.replace(options, threshold=threshold, edges=edges, batch_size=batch_size)

    full_vectors = np.asarray(reference.vectors, dtype=np.float32)
    token_counter = encoder.token_counts if encoder is not None else None
    per_length, listed = [], []
    for place, length in enumerate(lengths, start=1):
        vectors = np.asarray(embeddings_by_length[length].vectors, dtype=np.float32)
        # one pass per length: each bar says which, or the next one reads as the first running again
        with labelled(pass_label(f"cosines at length {length}", place, len(lengths))):
            stats, near = length_statistics(captions, vectors, full_vectors, token_counts, length, reference_length,
                                            options, progress)
        per_length.append(stats)
        listed += _pair_rows(captions, near.truncation_only, length, token_counts, token_counter)

    return section(
        Truncation, lengths=tuple(lengths), reference_length=reference_length,
        context_length=int(reference.info.context_length), threshold=threshold, batch_size=int(batch_size),
        n_batches=int(options.n_batches), seed=int(options.seed), bucket_edges=tuple(edges),
        top_k=int(options.top_k), max_listed=int(options.max_listed), n_captions=n,
        n_groups=int(captions.n_groups), tokens=summarize_finite(token_counts.astype(np.float64)),
        per_length=tuple(per_length), truncation_only_pairs=tuple(listed),
        cut_offset_method="end of the longest whole-word prefix whose token count (encoder's own "
                          "tokenizer, special tokens included) is at most the length; binary search",
        elapsed_s=round(time.perf_counter() - started, 3))


def truncation_result(captions, text_encoder, embeddings_by_length: Mapping, options: TruncationOptions | None = None,
                      *, progress: bool | None = None, command: str | None = None,
                      started: float | None = None) -> Profile:
    """The typed ``capgeo.profile/1`` Profile of `capgeo truncation` from the embeddings at each length
    (:func:`capgeo.pipeline.embed_at_lengths`): ``dataset``, ``encoder``, ``truncation`` (:func:`truncation_section`
    with ``options``), ``options`` and ``provenance`` (``started``: the run's start, a
    ``time.perf_counter()``)."""
    from capgeo.geometry.profile import SCHEMA, provenance, summarize_dataset, to_json_ready

    started = time.perf_counter() if started is None else started
    options = options or TruncationOptions()
    truncation = truncation_section(captions, embeddings_by_length, text_encoder, options, progress=progress)
    origins = sorted({item.origin for item in embeddings_by_length.values()})
    options_json = {
        "lengths": list(truncation.lengths),
        "batch_size": truncation.batch_size,
        "n_batches": truncation.n_batches,
        "seed": truncation.seed,
        "near_duplicate_threshold": truncation.threshold,
        "buckets": list(truncation.bucket_edges),
        "top_k": truncation.top_k,
        "max_listed": truncation.max_listed,
        "device": options.device,
    }
    made = provenance(command, started, embeddings_origin=origins[0] if len(origins) == 1 else ",".join(origins))
    return Profile(schema=SCHEMA, dataset=Dataset.from_dict(to_json_ready(summarize_dataset(captions))),
                   encoder=Encoder.from_dict(to_json_ready(text_encoder.info.to_dict())), truncation=truncation,
                   options=Options.from_dict(to_json_ready(options_json)),
                   provenance=Provenance.from_dict(to_json_ready(made)),
                   order=("schema", "dataset", "encoder", "truncation", "options", "provenance"))
