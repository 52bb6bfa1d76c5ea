"""The ``capgeo.profile/1`` profile as typed, frozen objects.

:class:`Profile` mirrors docs/profile-schema.md: each documented JSON object is a frozen
dataclass whose fields are its documented keys, in the order they are written. One codec reads
and writes them all (``_Section.from_dict`` / ``to_dict``), from the fields and their annotations:
a new section declares its fields and nothing else. JSON exists only at the edge:
``Profile.from_dict(d).to_dict() == d`` for every profile of the schema, saved profiles of earlier
versions included. The `capgeo leak` result (:class:`Leak`) is a section too: the command, the
profile's ``leak`` section and ``capgeo.leak`` share it.

A key a JSON object did not have is None. Where the schema allows null, null and "not
written" differ (``within_group`` is null for one caption per image, absent from a gamma-only
file): each section's ``nulls`` names the keys written as null, so a None field not in it
was absent. Keys a section does not declare (the schema may gain fields within version 1)
are kept, read-only, in its ``extra`` and written back after the declared ones.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


def _frozen(value):
    """A JSON value without a class of its own, read-only: objects as MappingProxyType, lists as tuples."""
    if isinstance(value, dict):
        return types.MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        # lists of plain values, and lists of such lists (a million companion-id lists), in
        # C-level steps: a call per item would take most of a million-caption report's time outside the pass
        kinds = set(map(type, value))
        if not _holds_containers(kinds):
            return tuple(value)
        if kinds == {list} and not _holds_containers(set(map(type, itertools.chain.from_iterable(value)))):
            return tuple(map(tuple, value))
        return tuple(_frozen(item) for item in value)
    return value


#: a JSON value made read-only as ``from_dict`` reads it, for a section made in code
read_only = _frozen


def _holds_containers(kinds: set) -> bool:
    return any(issubclass(kind, (dict, list)) for kind in kinds)


def _plain(value):
    """A frozen JSON value back as plain dicts and lists."""
    if isinstance(value, (dict, types.MappingProxyType)):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        # the same C-level shortcuts as _frozen: a million companion lists are written in seconds
        kinds = set(map(type, value))
        if not _holds_frozen(kinds):
            return list(value)
        if kinds == {tuple} and not _holds_frozen(set(map(type, itertools.chain.from_iterable(value)))):
            return list(map(list, value))
        return [_plain(item) for item in value]
    return value


def _holds_frozen(kinds: set) -> bool:
    return any(issubclass(kind, (tuple, dict, types.MappingProxyType)) for kind in kinds)


def _kept(data: Mapping[str, Any], declared: frozenset[str]) -> dict:
    """What every section keeps of its JSON object beside its fields (:class:`_Section`): the keys
    written as null, the order the keys came in, and the undeclared keys, read-only."""
    kept = {key: _frozen(value) for key, value in data.items() if key not in declared}
    return {"nulls": frozenset(key for key, value in data.items() if value is None), "order": tuple(data),
            "extra": types.MappingProxyType(kept) if kept else _EMPTY}


def _many(kind: type):
    """The reader of a JSON list of ``kind`` objects."""
    read = kind.from_dict
    return lambda items: tuple(map(read, items))


def _write_many(sections) -> list:
    return [section.to_dict() for section in sections]


def _write_one(section) -> dict:
    return section.to_dict()


#: field types whose JSON values are read and written as they are
_SCALARS = frozenset({str, int, float, bool, type(None)})


@functools.cache
def _codec(section: type) -> tuple[tuple[tuple[str, str, Any, Any], ...], frozenset[str]]:
    """``section``'s codec: per field (name, key, reader, writer), and the declared keys. From the
    fields' resolved annotations, once a class: a field typed as a section class reads and writes
    that class, ``tuple[Section, ...]`` a list of them, a plain value (str, int, float, bool) goes as
    it is (reader and writer None), anything else through :func:`_frozen` / :func:`_plain`. Field
    metadata ``key`` names a JSON key other than the field's name."""
    hints = typing.get_type_hints(section)
    fields = []
    for item in dataclasses.fields(section):
        if item.name in _SECTION_KEPT:
            continue
        hint = hints[item.name]
        members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        kinds = [kind for kind in members if kind is not type(None)]
        kind = kinds[0] if len(kinds) == 1 else None
        inner = typing.get_args(kind) if typing.get_origin(kind) is tuple else ()
        if isinstance(kind, type) and issubclass(kind, _Section):
            read, write = kind.from_dict, _write_one
        elif len(inner) == 2 and inner[1] is Ellipsis and isinstance(inner[0], type) and issubclass(inner[0], _Section):
            read, write = _many(inner[0]), _write_many
        elif kinds and all(kind in _SCALARS for kind in kinds):
            read = write = None
        else:
            read, write = _frozen, _plain
        fields.append((item.name, item.metadata.get("key", item.name), read, write))
    return tuple(fields), frozenset(key for _, key, _, _ in fields)


#: every section's dataclass. ``__eq__``, ``__hash__`` and ``__repr__`` are _Section's, shared: Python 3.11
#: compiles each generated method on its own, and three a class are a third of this module's import,
#: which every `capgeo profile` pays
_section = dataclass(frozen=True, eq=False, repr=False)


