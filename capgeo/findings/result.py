"""What the findings' frozen results share: their JSON, and the read-only form a profile holds.

A :class:`Result` writes its fields in order (a field marked :data:`OMITTED_WHEN_NONE` only when it
is set), nested results and tuples of them as JSON, so its ``to_dict()`` is the object the
finding's section has always written. Where a profile section (capgeo.geometry.typed_profile)
keeps a part as read-only JSON, :func:`frozen_json` gives that part as the section holds it, and
:func:`section` builds the section with every key written, None as null, as the findings write it.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from typing import Any, Mapping

#: field metadata: the key is left out of the JSON while the field is None
OMITTED_WHEN_NONE = types.MappingProxyType({"omitted_when_none": True})


@dataclass(frozen=True)
class Result:
    """A finding's frozen result; :meth:`to_dict` is its JSON object."""

    def to_dict(self) -> dict:
        out = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if value is None and item.metadata.get("omitted_when_none"):
                continue
            out[item.name] = as_json(value)
        return out


def as_json(value):
    """``value`` as plain JSON values: results and sections by their to_dict, tuples as lists."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    if isinstance(value, Mapping):
        return {key: as_json(item) for key, item in value.items()}
    return value


def frozen_json(value):
    """A result (or JSON value) as a profile section holds the parts it keeps as JSON: objects
    read-only (MappingProxyType), lists as tuples."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, Mapping):
        return types.MappingProxyType({key: frozen_json(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen_json(item) for item in value)
    return value


def section(kind: type, **values: Any):
    """Profile section ``kind`` of ``values``, each key written (None as null), as the findings write them."""
    return kind(**values, nulls=frozenset(key for key, value in values.items() if value is None))
