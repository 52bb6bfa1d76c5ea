"""The ``capgeo.profile/1`` profile as typed, frozen objects.

:class:`Profile` mirrors docs/profile-schema.md: each documented section is a frozen
dataclass whose fields are the documented keys. The JSON form exists only at the edge:
:meth:`Profile.from_dict` / :func:`load_typed_profile` read it, :meth:`Profile.to_dict`
writes it back unchanged (``Profile.from_dict(d).to_dict() == d``).

The schema may gain fields within version 1 (other commands add sections and keys), so
every section keeps the keys it does not declare in ``extra``, and a key that was absent
stays absent (:data:`ABSENT`, not None: the schema distinguishes "null" from "not written").
Nested JSON objects and lists that have no class of their own are read-only
(``MappingProxyType`` and tuples), so no reader can patch a profile it was given.
"""

from __future__ import annotations

import dataclasses
import itertools
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


class _Absent:
    """A key the JSON object did not have."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


def _frozen(value):
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
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _section_type(annotation) -> tuple[type | None, bool]:
    """(the Section class a field holds, whether it holds a list of them) or (None, False)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for candidate in typing.get_args(annotation) if union else (annotation,):
        if isinstance(candidate, type) and issubclass(candidate, Section):
            return candidate, False
        if typing.get_origin(candidate) is tuple:
            inner = typing.get_args(candidate)[0]
            if isinstance(inner, type) and issubclass(inner, Section):
                return inner, True
    return None, False


def _typed(annotation, value):
    """``value`` as the field typed ``annotation`` holds it: a Section, a tuple of them, or frozen."""
    section, many = _section_type(annotation)
    if section is None or value is None:
        return _frozen(value)
    return tuple(section.from_dict(item) for item in value) if many else section.from_dict(value)


@dataclass(frozen=True)
class Section:
    """A JSON object of the schema: declared keys as fields, the others in ``extra``."""

    extra: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}), kw_only=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        hints = typing.get_type_hints(cls)
        declared = {item.name for item in dataclasses.fields(cls)} - {"extra"}
        values = {}
        for name in declared:
            if name not in data:
                continue
            values[name] = _typed(hints[name], data[name])
        extra = {key: _frozen(value) for key, value in data.items() if key not in declared}
        return cls(**values, extra=types.MappingProxyType(extra))

    def to_dict(self) -> dict:
        out = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name != "extra" and value is not ABSENT:
                out[item.name] = _plain(value)
        out.update(_plain(self.extra))
        return out


def _field():
    return field(default=ABSENT)


@dataclass(frozen=True)
class Dataset(Section):
    source: str = _field()
    format: str = _field()
    fingerprint: str | None = _field()
    texts_digest: str = _field()
    groups_digest: str = _field()
    n_captions: int = _field()
    n_groups: int = _field()
    captions_per_group: Mapping[str, Any] = _field()
    skipped: tuple = _field()


@dataclass(frozen=True)
class Encoder(Section):
    spec: str | None = _field()
    kind: str = _field()
    name: str = _field()
    width: int = _field()
    context_length: int = _field()
    logit_scale: float | None = _field()
    fingerprint: str = _field()


@dataclass(frozen=True)
class Lengths(Section):
    known: bool = _field()
    n: int = _field()
    mean: float | None = _field()
    median: float | None = _field()
    p95: float | None = _field()
    p99: float | None = _field()
    min: int | None = _field()
    max: int | None = _field()
    context_length: int = _field()
    max_tokens: int = _field()
    n_truncated: int | None = _field()
    share_truncated: float | None = _field()
    histogram: Mapping[str, Any] | None = _field()


@dataclass(frozen=True)
class Distribution(Section):
    """A summary of a set of cosines (pairwise, within_group, hardest_companion, hardest in-batch)."""

    count: int = _field()
    mean: float | None = _field()
    std: float | None = _field()
    min: float | None = _field()
    max: float | None = _field()
    quantiles: Mapping[str, float | None] = _field()
    quantile_resolution: float = _field()
    share_at_or_above: Mapping[str, float] = _field()
    histogram: Mapping[str, Any] = _field()
    bin_width: float = _field()
    exact: bool = _field()
    mode: str = _field()


@dataclass(frozen=True)
class ExactDuplicates(Section):
    normalization: str = _field()
    n_sets: int = _field()
    n_captions: int = _field()
    n_redundant_captions: int = _field()
    n_pairs: int = _field()
    n_pairs_cross_group: int = _field()
    n_pairs_within_group: int = _field()
    n_sets_cross_group: int = _field()
    n_redundant_cross_group: int = _field()
    examples: tuple = _field()


