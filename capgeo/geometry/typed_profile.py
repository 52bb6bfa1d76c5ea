"""The ``capgeo.profile/1`` profile as typed, frozen objects.

:class:`Profile` mirrors docs/profile-schema.md: each documented JSON object is a frozen
dataclass whose fields are its documented keys, each class with its own explicit
``from_dict`` / ``to_dict``. JSON exists only at the edge: ``Profile.from_dict(d).to_dict() == d``
for every profile of the schema, saved profiles of earlier versions included.

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


def _kept(data: Mapping[str, Any], declared: tuple[str, ...]) -> dict:
    """What every section keeps of its JSON object beside its fields (:class:`_Section`): the keys
    written as null, the order the keys came in, and the undeclared keys, read-only."""
    kept = {key: _frozen(value) for key, value in data.items() if key not in declared}
    return {"nulls": frozenset(key for key, value in data.items() if value is None), "order": tuple(data),
            "extra": types.MappingProxyType(kept) if kept else _EMPTY}


def _written(section: "_Section", values: dict) -> dict:
    """``values`` (the declared keys, in schema order) without the absent ones, then ``extra``."""
    out = {key: value for key, value in values.items() if value is not None or key in section.nulls}
    out.update(_plain(section.extra))
    if section.order and list(out) != list(section.order):
        rank = {key: place for place, key in enumerate(section.order)}
        out = dict(sorted(out.items(), key=lambda item: rank.get(item[0], len(rank))))
    return out


def _one(kind, value):
    """``value`` (a JSON object or None) as section ``kind``."""
    return None if value is None else kind.from_dict(value)


def _many(kind, value):
    return None if value is None else tuple(kind.from_dict(item) for item in value)


def _dict(section):
    return None if section is None else section.to_dict()


def _dicts(sections):
    return None if sections is None else [section.to_dict() for section in sections]


def _tuple(value):
    return None if value is None else _frozen(value)


def _list(value):
    return None if value is None else _plain(value)


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

    KEYS = ("edges", "counts", "start", "width")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Histogram":
        return cls(edges=_tuple(data.get("edges")), counts=_tuple(data.get("counts")), start=data.get("start"),
                   width=data.get("width"), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"edges": _list(self.edges), "counts": _list(self.counts), "start": self.start,
                               "width": self.width})


@_section
class CaptionsPerGroup(_Section):
    min: int | None = None
    mean: float | None = None
    max: int | None = None
    histogram: Mapping[str, int] | None = None

    KEYS = ("min", "mean", "max", "histogram")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CaptionsPerGroup":
        return cls(min=data.get("min"), mean=data.get("mean"), max=data.get("max"),
                   histogram=_tuple(data.get("histogram")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"min": self.min, "mean": self.mean, "max": self.max,
                               "histogram": _list(self.histogram)})


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

    KEYS = ("format", "layout", "source", "n_captions", "n_groups", "captions_per_group", "splits",
            "words_per_caption", "examples", "skipped", "fingerprint", "texts_digest", "groups_digest")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Dataset":
        return cls(format=data.get("format"), layout=data.get("layout"), source=data.get("source"),
                   n_captions=data.get("n_captions"), n_groups=data.get("n_groups"),
                   captions_per_group=_one(CaptionsPerGroup, data.get("captions_per_group")),
                   splits=_tuple(data.get("splits")), words_per_caption=_tuple(data.get("words_per_caption")),
                   examples=_tuple(data.get("examples")), skipped=_tuple(data.get("skipped")),
                   fingerprint=data.get("fingerprint"), texts_digest=data.get("texts_digest"),
                   groups_digest=data.get("groups_digest"), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "format": self.format, "layout": self.layout, "source": self.source, "n_captions": self.n_captions,
            "n_groups": self.n_groups, "captions_per_group": _dict(self.captions_per_group),
            "splits": _list(self.splits), "words_per_caption": _list(self.words_per_caption),
            "examples": _list(self.examples), "skipped": _list(self.skipped), "fingerprint": self.fingerprint,
            "texts_digest": self.texts_digest, "groups_digest": self.groups_digest})


@_section
class Encoder(_Section):
    spec: str | None = None
    kind: str | None = None
    name: str | None = None
    width: int | None = None
    context_length: int | None = None
    logit_scale: float | None = None
    fingerprint: str | None = None

    KEYS = ("spec", "kind", "name", "width", "context_length", "logit_scale", "fingerprint")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Encoder":
        return cls(spec=data.get("spec"), kind=data.get("kind"), name=data.get("name"), width=data.get("width"),
                   context_length=data.get("context_length"), logit_scale=data.get("logit_scale"),
                   fingerprint=data.get("fingerprint"), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"spec": self.spec, "kind": self.kind, "name": self.name, "width": self.width,
                               "context_length": self.context_length, "logit_scale": self.logit_scale,
                               "fingerprint": self.fingerprint})


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

    KEYS = ("known", "n", "mean", "median", "p95", "p99", "min", "max", "context_length", "max_tokens",
            "n_truncated", "share_truncated", "histogram")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Lengths":
        return cls(known=data.get("known"), n=data.get("n"), mean=data.get("mean"), median=data.get("median"),
                   p95=data.get("p95"), p99=data.get("p99"), min=data.get("min"), max=data.get("max"),
                   context_length=data.get("context_length"), max_tokens=data.get("max_tokens"),
                   n_truncated=data.get("n_truncated"), share_truncated=data.get("share_truncated"),
                   histogram=_one(Histogram, data.get("histogram")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "known": self.known, "n": self.n, "mean": self.mean, "median": self.median, "p95": self.p95,
            "p99": self.p99, "min": self.min, "max": self.max, "context_length": self.context_length,
            "max_tokens": self.max_tokens, "n_truncated": self.n_truncated,
            "share_truncated": self.share_truncated, "histogram": _dict(self.histogram)})

    @property
    def counted(self) -> bool:
        """Whether the token counts are known (false for precomputed vectors; profiles without the key: true)."""
        return self.known is not False


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
    bounds: Mapping[str, Any] | None = None
    precision: Mapping[str, Any] | None = None
    recall: Mapping[str, Any] | None = None

    KEYS = ("n", "mean", "std", "min", "max", "quantiles", "quantile_resolution", "share_at_or_above", "histogram",
            "missing", "n_captions", "n_with_companion", "mode", "pairs_total", "count", "exact", "bin_width",
            "bounds", "precision", "recall")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Distribution":
        return cls(n=data.get("n"), mean=data.get("mean"), std=data.get("std"), min=data.get("min"),
                   max=data.get("max"), quantiles=_tuple(data.get("quantiles")),
                   quantile_resolution=data.get("quantile_resolution"),
                   share_at_or_above=_tuple(data.get("share_at_or_above")),
                   histogram=_one(Histogram, data.get("histogram")), missing=data.get("missing"),
                   n_captions=data.get("n_captions"), n_with_companion=data.get("n_with_companion"),
                   mode=data.get("mode"), pairs_total=data.get("pairs_total"), count=data.get("count"),
                   exact=data.get("exact"), bin_width=data.get("bin_width"), bounds=_tuple(data.get("bounds")),
                   precision=_tuple(data.get("precision")), recall=_tuple(data.get("recall")),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "n": self.n, "mean": self.mean, "std": self.std, "min": self.min, "max": self.max,
            "quantiles": _list(self.quantiles), "quantile_resolution": self.quantile_resolution,
            "share_at_or_above": _list(self.share_at_or_above), "histogram": _dict(self.histogram),
            "missing": self.missing, "n_captions": self.n_captions, "n_with_companion": self.n_with_companion,
            "mode": self.mode, "pairs_total": self.pairs_total, "count": self.count, "exact": self.exact,
            "bin_width": self.bin_width, "bounds": _list(self.bounds), "precision": _list(self.precision),
            "recall": _list(self.recall)})

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

    KEYS = ("caption_id", "hardest_id", "hardest_cosine", "top_k", "top_ids", "top_cosines")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Companions":
        return cls(caption_id=_tuple(data.get("caption_id")), hardest_id=_tuple(data.get("hardest_id")),
                   hardest_cosine=_tuple(data.get("hardest_cosine")), top_k=data.get("top_k"),
                   top_ids=_tuple(data.get("top_ids")), top_cosines=_tuple(data.get("top_cosines")),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"caption_id": _list(self.caption_id), "hardest_id": _list(self.hardest_id),
                               "hardest_cosine": _list(self.hardest_cosine), "top_k": self.top_k,
                               "top_ids": _list(self.top_ids), "top_cosines": _list(self.top_cosines)})


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

    KEYS = ("normalization", "n_sets", "n_captions", "n_redundant_captions", "n_pairs", "n_pairs_cross_group",
            "n_pairs_within_group", "n_sets_cross_group", "n_redundant_cross_group", "examples")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ExactDuplicates":
        return cls(normalization=data.get("normalization"), n_sets=data.get("n_sets"),
                   n_captions=data.get("n_captions"), n_redundant_captions=data.get("n_redundant_captions"),
                   n_pairs=data.get("n_pairs"), n_pairs_cross_group=data.get("n_pairs_cross_group"),
                   n_pairs_within_group=data.get("n_pairs_within_group"),
                   n_sets_cross_group=data.get("n_sets_cross_group"),
                   n_redundant_cross_group=data.get("n_redundant_cross_group"), examples=_tuple(data.get("examples")),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "normalization": self.normalization, "n_sets": self.n_sets, "n_captions": self.n_captions,
            "n_redundant_captions": self.n_redundant_captions, "n_pairs": self.n_pairs,
            "n_pairs_cross_group": self.n_pairs_cross_group, "n_pairs_within_group": self.n_pairs_within_group,
            "n_sets_cross_group": self.n_sets_cross_group, "n_redundant_cross_group": self.n_redundant_cross_group,
            "examples": _list(self.examples)})


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

    KEYS = ("threshold", "n_pairs_cross_group", "count_method", "n_pairs_from_histogram", "bin_width", "share_pairs",
            "n_captions_hardest_above", "share_captions_hardest_above", "exact")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "NearDuplicates":
        return cls(threshold=data.get("threshold"), n_pairs_cross_group=data.get("n_pairs_cross_group"),
                   count_method=data.get("count_method"), n_pairs_from_histogram=data.get("n_pairs_from_histogram"),
                   bin_width=data.get("bin_width"), share_pairs=data.get("share_pairs"),
                   n_captions_hardest_above=data.get("n_captions_hardest_above"),
                   share_captions_hardest_above=data.get("share_captions_hardest_above"), exact=data.get("exact"),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "threshold": self.threshold, "n_pairs_cross_group": self.n_pairs_cross_group,
            "count_method": self.count_method, "n_pairs_from_histogram": self.n_pairs_from_histogram,
            "bin_width": self.bin_width, "share_pairs": self.share_pairs,
            "n_captions_hardest_above": self.n_captions_hardest_above,
            "share_captions_hardest_above": self.share_captions_hardest_above, "exact": self.exact})


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

    KEYS = ("kind", "edges", "quantile_levels", "labels", "shares", "share_above", "expected_above_per_row")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Buckets":
        return cls(kind=data.get("kind"), edges=_tuple(data.get("edges")),
                   quantile_levels=_tuple(data.get("quantile_levels")), labels=_tuple(data.get("labels")),
                   shares=_tuple(data.get("shares")), share_above=_tuple(data.get("share_above")),
                   expected_above_per_row=_tuple(data.get("expected_above_per_row")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "kind": self.kind, "edges": _list(self.edges), "quantile_levels": _list(self.quantile_levels),
            "labels": _list(self.labels), "shares": _list(self.shares), "share_above": _list(self.share_above),
            "expected_above_per_row": _list(self.expected_above_per_row)})


@_section
class BatchNearDuplicates(_Section):
    """A batch entry's ``near_duplicate``: how often a batch holds a pair at or above the threshold."""

    threshold: float | None = None
    share_batches: float | None = None
    mean_pairs_per_batch: float | None = None

    KEYS = ("threshold", "share_batches", "mean_pairs_per_batch")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BatchNearDuplicates":
        return cls(threshold=data.get("threshold"), share_batches=data.get("share_batches"),
                   mean_pairs_per_batch=data.get("mean_pairs_per_batch"), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"threshold": self.threshold, "share_batches": self.share_batches,
                               "mean_pairs_per_batch": self.mean_pairs_per_batch})


