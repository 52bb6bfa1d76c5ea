"""The Python API's arguments checked against their annotations, in one place.

The commands' options are typed by click; a Python caller's values arrive as they are, and a
``seed=1.5`` or ``top=2.5`` failed deep inside numpy (a TypeError from its random generator),
``batch_size=[]`` silently meant "the default" and an unknown keyword was blamed on
``load_captions()``. Every public call (capgeo.api) and every options object
(ProfileOptions) checks its values here first, by the annotation each parameter declares, and
refuses a wrong one with one CapgeoError naming the function the user called and the argument.

Annotations are read as text (the modules use ``from __future__ import annotations``):
``int``, ``float``, ``bool``, ``str``, ``os.PathLike``, ``None``, ``Sequence[int]`` and
``Sequence[float]`` are checked, joined by ``|``; any other annotation (``Any``, a class) is
left to the code that uses the value.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
import re
from typing import Callable, Iterable, Mapping

from capgeo.errors import CapgeoError

#: what each checked annotation accepts, in words
_WORDS = {"int": "a whole number", "float": "a finite number", "bool": "True or False", "str": "text",
          "os.PathLike": "a path", "None": "None", "Sequence[int]": "a non-empty list of whole numbers",
          "Sequence[float]": "a non-empty list of finite numbers"}


def _is_whole(value) -> bool:
    # numpy integers are Integral; True and False are too, but a seed of True is a mistake
    return isinstance(value, numbers.Integral) and not _is_bool(value)


def _is_bool(value) -> bool:
    return type(value).__name__ in ("bool", "bool_")


def _is_finite(value) -> bool:
    return isinstance(value, numbers.Real) and not _is_bool(value) and math.isfinite(value)


def _items(value) -> list | None:
    """The items of a non-empty list, tuple or array; None for anything else (text, a number, empty)."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__") or getattr(value, "ndim", 1) != 1:
        return None
    items = list(value)
    return items or None


_ACCEPTS: dict[str, Callable[[object], bool]] = {
    "int": _is_whole,
    "float": _is_finite,
    "bool": _is_bool,
    "str": lambda value: isinstance(value, str),
    "os.PathLike": lambda value: isinstance(value, (str, os.PathLike)),
    "None": lambda value: value is None,
    "Sequence[int]": lambda value: (items := _items(value)) is not None and all(map(_is_whole, items)),
    "Sequence[float]": lambda value: (items := _items(value)) is not None and all(map(_is_finite, items)),
}


def check_value(caller: str, name: str, value, annotation) -> None:
    """Refuse ``value`` for the parameter ``name`` of ``caller`` unless its annotation accepts it."""
    if not isinstance(annotation, str):
        return
    kinds = [kind.strip() for kind in annotation.split("|")]
    if not all(kind in _ACCEPTS for kind in kinds):
        return  # a type this module does not check (Any, a class): the code using it does
    if any(_ACCEPTS[kind](value) for kind in kinds):
        return
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    expected = ", ".join(_WORDS[kind] for kind in kinds[:-1]) + (" or " if len(kinds) > 1 else "") + _WORDS[kinds[-1]]
    raise CapgeoError(f"{caller}: {name} must be {expected}, got {shown}")


def check_values(caller: str, values: Mapping[str, object], annotations: Mapping[str, object]) -> None:
    """:func:`check_value` for each of ``values`` that ``annotations`` names."""
    for name, value in values.items():
        if name in annotations:
            check_value(caller, name, value, annotations[name])


def keyword_annotations(function: Callable) -> dict[str, object]:
    """The keyword parameters of ``function`` with their annotations (as written: text), those of a
    ``**options: Unpack[SomeTypedDict]`` included (load_captions' reading options)."""
    annotations: dict[str, object] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            annotations[name] = parameter.annotation
        elif parameter.kind == parameter.VAR_KEYWORD:
            annotations.update(unpacked_annotations(function, parameter.annotation))
    return annotations


def unpacked_annotations(function: Callable, annotation) -> dict[str, object]:
    """The keywords that ``**options: Unpack[SomeTypedDict]`` takes, with their annotations as text;
    nothing for a ``**`` annotated otherwise or not at all."""
    match = re.fullmatch(r"\s*Unpack\[(\w+)\]\s*", annotation) if isinstance(annotation, str) else None
    typed = inspect.unwrap(function).__globals__.get(match.group(1)) if match else None
    # with postponed annotations a TypedDict holds its fields' as ForwardRefs: their text is checked
    return {name: getattr(kind, "__forward_arg__", kind)
            for name, kind in getattr(typed, "__annotations__", {}).items()}


def checked_arguments(*more: Callable[[], Mapping[str, object]]):
    """Decorator: the call's arguments checked by their annotations before the function runs, and
    the keywords its ``**`` takes limited to those each of ``more()`` names (parameter -> annotation:
    the reading options of load_captions, ProfileOptions' fields), checked by theirs; an unknown
    keyword is one CapgeoError naming this function, not the one it would have reached."""
    def decorate(function):
        own = keyword_annotations(function)
        caller = f"{function.__name__}()"

        @functools.wraps(function)
        def checked(*args, **kwargs):
            extra: dict[str, object] = {}
            for names in more:
                extra.update(names())
            unknown = [name for name in kwargs if name not in own and name not in extra]
            if unknown:
                raise CapgeoError(f"{caller} got an unknown keyword argument {unknown[0]!r}; it takes "
                                  f"{_listed(name for name in own if name not in _positional(function))}"
                                  + (f", and {_listed(extra)}" if extra else ""))
            try:
                bound = inspect.signature(function).bind(*args, **kwargs)
            except TypeError as error:
                raise CapgeoError(f"{caller}: {error}") from None
            check_values(caller, {name: value for name, value in bound.arguments.items() if name in own}, own)
            check_values(caller, {name: value for name, value in kwargs.items() if name not in own}, extra)
            return function(*args, **kwargs)

        return checked

    return decorate


def _positional(function: Callable) -> set[str]:
    """The parameters given by position (the data), left out of the list of keywords."""
    return {name for name, parameter in inspect.signature(function).parameters.items()
            if parameter.default is parameter.empty and parameter.kind == parameter.POSITIONAL_OR_KEYWORD}


def _listed(names: Iterable[str]) -> str:
    return ", ".join(names)


def with_fields(cls, options, caller: str, values: Mapping[str, object]):
    """``options`` (a frozen dataclass ``cls``; None: all defaults) with the fields in ``values``
    replaced, for a function that takes an options object or its fields as keywords; an unknown
    field is the TypeError Python gives for an unknown keyword argument of ``caller``."""
    import dataclasses

    unknown = sorted(set(values) - {field.name for field in dataclasses.fields(cls)})
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    options = options or cls()
    return dataclasses.replace(options, **values) if values else options