@_section
class _Section:
    """What every section holds beside its fields: the keys written as null, the undeclared keys,
    and the order the keys were read in (written back in it, so a round trip is byte for byte).

    Equality, hashing and repr are the ones ``@dataclass(frozen=True)`` generates: the same class
    and equal compared fields (``order`` is not compared); ``Name(field=value, ...)`` over the
    fields shown (not ``nulls``, ``extra``, ``order``)."""

    nulls: frozenset[str] = field(default=frozenset(), kw_only=True, repr=False)
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, kw_only=True, repr=False)
    order: tuple[str, ...] = field(default=(), kw_only=True, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        """The section of its JSON object: each declared key read into its field (:func:`_codec`),
        the rest kept (:func:`_kept`)."""
        fields, keys = _codec(cls)
        values, get = {}, data.get
        for name, key, read, _ in fields:
            value = get(key)
            if value is not None:
                values[name] = value if read is None else read(value)
        return cls(**values, **_kept(data, keys))

    def to_dict(self) -> dict:
        """The JSON object (plain dicts and lists) :meth:`from_dict` read: the declared keys in field
        order without the absent ones (None and not in ``nulls``), then ``extra``; in the order read."""
        out, held, nulls = {}, self.__dict__, self.nulls
        for name, key, _, write in _codec(self.__class__)[0]:
            value = held[name]
            if value is not None:
                out[key] = value if write is None else write(value)
            elif key in nulls:
                out[key] = None
        if self.extra:
            out.update(_plain(self.extra))
        if self.order and list(out) != list(self.order):
            rank = {key: place for place, key in enumerate(self.order)}
            out = dict(sorted(out.items(), key=lambda item: rank.get(item[0], len(rank))))
        return out

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _field_names(self.__class__)[0]
        return tuple(map(self.__getattribute__, compared)) == tuple(map(other.__getattribute__, compared))

    def __hash__(self):
        return hash(tuple(map(self.__getattribute__, _field_names(self.__class__)[0])))

    def __repr__(self):
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _field_names(self.__class__)[1])
        return f"{self.__class__.__qualname__}({shown})"


#: the fields every section has beside its declared keys
_SECTION_KEPT = frozenset({"nulls", "extra", "order"})