@_section
class BatchExample(_Section):
    """One real batch: its captions' ids and groups and their cosine matrix (diagonal None)."""

    caption_ids: tuple[str, ...] | None = None
    group_ids: tuple[str, ...] | None = None
    cosine: tuple[tuple[float | None, ...], ...] | None = None

    KEYS = ("caption_ids", "group_ids", "cosine")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BatchExample":
        return cls(caption_ids=_tuple(data.get("caption_ids")), group_ids=_tuple(data.get("group_ids")),
                   cosine=_tuple(data.get("cosine")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"caption_ids": _list(self.caption_ids), "group_ids": _list(self.group_ids),
                               "cosine": _list(self.cosine)})


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

    KEYS = ("batch_size", "n_batches", "seed", "negatives_per_row", "buckets", "relative_buckets",
            "hardest_in_batch", "near_duplicate", "example")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BatchStatistics":
        return cls(batch_size=data.get("batch_size"), n_batches=data.get("n_batches"), seed=data.get("seed"),
                   negatives_per_row=data.get("negatives_per_row"), buckets=_one(Buckets, data.get("buckets")),
                   relative_buckets=_one(Buckets, data.get("relative_buckets")),
                   hardest_in_batch=_one(Distribution, data.get("hardest_in_batch")),
                   near_duplicate=_one(BatchNearDuplicates, data.get("near_duplicate")),
                   example=_one(BatchExample, data.get("example")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "batch_size": self.batch_size, "n_batches": self.n_batches, "seed": self.seed,
            "negatives_per_row": self.negatives_per_row, "buckets": _dict(self.buckets),
            "relative_buckets": _dict(self.relative_buckets), "hardest_in_batch": _dict(self.hardest_in_batch),
            "near_duplicate": _dict(self.near_duplicate), "example": _dict(self.example)})


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

    KEYS = ("batch_sizes", "headline_batch_size", "buckets", "relative_buckets", "relative_quantiles", "n_batches",
            "top_k", "block_size", "block_size_used", "precision", "bins", "seed", "near_duplicate_threshold",
            "mode", "mode_used", "sampled_above", "sampled_pairs", "companions", "include_companions", "device")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Options":
        return cls(batch_sizes=_tuple(data.get("batch_sizes")), headline_batch_size=data.get("headline_batch_size"),
                   buckets=_tuple(data.get("buckets")), relative_buckets=data.get("relative_buckets"),
                   relative_quantiles=_tuple(data.get("relative_quantiles")), n_batches=data.get("n_batches"),
                   top_k=data.get("top_k"), block_size=data.get("block_size"),
                   block_size_used=data.get("block_size_used"), precision=data.get("precision"),
                   bins=data.get("bins"), seed=data.get("seed"),
                   near_duplicate_threshold=data.get("near_duplicate_threshold"), mode=data.get("mode"),
                   mode_used=data.get("mode_used"), sampled_above=data.get("sampled_above"),
                   sampled_pairs=data.get("sampled_pairs"), companions=data.get("companions"),
                   include_companions=data.get("include_companions"), device=data.get("device"),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "batch_sizes": _list(self.batch_sizes), "headline_batch_size": self.headline_batch_size,
            "buckets": _list(self.buckets), "relative_buckets": self.relative_buckets,
            "relative_quantiles": _list(self.relative_quantiles), "n_batches": self.n_batches, "top_k": self.top_k,
            "block_size": self.block_size, "block_size_used": self.block_size_used, "precision": self.precision,
            "bins": self.bins, "seed": self.seed, "near_duplicate_threshold": self.near_duplicate_threshold,
            "mode": self.mode, "mode_used": self.mode_used, "sampled_above": self.sampled_above,
            "sampled_pairs": self.sampled_pairs, "companions": self.companions,
            "include_companions": self.include_companions, "device": self.device})


