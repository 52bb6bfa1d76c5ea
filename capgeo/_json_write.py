"""Indented JSON text, byte for byte what ``json.dumps(value, indent=2, ensure_ascii=False,
allow_nan=False)`` writes, at about the cost of its C encoder.

With an indent, the json module encodes in Python, one call per value: a profile's companion
lists (N x k ids and cosines) took longer to write than the gamma section took to compute. Here
a list of plain values is written with one join; anything this writer does not know (a
non-finite float, a type json would refuse or convert, a key that is not text) is left to json
itself, which then writes it or raises its own error.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from json.encoder import encode_basestring
from math import isfinite

_SCALAR_TEXT = {type(None): lambda _: "null", bool: lambda value: "true" if value else "false",
                int: int.__repr__, str: encode_basestring}
_FLOAT_OR_NULL = {float, type(None)}


class _NotPlain(Exception):
    """A value the json module should encode itself."""


def dumps(value, indent: int = 2) -> str:
    """``json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False)``, with each lone
    surrogate escaped (below)."""
    parts: list[str] = []
    try:
        _write(value, parts, 0, " " * indent)
    except (_NotPlain, RecursionError):
        return _escaped_surrogates(json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False))
    return _escaped_surrogates("".join(parts))


#: a lone surrogate: how Python holds a byte of a file name that is not UTF-8 (os.fsdecode)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped_surrogates(text: str) -> str:
    """A file name that is not UTF-8 (b"caf\\xe9.jsonl", a Latin-1 name) reaches a result as a lone
    surrogate, which no UTF-8 file can hold. Inside a JSON string its escape (``\\udce9``) is valid
    JSON, and json.loads gives the same string back (os.fsencode of it: the name's bytes)."""
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text) if _SURROGATE.search(text) else text


def _float_text(value: float) -> str:
    if not isfinite(value):
        raise _NotPlain
    return float.__repr__(value)


def _scalar_text(value) -> str:
    kind = type(value)
    if kind is float:
        return _float_text(value)
    text = _SCALAR_TEXT.get(kind)
    if text is None:
        raise _NotPlain
    return text(value)


def _write(value, parts: list[str], level: int, step: str) -> None:
    kind = type(value)
    if kind is dict:
        _write_dict(value, parts, level, step)
    elif kind is list or kind is tuple:
        _write_list(value, parts, level, step)
    else:
        parts.append(_scalar_text(value))


def _write_list(values, parts: list[str], level: int, step: str) -> None:
    if not values:
        parts.append("[]")
        return
    inner = "\n" + step * (level + 1)
    kinds = set(map(type, values))
    if kinds.isdisjoint((dict, list, tuple)):
        texts = map(_text_of(kinds, values), values)
        parts += ("[", inner, ("," + inner).join(texts), "\n", step * level, "]")
        return
    if kinds == {list} or kinds == {tuple}:
        rows = _plain_rows(values, level + 1, step)
        if rows is not None:
            parts += ("[", inner, ("," + inner).join(rows), "\n", step * level, "]")
            return
    parts += ("[", inner)
    for position, item in enumerate(values):
        if position:
            parts.append("," + inner)
        _write(item, parts, level + 1, step)
    parts += ("\n", step * level, "]")


def _text_of(kinds: set, values):
    """The function that writes each of ``values`` (plain values of types ``kinds``)."""
    if len(kinds) == 1:
        kind = next(iter(kinds))
        if kind is float:
            if not all(map(isfinite, values)):
                raise _NotPlain
            return float.__repr__
        if kind in _SCALAR_TEXT:
            return _SCALAR_TEXT[kind]
    if kinds == _FLOAT_OR_NULL:
        # the example batch's similarity matrix: its diagonal is null
        if not all(map(isfinite, filter(None, values))):
            raise _NotPlain
        return _float_or_null
    return _scalar_text


def _float_or_null(value) -> str:
    return "null" if value is None else float.__repr__(value)


def _plain_rows(rows, level: int, step: str):
    """The texts of ``rows`` (lists, as a profile's N companion lists are) when every row holds
    plain values only, in one pass over all their values; else None."""
    kinds = set(map(type, chain.from_iterable(rows)))
    if not kinds.isdisjoint((dict, list, tuple)):
        return None
    text = _text_of(kinds, chain.from_iterable(rows)) if kinds else None
    inner, close = "\n" + step * (level + 1), "\n" + step * level + "]"
    separator, opening = "," + inner, "[" + inner
    return [opening + separator.join(map(text, row)) + close if row else "[]" for row in rows]


def _write_dict(values: dict, parts: list[str], level: int, step: str) -> None:
    if not values:
        parts.append("{}")
        return
    inner = "\n" + step * (level + 1)
    parts += ("{", inner)
    for position, (key, item) in enumerate(values.items()):
        if type(key) is not str:  # json turns numbers, booleans and None into text keys: its rules
            raise _NotPlain
        if position:
            parts.append("," + inner)
        parts += (encode_basestring(key), ": ")
        _write(item, parts, level + 1, step)
    parts += ("\n", step * level, "}")