@dataclass(frozen=True)
class NearDuplicates(Section):
    threshold: float = _field()
    n_pairs_cross_group: int = _field()
    count_method: str = _field()
    n_pairs_from_histogram: int = _field()
    bin_width: float = _field()
    share_pairs: float | None = _field()
    n_captions_hardest_above: int = _field()
    share_captions_hardest_above: float | None = _field()
    exact: bool = _field()


@dataclass(frozen=True)
class BatchStatistics(Section):
    """In-batch statistics for one batch size (one entry of ``batches``)."""

    batch_size: int = _field()
    n_batches: int = _field()
    seed: int = _field()
    negatives_per_row: int = _field()
    buckets: Mapping[str, Any] = _field()
    relative_buckets: Mapping[str, Any] | None = _field()
    hardest_in_batch: Distribution = _field()
    near_duplicate: Mapping[str, Any] = _field()
    example: Mapping[str, Any] = _field()


@dataclass(frozen=True)
class Provenance(Section):
    """Who made the profile, when, with which command (docs/profile-schema.md, ``provenance``)."""

    capgeo_version: str = _field()
    created: str = _field()
    command: str | None = _field()
    working_directory: str | None = _field()
    elapsed_s: float = _field()
    embeddings_origin: str | None = _field()


@dataclass(frozen=True)
class Profile(Section):
    """A whole profile. Sections a writer did not include are ABSENT (gamma and truncation
    write only their own); ``dupes``, ``gamma``, ``truncation``, ``leak`` and ``map`` stay read-only
    mappings (each is read by the one report part that draws it)."""

    schema: str = _field()
    dataset: Dataset = _field()
    encoder: Encoder = _field()
    lengths: Lengths = _field()
    pairwise: Distribution = _field()
    within_group: Distribution | None = _field()
    hardest_companion: Distribution = _field()
    companions: Mapping[str, Any] = _field()
    exact_duplicates: ExactDuplicates = _field()
    near_duplicates: NearDuplicates = _field()
    batches: tuple[BatchStatistics, ...] = _field()
    options: Mapping[str, Any] = _field()
    provenance: Provenance = _field()
    dupes: Mapping[str, Any] = _field()
    gamma: Mapping[str, Any] = _field()
    truncation: Mapping[str, Any] = _field()
    leak: Mapping[str, Any] = _field()
    map: Mapping[str, Any] = _field()
    gamma_left_out: str = _field()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "profile") -> "Profile":
        """The typed profile of a ``capgeo.profile/1`` dict; CapgeoError for anything else
        (not a profile, an unknown schema version, a missing dataset/encoder section)."""
        from capgeo.geometry.profile import check_profile

        check_profile(data, where)
        return super().from_dict(data)


def as_profile(profile: Profile | Mapping[str, Any]) -> Profile:
    """``profile`` itself when typed already, else read from its ``capgeo.profile/1`` dict."""
    return profile if isinstance(profile, Profile) else Profile.from_dict(profile)


def profile_section(profile: Profile | Mapping[str, Any], name: str):
    """Section ``name`` of a typed or dict profile, typed as :class:`Profile` declares it
    (ABSENT when the profile lacks it). Of a dict only that section is read: the others are
    not checked (a reader of one section works on a partial profile) nor converted (the
    companions run to N x k values)."""
    if isinstance(profile, Profile):
        return getattr(profile, name)
    if name not in profile:
        return ABSENT
    return _typed(typing.get_type_hints(Profile)[name], profile[name])


def as_section(value, section: type[Section]):
    """``value`` read as ``section`` when it is a JSON object; a typed section, None or ABSENT as it is."""
    return section.from_dict(value) if isinstance(value, Mapping) else value


def known(value, default=None):
    """``default`` for a field the profile does not have (ABSENT), else the value."""
    return default if value is ABSENT else value


def plain(value):
    """A typed section, read-only mapping or tuple back as plain dicts and lists (for JSON)."""
    return _plain(value)


def load_typed_profile(path: str | Path) -> Profile:
    """Read a saved profile (``capgeo profile --json FILE``) as a :class:`Profile`, with the one-line
    errors of :func:`capgeo.geometry.profile.load_profile` for unreadable files and other schemas."""
    from capgeo.geometry.profile import load_profile

    return Profile.from_dict(load_profile(path), str(path))