@_section
class Provenance(_Section):
    """Who made the profile, when, with which command (docs/profile-schema.md, ``provenance``)."""

    capgeo_version: str | None = None
    created: str | None = None
    command: str | None = None
    working_directory: str | None = None
    elapsed_s: float | None = None
    embeddings_origin: str | None = None

    KEYS = ("capgeo_version", "created", "command", "working_directory", "elapsed_s", "embeddings_origin")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Provenance":
        return cls(capgeo_version=data.get("capgeo_version"), created=data.get("created"),
                   command=data.get("command"), working_directory=data.get("working_directory"),
                   elapsed_s=data.get("elapsed_s"), embeddings_origin=data.get("embeddings_origin"),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"capgeo_version": self.capgeo_version, "created": self.created,
                               "command": self.command, "working_directory": self.working_directory,
                               "elapsed_s": self.elapsed_s, "embeddings_origin": self.embeddings_origin})


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

    KEYS = ("gamma", "gamma_exact", "scaled_gamma", "range", "range_exact", "target_share", "clipped",
            "range_clipped", "clip_note")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GammaSuggestion":
        return cls(gamma=data.get("gamma"), gamma_exact=data.get("gamma_exact"), scaled_gamma=data.get("scaled_gamma"),
                   range=_tuple(data.get("range")), range_exact=_tuple(data.get("range_exact")),
                   target_share=data.get("target_share"), clipped=data.get("clipped"),
                   range_clipped=_tuple(data.get("range_clipped")), clip_note=data.get("clip_note"),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "gamma": self.gamma, "gamma_exact": self.gamma_exact, "scaled_gamma": self.scaled_gamma,
            "range": _list(self.range), "range_exact": _list(self.range_exact), "target_share": self.target_share,
            "clipped": self.clipped, "range_clipped": _list(self.range_clipped), "clip_note": self.clip_note})