@functools.cache
def _field_names(section: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of ``section``'s compared fields and of its shown ones, in field order."""
    fields = dataclasses.fields(section)
    return (tuple(item.name for item in fields if item.compare),
            tuple(item.name for item in fields if item.repr))


@_section
class Histogram(_Section):
    """``{"edges", "counts"}`` (lengths) or with ``start`` and ``width`` (cosine summaries)."""

    edges: tuple[float, ...] | None = None
    counts: tuple[int, ...] | None = None
    start: float | None = None
    width: float | None = None


@_section
class CaptionsPerGroup(_Section):
    min: int | None = None
    mean: float | None = None
    max: int | None = None
    histogram: Mapping[str, int] | None = None


@_section
class Dataset(_Section):
    format: str | None = None
    layout: str | None = None
    source: str | None = None
    n_captions: int | None = None
    n_groups: int | None = None
    captions_per_group: CaptionsPerGroup | None = None
    splits: Mapping[str, int] | None = None
    words_per_caption: Mapping[str, float] | None = None
    examples: tuple | None = None
    skipped: tuple | None = None
    fingerprint: str | None = None
    texts_digest: str | None = None
    groups_digest: str | None = None


@_section
class Encoder(_Section):
    spec: str | None = None
    kind: str | None = None
    name: str | None = None
    width: int | None = None
    context_length: int | None = None
    logit_scale: float | None = None
    fingerprint: str | None = None


@_section
class Lengths(_Section):
    known: bool | None = None
    n: int | None = None
    mean: float | None = None
    median: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: int | None = None
    max: int | None = None
    context_length: int | None = None
    max_tokens: int | None = None
    n_truncated: int | None = None
    share_truncated: float | None = None
    histogram: Histogram | None = None

    @property
    def counted(self) -> bool:
        """Whether the token counts are known (false for precomputed vectors; profiles without the key: true)."""
        return self.known is not False


@_section
class SampleBounds(_Section):
    """How far a sampled distribution's statistics may be from the dataset's (a distribution's
    ``bounds``, sampled mode only; ``{sampled: false, population}`` where every same-group pair was taken)."""

    sampled: bool | None = None
    sample_size: int | None = None
    population: int | None = None
    confidence: float | None = None
    mean_standard_error: float | None = None
    mean_interval: tuple[float, float] | None = None
    cdf_epsilon: float | None = None
    quantile_intervals: Mapping[str, tuple[float, float]] | None = None
    method: str | None = None


@_section
class ProductPrecision(_Section):
    """How far tf32 / bf16 tile products may move the pairwise cosines (``pairwise.precision``)."""

    mode: str | None = None
    cosine_error_bound: float | None = None
    product: str | None = None
    measured_max_error: float | None = None
    measured_pairs: int | None = None
    measured_share_of_bins_changed: float | None = None
    rows_too_close_to_call: int | None = None
    pairs_rescored: int | None = None
    companions: str | None = None


@_section
class CompanionRecall(_Section):
    """Recall of faiss companions against an exact sample (``hardest_companion.recall``)."""

    queries: int | None = None
    recall_at_1: float | None = None
    recall_at_k: float | None = None
    k: int | None = None
    hardest_cosine_mean_error: float | None = None
    method: str | None = None


@_section
class Distribution(_Section):
    """A summary of a set of cosines (pairwise, within_group, hardest_companion, hardest in-batch)."""

    n: int | None = None
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    quantiles: Mapping[str, float | None] | None = None
    quantile_resolution: float | None = None
    share_at_or_above: Mapping[str, float] | None = None
    histogram: Histogram | None = None
    missing: int | None = None
    n_captions: int | None = None
    n_with_companion: int | None = None
    mode: str | None = None
    pairs_total: int | None = None
    count: int | None = None
    exact: bool | None = None
    bin_width: float | None = None
    bounds: SampleBounds | None = None
    precision: ProductPrecision | None = None
    recall: CompanionRecall | None = None

    def quantile(self, key: str) -> float | None:
        """Quantile ``key`` (``"p50"``), None when the summary has no such quantile."""
        return (self.quantiles or _EMPTY).get(key)


@_section
class Companions(_Section):
    """Per caption, parallel lists in caption order (``top_ids``/``top_cosines`` only with include_companions)."""

    caption_id: tuple[str, ...] | None = None
    hardest_id: tuple[str | None, ...] | None = None
    hardest_cosine: tuple[float | None, ...] | None = None
    top_k: int | None = None
    top_ids: tuple[tuple[str, ...], ...] | None = None
    top_cosines: tuple[tuple[float, ...], ...] | None = None


@_section
class ExactDuplicates(_Section):
    normalization: str | None = None
    n_sets: int | None = None
    n_captions: int | None = None
    n_redundant_captions: int | None = None
    n_pairs: int | None = None
    n_pairs_cross_group: int | None = None
    n_pairs_within_group: int | None = None
    n_sets_cross_group: int | None = None
    n_redundant_cross_group: int | None = None
    examples: tuple | None = None


@_section
class NearDuplicates(_Section):
    threshold: float | None = None
    n_pairs_cross_group: int | None = None
    count_method: str | None = None
    n_pairs_from_histogram: int | None = None
    bin_width: float | None = None
    share_pairs: float | None = None
    n_captions_hardest_above: int | None = None
    share_captions_hardest_above: float | None = None
    exact: bool | None = None


@_section
class Buckets(_Section):
    """In-batch negatives by cosine bucket (a batch entry's ``buckets`` or ``relative_buckets``)."""

    kind: str | None = None
    edges: tuple[float, ...] | None = None
    quantile_levels: tuple[float, ...] | None = None
    labels: tuple[str, ...] | None = None
    shares: tuple[float, ...] | None = None
    share_above: tuple[float, ...] | None = None
    expected_above_per_row: tuple[float, ...] | None = None


@_section
class BatchNearDuplicates(_Section):
    """A batch entry's ``near_duplicate``: how often a batch holds a pair at or above the threshold."""

    threshold: float | None = None
    share_batches: float | None = None
    mean_pairs_per_batch: float | None = None


@_section
class BatchExample(_Section):
    """One real batch: its captions' ids and groups and their cosine matrix (diagonal None)."""

    caption_ids: tuple[str, ...] | None = None
    group_ids: tuple[str, ...] | None = None
    cosine: tuple[tuple[float | None, ...], ...] | None = None


@_section
class BatchStatistics(_Section):
    """In-batch statistics for one batch size (one entry of ``batches``)."""

    batch_size: int | None = None
    n_batches: int | None = None
    seed: int | None = None
    negatives_per_row: int | None = None
    buckets: Buckets | None = None
    relative_buckets: Buckets | None = None
    hardest_in_batch: Distribution | None = None
    near_duplicate: BatchNearDuplicates | None = None
    example: BatchExample | None = None


@_section
class Options(_Section):
    """Every option the profile was made with (docs/profile-schema.md, ``options``)."""

    batch_sizes: tuple[int, ...] | None = None
    headline_batch_size: int | None = None
    buckets: tuple[float, ...] | None = None
    relative_buckets: bool | None = None
    relative_quantiles: tuple[float, ...] | None = None
    n_batches: int | None = None
    top_k: int | None = None
    block_size: int | None = None
    block_size_used: int | None = None
    precision: str | None = None
    bins: int | None = None
    seed: int | None = None
    near_duplicate_threshold: float | None = None
    mode: str | None = None
    mode_used: str | None = None
    sampled_above: int | None = None
    sampled_pairs: int | None = None
    companions: str | None = None
    include_companions: bool | None = None
    device: str | None = None


@_section
class Provenance(_Section):
    """Who made the profile, when, with which command (docs/profile-schema.md, ``provenance``)."""

    capgeo_version: str | None = None
    created: str | None = None
    command: str | None = None
    working_directory: str | None = None
    elapsed_s: float | None = None
    embeddings_origin: str | None = None


@_section
class GammaSuggestion(_Section):
    """A batch size's suggested gamma, its range, and whether the clip interval cut them (docs/gamma.md)."""

    gamma: float | None = None
    gamma_exact: float | None = None
    scaled_gamma: float | None = None
    range: tuple[float, float] | None = None
    range_exact: tuple[float, float] | None = None
    target_share: float | None = None
    clipped: bool | None = None
    range_clipped: tuple[bool, bool] | None = None
    clip_note: str | None = None


@_section
class GammaMarginCosines(_Section):
    """Mean over rows of each row's median, 90th-percentile and largest negative cosine, or the
    margins gamma * G at them (a gamma batch's ``margins.cosines`` / ``margins.suggested``)."""

    median: float | None = None
    p90: float | None = None
    hardest: float | None = None


@_section
class GammaPaperMargins(GammaMarginCosines):
    """The paper default's margins on the reference rows, and at DOCCI's mean hardest companion."""

    hardest_companion: float | None = None


@_section
class GammaMargins(_Section):
    """The margin reading of gamma beside the concentration rule (a gamma batch's ``margins``)."""

    cosines: GammaMarginCosines | None = None
    suggested: GammaMarginCosines | None = None
    paper_default: GammaPaperMargins | None = None
    paper_margin_at_mean: float | None = None
    margin_matched_gamma: float | None = None


@_section
class GammaGridRow(_Section):
    """How concentrated the caption-geometry part of each row's softmax is at one gamma (a row of
    a gamma batch's ``grid``; profiles saved before the masses and boosts were recorded lack them)."""

    gamma: float | None = None
    scaled_gamma: float | None = None
    effective_negatives: float | None = None
    effective_share: float | None = None
    hard_bucket_mass: float | None = None
    top_decile_mass: float | None = None
    boost_median: float | None = None
    boost_hardest: float | None = None
    #: what the softmax feels: weight(hardest) / weight(median) = exp(boost_gap)
    boost_gap: float | None = None


@_section
class GammaLossShare(_Section):
    """Share of batches whose loss is below the solved loss, and the mean loss, at initialisation."""

    share_batches_below: float | None = None
    mean_loss: float | None = None


@_section
class GammaBoostedLoss(_Section):
    """:class:`GammaLossShare` of HN-CLIP's boosted loss at one gamma."""

    gamma: float | None = None
    share_batches_below: float | None = None
    mean_loss: float | None = None


@_section
class GammaImageLosses(_Section):
    """The losses at initialisation with image vectors (a gamma batch's ``image``)."""

    solved_loss: float | None = None
    plain: GammaLossShare | None = None
    boosted: tuple[GammaBoostedLoss, ...] | None = None


@_section
class GammaBatch(_Section):
    """The gamma diagnostics at one batch size (an entry of ``gamma.batches``)."""

    batch_size: int | None = None
    negatives_per_row: int | None = None
    n_batches: int | None = None
    n_rows: int | None = None
    mean_cosine: float | None = None
    within_row_spread: float | None = None
    suggestion: GammaSuggestion | None = None
    margins: GammaMargins | None = None
    gaussian_approximation: float | None = None
    why: str | None = None
    grid: tuple[GammaGridRow, ...] | None = None
    image: GammaImageLosses | None = None


@_section
class PaperSweepPoint(_Section):
    """One gamma of the paper's sweep and its average R@1 (an entry of the gamma section's ``paper_sweep``)."""

    gamma: float | None = None
    average_r_at_1: float | None = None


@_section
class GammaReference(_Section):
    """The reference geometry the rule transfers from, and what it gives (the gamma section's ``reference``)."""

    mean_pairwise: float | None = None
    mean_hardest_companion: float | None = None
    n_captions: int | None = None
    share_at_least_0_8: float | None = None
    gamma: float | None = None
    logit_scale: float | None = None
    batch_size: int | None = None
    range_gammas: tuple[float, float] | None = None
    within_row_spread: float | None = None
    between_row_spread: float | None = None
    effective_share: float | None = None
    effective_negatives: float | None = None
    range_shares: tuple[float, float] | None = None
    synthetic_rows: int | None = None
    seed: int | None = None


@_section
class Gamma(_Section):
    """The ``gamma`` section (docs/gamma.md)."""

    rule: str | None = None
    concentration: str | None = None
    headline_batch_size: int | None = None
    suggested_gamma: float | None = None
    suggested_range: tuple[float, float] | None = None
    margin_matched_gamma: float | None = None
    encoder_caution: str | None = None
    paper_sweep: tuple[PaperSweepPoint, ...] | None = None
    paper_sweep_note: str | None = None
    logit_scale: float | None = None
    logit_scale_source: str | None = None
    hard_edge: float | None = None
    gamma_grid: tuple[float, ...] | None = None
    n_batches: int | None = None
    seed: int | None = None
    clip: tuple[float, float] | None = None
    image_embeddings: bool | None = None
    reference: GammaReference | None = None
    batches: tuple[GammaBatch, ...] | None = None
    batch_sizes_left_out: tuple[int, ...] | None = None
    #: the measured curve of `--sweep` (gamma, profile, report; capgeo.findings.gamma_sweep.GammaSweep.to_dict),
    #: read-only
    sweep: Mapping[str, Any] | None = None

    @property
    def headline(self) -> GammaBatch | None:
        """The headline batch size's entry (the first), None without any."""
        return self.batches[0] if self.batches else None

    @property
    def measured_gamma(self) -> float | None:
        """The best gamma of the proxy fine-tune sweep, when one ran (then it is the headline)."""
        return self.sweep.get("measured_gamma") if self.sweep else None

    @property
    def headline_gamma(self) -> float | None:
        """The gamma every screen heads with: the sweep's measured one where a sweep ran, else the rule's."""
        return self.measured_gamma if self.measured_gamma is not None else self.suggested_gamma

    def with_sweep(self, sweep: Mapping[str, Any]) -> "Gamma":
        """This section with a measured curve (GammaSweep.to_dict), frozen as a loaded one is."""
        return dataclasses.replace(self, sweep=_frozen(sweep))


@_section
class Span(_Section):
    """A highlighted word (capgeo.findings.highlight): ``text[start:end]`` of its caption, its kind
    ("shared", "only_a" or "only_b") and its matching key."""

    start: int | None = None
    end: int | None = None
    kind: str | None = None
    word: str | None = None


@_section
class DupesPair(_Section):
    """Two captions of different images and how alike they are (a row of ``dupes.pairs``, or a
    neighbour of an example query), its words marked in ``spans_a``/``spans_b``."""

    rank: int | None = None
    neighbour_rank: int | None = None
    index_a: int | None = None
    index_b: int | None = None
    id_a: str | None = None
    id_b: str | None = None
    group_a: str | None = None
    group_b: str | None = None
    text_a: str | None = None
    text_b: str | None = None
    cosine: float | None = None
    jaccard: float | None = None
    exact_duplicate: bool | None = None
    shared_words: tuple[str, ...] | None = None
    only_a_words: tuple[str, ...] | None = None
    only_b_words: tuple[str, ...] | None = None
    spans_a: tuple[Span, ...] | None = None
    spans_b: tuple[Span, ...] | None = None


@_section
class DupesQuery(_Section):
    """The query caption of an example: its index, id, image and text."""

    index: int | None = None
    id: str | None = None
    group: str | None = None
    text: str | None = None


@_section
class DupesExample(_Section):
    """A query at a quantile of the hardest-companion distribution with its nearest captions of other images."""

    quantile: float | None = None
    target_cosine: float | None = None
    query: DupesQuery | None = None
    hardest_cosine: float | None = None
    neighbours: tuple[DupesPair, ...] | None = None


@_section
class NearDuplicateSet(_Section):
    """A near-duplicate set as `capgeo dupes-sets` lists it (a row of ``dupes.components``): a
    connected component numbered (``component``, 1 = the largest) with its members' ids, images and texts."""

    component: int | None = None
    size: int | None = None
    threshold: float | None = None
    n_groups: int | None = None
    n_edges: int | None = None
    weakest_link: float | None = None
    strongest_link: float | None = None
    min_member_cosine: float | None = None
    indices: tuple[int, ...] | None = None
    ids: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None
    texts: tuple[str, ...] | None = None


@_section
class NearDuplicateTotals(_Section):
    """How many pairs of different images are near-duplicates (cosine >= ``threshold``) and how many
    of those are exact copies; ``n_pairs`` None: more than ``more_than``, too many to count."""

    threshold: float | None = None
    n_pairs: int | None = None
    more_than: int | None = None
    n_exact_duplicate_pairs: int | None = None

    def text(self) -> str:
        """One sentence for the totals, the same in the terminal and the report."""
        head = f"Near-duplicates (cosine >= {self.threshold:g}): "
        if self.n_pairs is None:
            return head + f"more than {self.more_than:,} pairs of different images in all."
        copies = f", {self.n_exact_duplicate_pairs:,} of them exact copies" if self.n_exact_duplicate_pairs else ""
        return head + f"{self.n_pairs:,} pairs of different images in all{copies}."


@_section
class DedupDecision(_Section):
    """Keeping the ``keep`` caption of each of ``n_sets`` near-duplicate sets (a dupes section's
    ``dedup``): what dropping the others removes, and the hardest-companion mean before and after
    (fields in docs/dupes.md); ``seed`` is keep "random"'s, else None."""

    keep: str | None = None
    seed: int | None = None
    n_sets: int | None = None
    n_captions_dropped: int | None = None
    n_groups_dropped: int | None = None
    n_captions_after: int | None = None
    n_groups_after: int | None = None
    hardest_companion_mean_before: float | None = None
    hardest_companion_mean_after: float | None = None
    kept_ids: tuple[str, ...] | None = None
    dropped_ids: tuple[str, ...] | None = None


@_section
class Dupes(_Section):
    """The ``dupes`` section: a ``capgeo.dupes/1`` result (docs/dupes.md)."""

    schema: str | None = None
    n_captions: int | None = None
    n_groups: int | None = None
    threshold: float | None = None
    limit: int | None = None
    top_k: int | None = None
    pairs: tuple[DupesPair, ...] | None = None
    quantiles: tuple[float, ...] | None = None
    examples: tuple[DupesExample, ...] | None = None
    components_threshold: float | None = None
    components: tuple[NearDuplicateSet, ...] | None = None
    warnings: tuple[str, ...] | None = None
    encoder: Encoder | None = None
    skip_exact: bool | None = None
    n_exact_skipped: int | None = None
    near_duplicates: NearDuplicateTotals | None = None
    dedup: DedupDecision | None = None


@_section
class TruncationNearDuplicates(_Section):
    """Near-duplicate pairs at one maximum length, and how many of them only the cut made."""

    threshold: float | None = None
    n_pairs: int | None = None
    n_captions: int | None = None
    n_truncation_only: int | None = None


@_section
class Movement(_Section):
    """How far embeddings move at one length (a length's ``movement``): cosines to the full-context
    embedding, of every caption and of those the reference sees more of."""

    all: Distribution | None = None
    cut: Distribution | None = None


@_section
class TruncationLength(_Section):
    """The geometry at one maximum token length (an entry of ``truncation.per_length``)."""

    max_tokens: int | None = None
    n_cut: int | None = None
    share_cut: float | None = None
    pairwise: Distribution | None = None
    hardest_companion: Distribution | None = None
    buckets: Buckets | None = None
    hardest_in_batch: Distribution | None = None
    near_duplicate_in_batch: BatchNearDuplicates | None = None
    near_duplicates: TruncationNearDuplicates | None = None
    reference: bool | None = None
    movement: Movement | None = None


@_section
class CutCaption(_Section):
    """One caption of a listed truncation-only pair, with where the length cuts it (``cut_offset``
    null when the encoder's tokenizer could not say)."""

    index: int | None = None
    id: str | None = None
    group: str | None = None
    text: str | None = None
    tokens: int | None = None
    cut: bool | None = None
    cut_offset: int | None = None


@_section
class TruncationPair(_Section):
    """A listed pair that is a near-duplicate only because of truncation (``truncation_only_pairs``)."""

    max_tokens: int | None = None
    cosine_at_length: float | None = None
    cosine_full: float | None = None
    a: CutCaption | None = None
    b: CutCaption | None = None


@_section
class Truncation(_Section):
    """The ``truncation`` section (docs/truncation.md)."""

    lengths: tuple[int, ...] | None = None
    reference_length: int | None = None
    context_length: int | None = None
    threshold: float | None = None
    batch_size: int | None = None
    n_batches: int | None = None
    seed: int | None = None
    bucket_edges: tuple[float, ...] | None = None
    top_k: int | None = None
    max_listed: int | None = None
    n_captions: int | None = None
    n_groups: int | None = None
    tokens: Distribution | None = None
    per_length: tuple[TruncationLength, ...] | None = None
    truncation_only_pairs: tuple[TruncationPair, ...] | None = None
    cut_offset_method: str | None = None
    elapsed_s: float | None = None


@_section
class LeakTrain(_Section):
    """The training set a leak was looked for in."""

    source: str | None = None
    format: str | None = None
    n_captions: int | None = None
    n_groups: int | None = None


@_section
class LeakTwin(_Section):
    """A leaked evaluation caption with its closest training twin, words marked as in `capgeo dupes`
    (``spans_eval``/``spans_train``)."""

    eval_id: str | None = None
    eval_group: str | None = None
    eval_text: str | None = None
    train_id: str | None = None
    train_group: str | None = None
    train_text: str | None = None
    cosine: float | None = None
    jaccard: float | None = None
    exact_duplicate: bool | None = None
    shared_words: tuple[str, ...] | None = None
    only_eval_words: tuple[str, ...] | None = None
    only_train_words: tuple[str, ...] | None = None
    spans_eval: tuple[Span, ...] | None = None
    spans_train: tuple[Span, ...] | None = None


@_section
class ImageMatch(_Section):
    """An evaluation image that is a training image: the two image ids (and their image cosine)."""

    eval: str | None = None
    train: str | None = None
    cosine: float | None = None


@_section
class ImageVectorSources(_Section):
    """Where each set's image vectors came from (an image leak's ``vectors``)."""

    train: str | None = None
    eval: str | None = None


@_section
class ImageLeak(_Section):
    """An evaluation set's images that are training images (capgeo.findings.image_leak), in each way
    both sets allow: file name, content hash, image vectors (a way's fields None where it did not apply)."""

    ways: tuple[str, ...] | None = None
    n_name_matches: int | None = None
    name_matches: tuple[ImageMatch, ...] | None = None
    vectors: ImageVectorSources | None = None
    n_hash_matches: int | None = None
    hash_matches: tuple[ImageMatch, ...] | None = None
    threshold: float | None = None
    n_near_images: int | None = None
    near_matches: tuple[ImageMatch, ...] | None = None
    n_images: int | None = None
    n_shared: int | None = None


@_section
class EvalLeak(_Section):
    """One evaluation set's captions with a twin in the training set (docs/leak.md); the image counts
    are None in a profile saved before they were written."""

    source: str | None = None
    format: str | None = None
    n_captions: int | None = None
    n_leaked: int | None = None
    share_leaked: float | None = None
    n_exact: int | None = None
    #: training captions twinned with one of its captions
    n_train_twins: int | None = None
    #: its images, those with a caption twinned, those with every caption twinned
    n_groups: int | None = None
    n_groups_leaked: int | None = None
    n_groups_all_leaked: int | None = None
    #: training images holding a twin
    n_train_groups_twinned: int | None = None
    leaked_groups: tuple[str, ...] | None = None
    all_leaked_groups: tuple[str, ...] | None = None
    leaked_ids: tuple[str, ...] | None = None
    train_ids_to_drop: tuple[str, ...] | None = None
    #: the closest (eval, train) pairs, closest first
    pairs: tuple[LeakTwin, ...] | None = None
    images: ImageLeak | None = None


@_section
class Leak(_Section):
    """Evaluation captions with an exact or near twin in the training set: the `capgeo leak` result
    (``capgeo.leak/1``, docs/leak.md), also a profile's ``leak`` section (`capgeo report --leak`)."""

    schema: str | None = None
    train: LeakTrain | None = None
    #: the encoder's EncoderInfo (None, written as null, for vectors without one)
    encoder: Encoder | None = None
    threshold: float | None = None
    normalize: str | None = None
    #: one per evaluation set, in the order given
    evals: tuple[EvalLeak, ...] | None = None
    #: every set's training twins, in training-set order
    train_ids_to_drop: tuple[str, ...] | None = None

    @property
    def n_leaked(self) -> int:
        """Evaluation captions with a training twin, over every evaluation set."""
        return sum(entry.n_leaked for entry in self.evals or ())

    @property
    def train_source(self) -> str | None:
        return self.train.source if self.train else None

    @property
    def n_train_captions(self) -> int | None:
        return self.train.n_captions if self.train else None

    def to_polars(self):
        """One row per listed pair of every evaluation set, its ``eval_source`` first."""
        import polars as pl

        rows = [{"eval_source": entry.source, **pair.to_dict()} for entry in self.evals or ()
                for pair in entry.pairs or ()]
        if not rows:
            return pl.DataFrame(schema={"eval_source": pl.String})
        return pl.DataFrame(rows, infer_schema_length=None)


@_section
class PairRetrieval(_Section):
    """Retrieval at initialisation, exact (the ``pairs`` section's ``retrieval``): R@1 and R@5 each way."""

    text_to_image_r1: float | None = None
    text_to_image_r5: float | None = None
    image_to_text_r1: float | None = None
    image_to_text_r5: float | None = None
    n_queries_text: int | None = None
    n_queries_image: int | None = None
    #: how ties count (for the pair)
    ties: str | None = None


@_section
class PairCaption(_Section):
    """One of a flagged image's own captions, with its alignment."""

    id: str | None = None
    text: str | None = None
    alignment: float | None = None


@_section
class PairHardestWrong(_Section):
    """An image's most similar caption of another image."""

    id: str | None = None
    image: str | None = None
    text: str | None = None
    cosine: float | None = None


@_section
class PairCard(_Section):
    """One flagged image: its captions with their alignment, and its hardest wrong caption."""

    image: str | None = None
    caption_id: str | None = None
    text: str | None = None
    alignment: float | None = None
    image_rank: int | None = None
    text_rank: int | None = None
    captions: tuple[PairCaption, ...] | None = None
    hardest_wrong: PairHardestWrong | None = None


@_section
class PairMismatched(_Section):
    """The pairs neither direction retrieves (the ``pairs`` section's ``mismatched``), one card per image."""

    rule: str | None = None
    n_pairs: int | None = None
    n_images: int | None = None
    pairs: tuple[PairCard, ...] | None = None


@_section
class PairNegativeRow(_Section):
    """A cross-modal false negative: caption k of another image scoring near pair m's own caption
    (its words marked in ``spans_a``/``spans_b``: :class:`Span`)."""

    image: str | None = None
    caption_id: str | None = None
    text: str | None = None
    negative_id: str | None = None
    negative_image: str | None = None
    negative_text: str | None = None
    cosine: float | None = None
    own_cosine: float | None = None
    margin: float | None = None
    caption_cosine: float | None = None
    boost: float | None = None
    shared_words: tuple[str, ...] | None = None
    spans_a: tuple[Span, ...] | None = None
    spans_b: tuple[Span, ...] | None = None


@_section
class PairFalseNegatives(_Section):
    """The cross-modal false negatives (the ``pairs`` section's ``false_negatives``). ``batch_size``
    and ``output`` are written as null where they do not apply; the per-batch shares and
    ``n_written`` only where they do."""

    delta: float | None = None
    rule: str | None = None
    n_rows: int | None = None
    n_pairs: int | None = None
    n_images: int | None = None
    gamma: float | None = None
    #: the rows of largest margin, largest first
    rows: tuple[PairNegativeRow, ...] | None = None
    batch_size: int | None = None
    output: str | None = None
    batch_share_batches: float | None = None
    batch_mean_per_batch: float | None = None
    n_written: int | None = None


@_section
class PairGammaSaturation(_Section):
    """Saturation at one gamma on the seeded training batches."""

    gamma: float | None = None
    share_batches_below: float | None = None
    mean_loss: float | None = None
    share_zero_gradients: float | None = None


@_section
class PairSaturation(_Section):
    """Saturation at the training batch (the ``pairs`` section's ``saturation``), at gamma 0 and the
    headline gamma, with the batches it was read on."""

    batch_size: int | None = None
    n_batches: int | None = None
    seed: int | None = None
    logit_scale: float | None = None
    logit_scale_source: str | None = None
    solved_loss: float | None = None
    gammas: tuple[PairGammaSaturation, ...] | None = None


@_section
class ImageTwinPair(_Section):
    """Two images of different ids at image cosine >= the threshold."""

    a: str | None = None
    b: str | None = None
    cosine: float | None = None


@_section
class ImageTwins(_Section):
    """Images of different group ids that are one image (the ``pairs`` section's ``twins``):
    identical bytes (where the hashes are known) and near pairs."""

    threshold: float | None = None
    hashes_known: bool | None = None
    n_exact_sets: int | None = None
    n_exact_images: int | None = None
    exact_sets: tuple[tuple[str, ...], ...] | None = None
    n_near_pairs: int | None = None
    n_near_images: int | None = None
    near_pairs: tuple[ImageTwinPair, ...] | None = None


@_section
class Pairs(_Section):
    """The ``pairs`` section (docs/pairs.md): the image side, where image vectors were given."""

    source: str | None = None
    n_pairs: int | None = None
    n_images: int | None = None
    n_images_missing: int | None = None
    alignment: Distribution | None = None
    alignment_per_image: Distribution | None = None
    retrieval: PairRetrieval | None = None
    mismatched: PairMismatched | None = None
    false_negatives: PairFalseNegatives | None = None
    saturation: PairSaturation | None = None
    twins: ImageTwins | None = None
    thumbnails: Mapping[str, str] | None = None


@_section
class CaptionMap(_Section):
    """The ``map`` section: the report's caption map, lists aligned by point."""

    method: str | None = None
    pca_dimensions: int | None = None
    neighbours: int | None = None
    seed: int | None = None
    n_captions: int | None = None
    n_points: int | None = None
    sampled: bool | None = None
    seconds: float | None = None
    near_duplicate_threshold: float | None = None
    text_chars: int | None = None
    x: tuple[float, ...] | None = None
    y: tuple[float, ...] | None = None
    caption_ids: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None
    texts: tuple[str, ...] | None = None
    hardest_companion: tuple[float | None, ...] | None = None
    near_duplicate_set: tuple[int | None, ...] | None = None
    leaked: tuple[bool, ...] | None = None
    #: the images the points show on hover: image (group) id -> base64 JPEG, within the map's budget
    thumbnails: Mapping[str, str] | None = None
    #: distinct images among the points (of which ``thumbnails`` holds some)
    n_mapped_images: int | None = None


@_section
class Profile(_Section):
    """A whole profile. Sections a writer did not include are None (gamma and truncation write only
    their own); ``within_group`` and ``companions`` may also be written as null (``nulls`` says which)."""

    schema: str | None = None
    dataset: Dataset | None = None
    encoder: Encoder | None = None
    lengths: Lengths | None = None
    pairwise: Distribution | None = None
    within_group: Distribution | None = None
    hardest_companion: Distribution | None = None
    companions: Companions | None = None
    exact_duplicates: ExactDuplicates | None = None
    near_duplicates: NearDuplicates | None = None
    batches: tuple[BatchStatistics, ...] | None = None
    options: Options | None = None
    provenance: Provenance | None = None
    dupes: Dupes | None = None
    gamma: Gamma | None = None
    gamma_left_out: str | None = None
    truncation: Truncation | None = None
    leak: Leak | None = None
    map: CaptionMap | None = None
    pairs: Pairs | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "profile", *, check: bool = True) -> "Profile":
        """The typed profile of a ``capgeo.profile/1`` dict; CapgeoError for anything else
        (not a profile, an unknown schema version, a missing dataset/encoder section).
        ``check=False`` reads part of a profile as it is (a reader of one section needs no other)."""
        from capgeo.geometry.profile_schema import check_profile

        if check:
            check_profile(data, where)
        return super().from_dict(data)

    @property
    def headline(self) -> BatchStatistics | None:
        """The headline batch size's in-batch statistics (the first entry), None without any."""
        return self.batches[0] if self.batches else None

    def without(self, name: str) -> "Profile":
        """This profile with section ``name`` left out (absent, not null)."""
        return dataclasses.replace(self, **{name: None}, nulls=self.nulls - {name})

    def written_null(self, name: str) -> bool:
        """Whether section ``name`` was written as null (rather than left out)."""
        return name in self.nulls

    def to_json(self, path: str | Path, *, force: bool = False) -> Path:
        """Write the profile as strict JSON, atomically: the bytes ``capgeo profile --json`` writes.
        As every command, it never writes over the profile's dataset or encoder files, nor, unless
        ``force``, over an existing file capgeo did not write (CapgeoError, docs/errors.md)."""
        from capgeo._atomic import atomic_open
        from capgeo._json_write import dumps

        self._check_output("Profile.to_json", path, force)
        with atomic_open(path) as handle:
            handle.write(dumps(self.to_dict()) + "\n")
        return Path(path)

    def to_html(self, path: str | Path, *, command: str | None = None, force: bool = False) -> Path:
        """Write the profile's HTML report atomically, under the rule of :meth:`to_json`. A profile that
        :func:`capgeo.profile` made holds its captions and embeddings, so the page gets what ``capgeo report
        DATA`` adds to the profile (the near-duplicate gallery, the gamma diagnostics, the caption map); any
        other draws what it holds (what ``capgeo report PROFILE.json`` draws), and the page says in one line
        each what it lacks and the call that adds it."""
        from capgeo.sections import BUILD_REPORT, LIBRARY_REPORT, resolve

        self._check_output("Profile.to_html", path, force)
        return resolve(BUILD_REPORT)(resolve(LIBRARY_REPORT)(self, self.__dict__.get("_made_from")), path,
                                     command=command)

    def _check_output(self, writer: str, path: str | Path, force: bool) -> None:
        """The commands' output rule (capgeo.paths.check_outputs) against the files this profile was made from."""
        from capgeo.paths import check_outputs
        from capgeo.sections import OUTPUT_INPUTS, resolve

        check_outputs(resolve(OUTPUT_INPUTS)(self), {writer: path}, force=force)

    def summary(self, width: int = 100) -> str:
        """The terminal text ``capgeo profile`` prints, without colour."""
        from capgeo.sections import PRINT_SUMMARY, SUMMARY_CONSOLE, resolve

        out = resolve(SUMMARY_CONSOLE)(record=True, width=width, force_terminal=False, color_system=None)
        with out.capture() as captured:
            resolve(PRINT_SUMMARY)(self, out)
        return captured.get()

    def per_caption(self, captions=None, embeddings=None):
        """The per-caption rows of docs/profile-schema.md as a polars DataFrame. Without arguments, for the
        captions and embeddings :func:`capgeo.profile` made this profile from (it keeps them, outside its
        fields: not compared, not written); else for the ``captions`` and ``embeddings`` given, the ones the
        profile was made from (near-duplicate sets re-search their vectors). CapgeoError when the profile
        holds no companion lists (made with ``companion_lists=False``)."""
        from capgeo.errors import CapgeoError
        from capgeo.sections import PER_CAPTION_FRAME, resolve

        if (captions is None) != (embeddings is None):
            raise CapgeoError("per_caption: give both the captions and the embeddings the profile was made from, "
                              "or neither")
        if captions is None:
            made_from = self.__dict__.get("_made_from")
            if made_from is None:
                raise CapgeoError("per_caption(): this profile does not hold the captions and embeddings it was "
                                  "made from (only capgeo.profile(DATA) keeps them; a profile read from JSON or "
                                  "changed with dataclasses.replace does not): pass them, "
                                  "profile.per_caption(captions, embeddings)")
            captions, embeddings = made_from
        if self.companions is None or self.companions.top_ids is None:
            raise CapgeoError("profile: no per-caption companion lists (it was made without them: "
                              "`--no-companions` or companion_lists=False); recompute it with `capgeo profile "
                              "--json` or build_profile(...) to read per-caption rows")
        self._check_made_from(captions, embeddings)
        return resolve(PER_CAPTION_FRAME)(captions, embeddings, self)

    def _keeping(self, captions, embeddings) -> "Profile":
        """This profile, keeping the captions and embeddings it was made from for :meth:`per_caption` and
        :meth:`to_html` (outside its fields: equality, hashing, repr and JSON do not see them)."""
        object.__setattr__(self, "_made_from", (captions, embeddings))
        return self

    def _check_made_from(self, captions, embeddings) -> None:
        """``captions`` and ``embeddings`` are those this profile was made from, as far as it records
        them (count, texts digest): another dataset's rows would name companions it does not hold."""
        from capgeo.errors import CapgeoError

        if not (hasattr(captions, "ids") and hasattr(captions, "texts_digest")):
            raise CapgeoError(f"per_caption: captions must be the CaptionSet the profile was made from "
                              f"(capgeo.load_captions), got {type(captions).__name__}")
        if not (hasattr(embeddings, "vectors") and hasattr(embeddings, "token_counts")):
            raise CapgeoError(f"per_caption: embeddings must be the Embeddings the profile was made from "
                              f"(capgeo.encoders.embed), got {type(embeddings).__name__}")
        dataset = self.dataset or Dataset()
        if (dataset.n_captions is not None and len(captions) != dataset.n_captions) or \
                (dataset.texts_digest and captions.texts_digest() != dataset.texts_digest):
            raise CapgeoError(f"per_caption: these {len(captions):,} captions are not the "
                              f"{dataset.n_captions or 0:,} the profile was made from (texts digest differs); "
                              "give the CaptionSet that was profiled")
        if len(embeddings.vectors) != len(captions):
            raise CapgeoError(f"per_caption: {len(embeddings.vectors):,} embeddings for {len(captions):,} captions; "
                              "give the Embeddings the profile was made from")


def as_section(value, section: type):
    """``value`` read as ``section`` when it is a JSON object; a typed section or None as it is."""
    return section.from_dict(value) if isinstance(value, Mapping) else value


def as_profile(profile: Profile | Mapping[str, Any], *, check: bool = True) -> Profile:
    """``profile`` itself when typed already, else read from its ``capgeo.profile/1`` dict
    (``check=False``: part of one, unchecked)."""
    return profile if isinstance(profile, Profile) else Profile.from_dict(profile, check=check)


def load_typed_profile(path: str | Path) -> Profile:
    """Read a saved profile (``capgeo profile --json FILE``) as a :class:`Profile`, with the one-line
    errors of :func:`capgeo.geometry.profile.load_profile` for unreadable files and other schemas."""
    from capgeo.geometry.profile_schema import load_profile

    return Profile.from_dict(load_profile(path), str(path))
