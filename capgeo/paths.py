"""Output paths checked against input paths before any work.

A command that writes over the file it reads destroys the user's data (the
rename of an atomic write makes that silent), and two outputs of one command
given the same name leave only the one written last. Every command therefore
checks, by resolved path, each output against each input and against the
other outputs before it reads or encodes anything.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping

from capgeo.errors import CapgeoError


def _resolved(path: str | os.PathLike) -> Path:
    # resolve() follows symlinks, so a link to the dataset counts as the dataset
    try:
        return Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as error:  # links in a loop
        raise CapgeoError(f"{path}: cannot be resolved ({error}); links in a loop?") from None


def encoder_input_file(spec: str | None) -> str | None:
    """The local file an --encoder spec reads (vector file or checkpoint), if any."""
    if not spec:
        return None
    from capgeo.encoders.registry import model_at_checkpoint, spec_kind

    try:
        kind, argument = spec_kind(spec)
    except CapgeoError:
        return None  # the encoder's own error comes later, with its wording
    if kind == "precomputed":
        return argument
    at = model_at_checkpoint(argument)
    if at is not None:
        return at[1]
    if Path(argument).suffix.lower() in (".pt", ".pth", ".bin", ".safetensors"):
        return argument
    return None


#: every JSON capgeo writes is an object whose first key, "schema", names it (capgeo.profile/1,
#: capgeo.dupes/1, ...); a saved profile is recognised the same way (capgeo.report.build)
_RESULT_HEAD = re.compile(r'^\s*\{\s*"schema"\s*:\s*"(capgeo\.[^"]*)"')


def result_schema(path: str | os.PathLike) -> str | None:
    """The schema a JSON result capgeo wrote names first (``capgeo.profile/1``), read from the
    file's first bytes; None for any other file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return None
    match = _RESULT_HEAD.match(head)
    return match.group(1) if match else None


def is_capgeo_result(path: str | os.PathLike) -> bool:
    """Is ``path`` a JSON result capgeo wrote, so writing a new one over it loses nothing of the user's?"""
    return result_schema(path) is not None


def _input_clash(output: Path, label: str, given: str) -> bool:
    """Does writing ``output`` destroy or change the input ``given``? A folder input (a dataset
    folder) clashes with every file inside it, existing or new."""
    source = _resolved(given)
    if output == source:
        return True
    # a new file inside a dataset folder clashes too: the next run would read it as part of the data
    return source.is_dir() and output.is_relative_to(source)


def check_output_paths(inputs: Mapping[str, str | Iterable[str] | None],
                       outputs: Mapping[str, str | None]) -> None:
    """Refuse, in one line, an output that is an input or another output.

    ``inputs`` maps a label (``DATA``, ``--encoder``) to a path or several;
    ``outputs`` maps an option name (``--json``) to a path. None and ``-``
    (stdout) are skipped.
    """
    given_inputs: list[tuple[str, str]] = []
    for label, value in inputs.items():
        if value is None:
            continue
        for path in ([value] if isinstance(value, (str, os.PathLike)) else value):
            if path not in (None, "-"):
                given_inputs.append((label, str(path)))
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if path in (None, "-"):
            continue
        target = _resolved(path)
        for label, source in given_inputs:
            if _input_clash(target, label, source):
                if _resolved(source) != target and not target.exists():
                    raise CapgeoError(f"{option} {path} is inside the input {label} folder {source}, which "
                                      "would then hold it as data; choose an output file outside that folder")
                where = source if _resolved(source) == target else f"{source} (it holds {path})"
                raise CapgeoError(f"{option} {path} would overwrite the input {label} {where}; "
                                  "choose another output file")
        if target in seen:
            raise CapgeoError(f"{option} {path} is also given to {seen[target]}: one would overwrite the other; "
                              "give each output its own file")
        seen[target] = option