@_section
class GammaBatch(_Section):
    """The gamma diagnostics at one batch size (an entry of ``gamma.batches``); ``grid`` rows,
    ``margins`` and ``image`` stay read-only JSON."""

    batch_size: int | None = None
    negatives_per_row: int | None = None
    n_batches: int | None = None
    n_rows: int | None = None
    mean_cosine: float | None = None
    within_row_spread: float | None = None
    suggestion: GammaSuggestion | None = None
    margins: Mapping[str, Any] | None = None
    gaussian_approximation: float | None = None
    why: str | None = None
    grid: tuple | None = None
    image: Mapping[str, Any] | None = None

    KEYS = ("batch_size", "negatives_per_row", "n_batches", "n_rows", "mean_cosine", "within_row_spread",
            "suggestion", "margins", "gaussian_approximation", "why", "grid", "image")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GammaBatch":
        return cls(batch_size=data.get("batch_size"), negatives_per_row=data.get("negatives_per_row"),
                   n_batches=data.get("n_batches"), n_rows=data.get("n_rows"), mean_cosine=data.get("mean_cosine"),
                   within_row_spread=data.get("within_row_spread"),
                   suggestion=_one(GammaSuggestion, data.get("suggestion")), margins=_tuple(data.get("margins")),
                   gaussian_approximation=data.get("gaussian_approximation"), why=data.get("why"),
                   grid=_tuple(data.get("grid")), image=_tuple(data.get("image")),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "batch_size": self.batch_size, "negatives_per_row": self.negatives_per_row, "n_batches": self.n_batches,
            "n_rows": self.n_rows, "mean_cosine": self.mean_cosine, "within_row_spread": self.within_row_spread,
            "suggestion": _dict(self.suggestion), "margins": _list(self.margins),
            "gaussian_approximation": self.gaussian_approximation, "why": self.why, "grid": _list(self.grid),
            "image": _list(self.image)})


@_section
class Gamma(_Section):
    """The ``gamma`` section (docs/gamma.md); its ``reference`` and ``paper_sweep`` stay read-only JSON."""

    rule: str | None = None
    concentration: str | None = None
    headline_batch_size: int | None = None
    suggested_gamma: float | None = None
    suggested_range: tuple[float, float] | None = None
    margin_matched_gamma: float | None = None
    encoder_caution: str | None = None
    paper_sweep: tuple | None = None
    paper_sweep_note: str | None = None
    logit_scale: float | None = None
    logit_scale_source: str | None = None
    hard_edge: float | None = None
    gamma_grid: tuple[float, ...] | None = None
    n_batches: int | None = None
    seed: int | None = None
    clip: tuple[float, float] | None = None
    image_embeddings: bool | None = None
    reference: Mapping[str, Any] | None = None
    batches: tuple[GammaBatch, ...] | None = None
    batch_sizes_left_out: tuple[int, ...] | None = None
    #: the measured curve of `--sweep` (gamma, profile, report; capgeo.findings.gamma_sweep.GammaSweep.to_dict),
    #: read-only
    sweep: Mapping[str, Any] | None = None

    KEYS = ("rule", "concentration", "headline_batch_size", "suggested_gamma", "suggested_range",
            "margin_matched_gamma", "encoder_caution", "paper_sweep", "paper_sweep_note", "logit_scale",
            "logit_scale_source", "hard_edge", "gamma_grid", "n_batches", "seed", "clip", "image_embeddings",
            "reference", "batches", "batch_sizes_left_out", "sweep")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Gamma":
        return cls(rule=data.get("rule"), concentration=data.get("concentration"),
                   headline_batch_size=data.get("headline_batch_size"), suggested_gamma=data.get("suggested_gamma"),
                   suggested_range=_tuple(data.get("suggested_range")),
                   margin_matched_gamma=data.get("margin_matched_gamma"), encoder_caution=data.get("encoder_caution"),
                   paper_sweep=_tuple(data.get("paper_sweep")), paper_sweep_note=data.get("paper_sweep_note"),
                   logit_scale=data.get("logit_scale"), logit_scale_source=data.get("logit_scale_source"),
                   hard_edge=data.get("hard_edge"), gamma_grid=_tuple(data.get("gamma_grid")),
                   n_batches=data.get("n_batches"), seed=data.get("seed"), clip=_tuple(data.get("clip")),
                   image_embeddings=data.get("image_embeddings"), reference=_tuple(data.get("reference")),
                   batches=_many(GammaBatch, data.get("batches")), batch_sizes_left_out=_tuple(data.get("batch_sizes_left_out")),
                   sweep=_tuple(data.get("sweep")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "rule": self.rule, "concentration": self.concentration, "headline_batch_size": self.headline_batch_size,
            "suggested_gamma": self.suggested_gamma, "suggested_range": _list(self.suggested_range),
            "margin_matched_gamma": self.margin_matched_gamma, "encoder_caution": self.encoder_caution,
            "paper_sweep": _list(self.paper_sweep), "paper_sweep_note": self.paper_sweep_note,
            "logit_scale": self.logit_scale, "logit_scale_source": self.logit_scale_source,
            "hard_edge": self.hard_edge, "gamma_grid": _list(self.gamma_grid), "n_batches": self.n_batches,
            "seed": self.seed, "clip": _list(self.clip), "image_embeddings": self.image_embeddings,
            "reference": _list(self.reference), "batches": _dicts(self.batches),
            "batch_sizes_left_out": _list(self.batch_sizes_left_out), "sweep": _list(self.sweep)})

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
        return dataclasses.replace(self, sweep=_tuple(sweep))


@_section
class DupesPair(_Section):
    """Two captions of different images and how alike they are (a row of ``dupes.pairs``, or a
    neighbour of an example query); ``spans_a``/``spans_b`` are read-only ``{start, end, kind}`` mappings."""

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
    spans_a: tuple[Mapping[str, Any], ...] | None = None
    spans_b: tuple[Mapping[str, Any], ...] | None = None

    KEYS = ("rank", "neighbour_rank", "index_a", "index_b", "id_a", "id_b", "group_a", "group_b", "text_a", "text_b",
            "cosine", "jaccard", "exact_duplicate", "shared_words", "only_a_words", "only_b_words", "spans_a",
            "spans_b")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DupesPair":
        return cls(rank=data.get("rank"), neighbour_rank=data.get("neighbour_rank"), index_a=data.get("index_a"),
                   index_b=data.get("index_b"), id_a=data.get("id_a"), id_b=data.get("id_b"),
                   group_a=data.get("group_a"), group_b=data.get("group_b"), text_a=data.get("text_a"),
                   text_b=data.get("text_b"), cosine=data.get("cosine"), jaccard=data.get("jaccard"),
                   exact_duplicate=data.get("exact_duplicate"), shared_words=_tuple(data.get("shared_words")),
                   only_a_words=_tuple(data.get("only_a_words")), only_b_words=_tuple(data.get("only_b_words")),
                   spans_a=_tuple(data.get("spans_a")), spans_b=_tuple(data.get("spans_b")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "rank": self.rank, "neighbour_rank": self.neighbour_rank, "index_a": self.index_a,
            "index_b": self.index_b, "id_a": self.id_a, "id_b": self.id_b, "group_a": self.group_a,
            "group_b": self.group_b, "text_a": self.text_a, "text_b": self.text_b, "cosine": self.cosine,
            "jaccard": self.jaccard, "exact_duplicate": self.exact_duplicate,
            "shared_words": _list(self.shared_words), "only_a_words": _list(self.only_a_words),
            "only_b_words": _list(self.only_b_words), "spans_a": _list(self.spans_a), "spans_b": _list(self.spans_b)})


@_section
class DupesQuery(_Section):
    """The query caption of an example: its index, id, image and text."""

    index: int | None = None
    id: str | None = None
    group: str | None = None
    text: str | None = None

    KEYS = ("index", "id", "group", "text")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DupesQuery":
        return cls(index=data.get("index"), id=data.get("id"), group=data.get("group"), text=data.get("text"),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"index": self.index, "id": self.id, "group": self.group, "text": self.text})


@_section
class DupesExample(_Section):
    """A query at a quantile of the hardest-companion distribution with its nearest captions of other images."""

    quantile: float | None = None
    target_cosine: float | None = None
    query: DupesQuery | None = None
    hardest_cosine: float | None = None
    neighbours: tuple[DupesPair, ...] | None = None

    KEYS = ("quantile", "target_cosine", "query", "hardest_cosine", "neighbours")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DupesExample":
        return cls(quantile=data.get("quantile"), target_cosine=data.get("target_cosine"),
                   query=_one(DupesQuery, data.get("query")), hardest_cosine=data.get("hardest_cosine"),
                   neighbours=_many(DupesPair, data.get("neighbours")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"quantile": self.quantile, "target_cosine": self.target_cosine,
                               "query": _dict(self.query), "hardest_cosine": self.hardest_cosine,
                               "neighbours": _dicts(self.neighbours)})


@_section
class Dupes(_Section):
    """The ``dupes`` section: a ``capgeo.dupes/1`` result (docs/dupes.md); its components,
    near-duplicate totals and ``dedup`` stay read-only JSON."""

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
    components: tuple | None = None
    warnings: tuple[str, ...] | None = None
    encoder: Encoder | None = None
    skip_exact: bool | None = None
    n_exact_skipped: int | None = None
    near_duplicates: Mapping[str, Any] | None = None
    dedup: Mapping[str, Any] | None = None

    KEYS = ("schema", "n_captions", "n_groups", "threshold", "limit", "top_k", "pairs", "quantiles", "examples",
            "components_threshold", "components", "warnings", "encoder", "skip_exact", "n_exact_skipped",
            "near_duplicates", "dedup")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Dupes":
        return cls(schema=data.get("schema"), n_captions=data.get("n_captions"), n_groups=data.get("n_groups"),
                   threshold=data.get("threshold"), limit=data.get("limit"), top_k=data.get("top_k"),
                   pairs=_many(DupesPair, data.get("pairs")), quantiles=_tuple(data.get("quantiles")),
                   examples=_many(DupesExample, data.get("examples")), components_threshold=data.get("components_threshold"),
                   components=_tuple(data.get("components")), warnings=_tuple(data.get("warnings")),
                   encoder=_one(Encoder, data.get("encoder")), skip_exact=data.get("skip_exact"),
                   n_exact_skipped=data.get("n_exact_skipped"), near_duplicates=_tuple(data.get("near_duplicates")),
                   dedup=_tuple(data.get("dedup")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "schema": self.schema, "n_captions": self.n_captions, "n_groups": self.n_groups,
            "threshold": self.threshold, "limit": self.limit, "top_k": self.top_k, "pairs": _dicts(self.pairs),
            "quantiles": _list(self.quantiles), "examples": _dicts(self.examples),
            "components_threshold": self.components_threshold, "components": _list(self.components),
            "warnings": _list(self.warnings), "encoder": _dict(self.encoder), "skip_exact": self.skip_exact,
            "n_exact_skipped": self.n_exact_skipped, "near_duplicates": _list(self.near_duplicates),
            "dedup": _list(self.dedup)})


@_section
class TruncationNearDuplicates(_Section):
    """Near-duplicate pairs at one maximum length, and how many of them only the cut made."""

    threshold: float | None = None
    n_pairs: int | None = None
    n_captions: int | None = None
    n_truncation_only: int | None = None

    KEYS = ("threshold", "n_pairs", "n_captions", "n_truncation_only")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TruncationNearDuplicates":
        return cls(threshold=data.get("threshold"), n_pairs=data.get("n_pairs"), n_captions=data.get("n_captions"),
                   n_truncation_only=data.get("n_truncation_only"), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {"threshold": self.threshold, "n_pairs": self.n_pairs, "n_captions": self.n_captions,
                               "n_truncation_only": self.n_truncation_only})


@_section
class TruncationLength(_Section):
    """The geometry at one maximum token length (an entry of ``truncation.per_length``); ``movement``
    stays read-only JSON."""

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
    movement: Mapping[str, Any] | None = None

    KEYS = ("max_tokens", "n_cut", "share_cut", "pairwise", "hardest_companion", "buckets", "hardest_in_batch",
            "near_duplicate_in_batch", "near_duplicates", "reference", "movement")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TruncationLength":
        return cls(max_tokens=data.get("max_tokens"), n_cut=data.get("n_cut"), share_cut=data.get("share_cut"),
                   pairwise=_one(Distribution, data.get("pairwise")),
                   hardest_companion=_one(Distribution, data.get("hardest_companion")),
                   buckets=_one(Buckets, data.get("buckets")),
                   hardest_in_batch=_one(Distribution, data.get("hardest_in_batch")),
                   near_duplicate_in_batch=_one(BatchNearDuplicates, data.get("near_duplicate_in_batch")),
                   near_duplicates=_one(TruncationNearDuplicates, data.get("near_duplicates")),
                   reference=data.get("reference"), movement=_tuple(data.get("movement")), **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "max_tokens": self.max_tokens, "n_cut": self.n_cut, "share_cut": self.share_cut,
            "pairwise": _dict(self.pairwise), "hardest_companion": _dict(self.hardest_companion),
            "buckets": _dict(self.buckets), "hardest_in_batch": _dict(self.hardest_in_batch),
            "near_duplicate_in_batch": _dict(self.near_duplicate_in_batch),
            "near_duplicates": _dict(self.near_duplicates), "reference": self.reference,
            "movement": _list(self.movement)})


@_section
class Truncation(_Section):
    """The ``truncation`` section (docs/truncation.md); the truncation-only pairs stay read-only JSON."""

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
    truncation_only_pairs: tuple | None = None
    cut_offset_method: str | None = None
    elapsed_s: float | None = None

    KEYS = ("lengths", "reference_length", "context_length", "threshold", "batch_size", "n_batches", "seed",
            "bucket_edges", "top_k", "max_listed", "n_captions", "n_groups", "tokens", "per_length",
            "truncation_only_pairs", "cut_offset_method", "elapsed_s")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Truncation":
        return cls(lengths=_tuple(data.get("lengths")), reference_length=data.get("reference_length"),
                   context_length=data.get("context_length"), threshold=data.get("threshold"),
                   batch_size=data.get("batch_size"), n_batches=data.get("n_batches"), seed=data.get("seed"),
                   bucket_edges=_tuple(data.get("bucket_edges")), top_k=data.get("top_k"),
                   max_listed=data.get("max_listed"), n_captions=data.get("n_captions"), n_groups=data.get("n_groups"),
                   tokens=_one(Distribution, data.get("tokens")),
                   per_length=_many(TruncationLength, data.get("per_length")),
                   truncation_only_pairs=_tuple(data.get("truncation_only_pairs")),
                   cut_offset_method=data.get("cut_offset_method"), elapsed_s=data.get("elapsed_s"),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "lengths": _list(self.lengths), "reference_length": self.reference_length,
            "context_length": self.context_length, "threshold": self.threshold, "batch_size": self.batch_size,
            "n_batches": self.n_batches, "seed": self.seed, "bucket_edges": _list(self.bucket_edges),
            "top_k": self.top_k, "max_listed": self.max_listed, "n_captions": self.n_captions,
            "n_groups": self.n_groups, "tokens": _dict(self.tokens), "per_length": _dicts(self.per_length),
            "truncation_only_pairs": _list(self.truncation_only_pairs), "cut_offset_method": self.cut_offset_method,
            "elapsed_s": self.elapsed_s})


@_section
class Leak(_Section):
    """The ``leak`` section (`capgeo report --leak`, docs/leak.md); its evaluation sets stay read-only JSON."""

    body: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Leak":
        return cls(body=_frozen(dict(data)))

    def to_dict(self) -> dict:
        return _plain(self.body)


@_section
class Pairs(_Section):
    """The ``pairs`` section (docs/pairs.md): the image side, where image vectors were given; its
    findings stay read-only JSON."""

    source: str | None = None
    n_pairs: int | None = None
    n_images: int | None = None
    n_images_missing: int | None = None
    alignment: Mapping[str, Any] | None = None
    alignment_per_image: Mapping[str, Any] | None = None
    retrieval: Mapping[str, Any] | None = None
    mismatched: Mapping[str, Any] | None = None
    false_negatives: Mapping[str, Any] | None = None
    saturation: Mapping[str, Any] | None = None
    twins: Mapping[str, Any] | None = None
    thumbnails: Mapping[str, str] | None = None

    KEYS = ("source", "n_pairs", "n_images", "n_images_missing", "alignment", "alignment_per_image", "retrieval",
            "mismatched", "false_negatives", "saturation", "twins", "thumbnails")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Pairs":
        return cls(source=data.get("source"), n_pairs=data.get("n_pairs"), n_images=data.get("n_images"),
                   n_images_missing=data.get("n_images_missing"), alignment=_tuple(data.get("alignment")),
                   alignment_per_image=_tuple(data.get("alignment_per_image")),
                   retrieval=_tuple(data.get("retrieval")), mismatched=_tuple(data.get("mismatched")),
                   false_negatives=_tuple(data.get("false_negatives")), saturation=_tuple(data.get("saturation")),
                   twins=_tuple(data.get("twins")), thumbnails=_tuple(data.get("thumbnails")),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "source": self.source, "n_pairs": self.n_pairs, "n_images": self.n_images,
            "n_images_missing": self.n_images_missing, "alignment": _list(self.alignment),
            "alignment_per_image": _list(self.alignment_per_image), "retrieval": _list(self.retrieval),
            "mismatched": _list(self.mismatched), "false_negatives": _list(self.false_negatives),
            "saturation": _list(self.saturation), "twins": _list(self.twins), "thumbnails": _list(self.thumbnails)})


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

    KEYS = ("method", "pca_dimensions", "neighbours", "seed", "n_captions", "n_points", "sampled", "seconds",
            "near_duplicate_threshold", "text_chars", "x", "y", "caption_ids", "groups", "texts", "hardest_companion",
            "near_duplicate_set", "leaked", "thumbnails", "n_mapped_images")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CaptionMap":
        return cls(method=data.get("method"), pca_dimensions=data.get("pca_dimensions"),
                   neighbours=data.get("neighbours"), seed=data.get("seed"),
                   n_captions=data.get("n_captions"), n_points=data.get("n_points"), sampled=data.get("sampled"),
                   seconds=data.get("seconds"), near_duplicate_threshold=data.get("near_duplicate_threshold"),
                   text_chars=data.get("text_chars"), x=_tuple(data.get("x")), y=_tuple(data.get("y")),
                   caption_ids=_tuple(data.get("caption_ids")), groups=_tuple(data.get("groups")),
                   texts=_tuple(data.get("texts")), hardest_companion=_tuple(data.get("hardest_companion")),
                   near_duplicate_set=_tuple(data.get("near_duplicate_set")), leaked=_tuple(data.get("leaked")),
                   thumbnails=_tuple(data.get("thumbnails")), n_mapped_images=data.get("n_mapped_images"),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        return _written(self, {
            "method": self.method, "pca_dimensions": self.pca_dimensions, "neighbours": self.neighbours,
            "seed": self.seed,
            "n_captions": self.n_captions, "n_points": self.n_points, "sampled": self.sampled,
            "seconds": self.seconds, "near_duplicate_threshold": self.near_duplicate_threshold,
            "text_chars": self.text_chars, "x": _list(self.x), "y": _list(self.y),
            "caption_ids": _list(self.caption_ids), "groups": _list(self.groups), "texts": _list(self.texts),
            "hardest_companion": _list(self.hardest_companion), "near_duplicate_set": _list(self.near_duplicate_set),
            "leaked": _list(self.leaked), "thumbnails": _list(self.thumbnails),
            "n_mapped_images": self.n_mapped_images})


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

    KEYS = ("schema", "dataset", "encoder", "lengths", "pairwise", "within_group", "hardest_companion", "companions",
            "exact_duplicates", "near_duplicates", "batches", "options", "provenance", "dupes", "gamma",
            "gamma_left_out", "truncation", "leak", "map", "pairs")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "profile", *, check: bool = True) -> "Profile":
        """The typed profile of a ``capgeo.profile/1`` dict; CapgeoError for anything else
        (not a profile, an unknown schema version, a missing dataset/encoder section).
        ``check=False`` reads part of a profile as it is (a reader of one section needs no other)."""
        from capgeo.geometry.profile_schema import check_profile

        if check:
            check_profile(data, where)
        return cls(schema=data.get("schema"), dataset=_one(Dataset, data.get("dataset")),
                   encoder=_one(Encoder, data.get("encoder")), lengths=_one(Lengths, data.get("lengths")),
                   pairwise=_one(Distribution, data.get("pairwise")),
                   within_group=_one(Distribution, data.get("within_group")),
                   hardest_companion=_one(Distribution, data.get("hardest_companion")),
                   companions=_one(Companions, data.get("companions")),
                   exact_duplicates=_one(ExactDuplicates, data.get("exact_duplicates")),
                   near_duplicates=_one(NearDuplicates, data.get("near_duplicates")),
                   batches=_many(BatchStatistics, data.get("batches")), options=_one(Options, data.get("options")),
                   provenance=_one(Provenance, data.get("provenance")), dupes=_one(Dupes, data.get("dupes")),
                   gamma=_one(Gamma, data.get("gamma")), gamma_left_out=data.get("gamma_left_out"),
                   truncation=_one(Truncation, data.get("truncation")), leak=_one(Leak, data.get("leak")),
                   map=_one(CaptionMap, data.get("map")), pairs=_one(Pairs, data.get("pairs")),
                   **_kept(data, cls.KEYS))

    def to_dict(self) -> dict:
        """The ``capgeo.profile/1`` JSON object (plain dicts and lists), as :meth:`from_dict` read it."""
        return _written(self, {
            "schema": self.schema, "dataset": _dict(self.dataset), "encoder": _dict(self.encoder),
            "lengths": _dict(self.lengths), "pairwise": _dict(self.pairwise),
            "within_group": _dict(self.within_group), "hardest_companion": _dict(self.hardest_companion),
            "companions": _dict(self.companions), "exact_duplicates": _dict(self.exact_duplicates),
            "near_duplicates": _dict(self.near_duplicates), "batches": _dicts(self.batches),
            "options": _dict(self.options), "provenance": _dict(self.provenance), "dupes": _dict(self.dupes),
            "gamma": _dict(self.gamma), "gamma_left_out": self.gamma_left_out,
            "truncation": _dict(self.truncation), "leak": _dict(self.leak), "map": _dict(self.map),
            "pairs": _dict(self.pairs)})

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
