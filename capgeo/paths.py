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


def encoder_input_files(spec: str | None) -> list[str]:
    """Every local file an --encoder spec reads, for the check of outputs against inputs: the vector
    file or checkpoint, and the model config read with it (``CONFIG.json@ckpt``; for a bare checkpoint
    the ``.json`` or ``open_clip_config.json`` beside it that is read), or a ``local-dir:`` folder's
    config and weights: `dupes -o cfg.json` must not replace the config any more than the checkpoint."""
    first = encoder_input_file(spec)
    files = [first] if first else []
    if not spec:
        return files
    from capgeo.encoders.registry import model_at_checkpoint, spec_kind

    try:
        kind, argument = spec_kind(spec)
    except CapgeoError:
        return files
    if argument.lower().startswith("local-dir:"):
        folder = Path(argument.split(":", 1)[1]).expanduser()
        if not argument.split(":", 1)[1].strip() or not folder.is_dir():
            return []  # the encoder's own error comes later, with its wording
        from capgeo.encoders.openclip import weights_in_folder

        return [str(path) for path in (folder / "open_clip_config.json", weights_in_folder(folder)) if path]
    at = model_at_checkpoint(argument)
    if at is not None:
        # MODEL@ckpt builds from open_clip's own config: a .json beside the checkpoint is not read
        return files + ([at[0]] if at[0].lower().endswith(".json") else [])
    if kind == "open_clip" and files:
        checkpoint = Path(files[0]).expanduser()
        read = next((config for config in (checkpoint.with_suffix(".json"), checkpoint.parent / "open_clip_config.json")
                     if config.is_file()), None)  # the one the loader reads, in its order
        files += [str(read)] if read else []
    return files


#: the largest JSON file parsed to see whether it is a capgeo result; results are a few megabytes,
#: datasets may be gigabytes
MAX_RESULT_SEARCH_BYTES = 256 << 20


def result_schema(path: str | os.PathLike) -> str | None:
    """The schema a JSON result capgeo wrote names (``capgeo.profile/1``); None for any other file.

    Known by content: the whole file parses as one JSON object whose top-level "schema" is
    ``capgeo.NAME/VERSION``, wherever the key sits (another tool may re-save it with its keys sorted). A file
    that merely starts like one (JSON lines whose first row has such a key) is not a result."""
    import mmap

    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).decode("utf-8", errors="replace")
            size = os.fstat(handle.fileno()).st_size
            if not head.lstrip("\ufeff \t\r\n").startswith("{") or size > MAX_RESULT_SEARCH_BYTES:
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                if re.search(rb'"schema"\s*:\s*"capgeo\.', mapped) is None:
                    return None  # the common case for a dataset: no parse
                data = mapped[:]
    except (OSError, ValueError):
        return None
    import json

    from capgeo import _json

    try:
        # numbers are checked by the scanner and then only counted: a float object for each of a
        # result's 55,000 companion cosines would be made for nothing
        value = _json.loads(data.decode("utf-8-sig"), parse_float=len, parse_int=len)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    schema = value.get("schema") if isinstance(value, dict) else None
    return schema if isinstance(schema, str) and _RESULT_SCHEMA.fullmatch(schema) else None


def is_capgeo_result(path: str | os.PathLike) -> bool:
    """Is ``path`` a JSON result capgeo wrote, so writing a new one over it loses nothing of the user's?"""
    return result_schema(path) is not None


def _html_page_start() -> re.Pattern:
    """The start of a page capgeo wrote, any version's mark (capgeo._atomic.html_page_start), at the
    file's first byte; line ends as written or as a Windows checkout turns them."""
    from capgeo._atomic import html_page_start

    lines = [re.escape(line.encode()) for line in html_page_start("\0").split("\n")]
    return re.compile(rb"\r?\n".join(lines).replace(b"\0", rb'capgeo [^"<>\s]+'))


#: bytes read from an HTML page to find its mark (it ends in the first lines)
HTML_MARK_BYTES = 4096
#: JSON results capgeo writes name a schema "capgeo.NAME/VERSION" (capgeo.profile/1, capgeo.leak/1, ...)
_RESULT_SCHEMA = re.compile(r"capgeo\.[a-z][a-z_]*/[0-9]+")


def written_by_capgeo(path: str | os.PathLike) -> bool:
    """Does the file at ``path`` carry the mark of a capgeo output, so that writing a new output
    over it loses nothing of the user's? Recognised by content, whatever the file's name:

    - HTML: ``<meta name="generator" content="capgeo ...">`` where capgeo writes it, ending the
      page's first lines (``capgeo._atomic.html_page_start``): quoted in a comment or a script, or
      anywhere else, it is not the mark;
    - JSON: the whole file is one object whose "schema" is ``capgeo.NAME/VERSION`` (``result_schema``);
    - Parquet: the key ``capgeo`` in its key-value metadata;
    - .npz: an array named ``capgeo`` holding ``capgeo VERSION``.

    Formats that cannot carry a mark (.npy, CSV, JSON lines, a plain .txt list) are never
    recognised: an existing one is replaced only with --force (docs/errors.md)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HTML_MARK_BYTES)
    except OSError:
        return False
    if head.startswith(b"PAR1"):
        return _parquet_marked(path)
    if head.startswith(b"PK\x03\x04"):
        return _npz_marked(path)
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:15].lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return _html_page_start().match(head) is not None
    return is_capgeo_result(path)


def _parquet_marked(path) -> bool:
    import polars as pl

    from capgeo._atomic import MARK_KEY

    try:
        metadata = pl.read_parquet_metadata(path)
    except Exception:  # not a readable Parquet file: not capgeo's either
        return False
    return str(metadata.get(MARK_KEY, "")).startswith("capgeo ")


def _npz_marked(path) -> bool:
    import zipfile

    from capgeo._atomic import MARK_KEY

    try:
        with zipfile.ZipFile(path) as archive:
            if f"{MARK_KEY}.npy" not in archive.namelist():
                return False
        import numpy as np

        with np.load(path, allow_pickle=False) as arrays:
            return str(arrays[MARK_KEY]).startswith("capgeo ")
    except Exception:  # a damaged archive, or an array that is not text
        return False


def _input_clash(output: Path, label: str, given: str) -> bool:
    """Does writing ``output`` destroy or change the input ``given``? A folder input (a dataset
    folder) clashes with every file inside it, existing or new."""
    source = _resolved(given)
    if output == source:
        return True
    # a new file inside a dataset folder clashes too: the next run would read it as part of the data
    return source.is_dir() and output.is_relative_to(source)


def _read_beside(path: str | os.PathLike) -> list[str]:
    """Files a loader reads from outside the input itself: DCI takes the splits of its complete/
    folder from ../splits.json (an HTML page written there left the dataset unreadable)."""
    folder = Path(path).expanduser()
    if folder.is_dir() and (folder.parent / "splits.json").is_file():
        return [str(folder.parent / "splits.json")]
    return []


def _pattern_files(path: str | os.PathLike) -> list[str]:
    """The files a quoted glob or brace pattern given as an input names (none when it is a path or
    names nothing: the loader says so)."""
    from capgeo.captions.shards import expand_source, is_pattern
    from capgeo.errors import DataError

    try:
        if Path(path).expanduser().exists() or not is_pattern(path):
            return []
    except OSError:  # a name longer than the system allows: the reader names it, in one line
        return []
    try:
        return [str(file) for file in expand_source(path)]
    except DataError:
        return []


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
                given_inputs += [(label, named) for named in _pattern_files(path)]
                given_inputs.append((label, str(path)))
                given_inputs += [(label, beside) for beside in _read_beside(path)]
    from capgeo._atomic import is_standard_output

    seen: dict[Path, str] = {}
    stdout_given_to = None
    for option, path in outputs.items():
        if path is None:
            continue
        if is_standard_output(path):
            # "-" and /dev/stdout are one stream: two outputs there mix into one
            if stdout_given_to is not None:
                raise CapgeoError(f"{option} {path} is also given to {stdout_given_to}: both would write to "
                                  "standard output; give one of them a file")
            stdout_given_to = option
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


def refuse_replacing_a_foreign_file(option: str, path: str | os.PathLike | None, *, default: bool = False,
                                    force_with: str = "add --force") -> None:
    """An output may replace an earlier capgeo output (recognised by its mark,
    :func:`written_by_capgeo`), nothing else, unless forced (``force_with`` says how: the
    commands' ``--force``, the library's ``force=True``).

    --json takes its FILE optionally, so ``capgeo leak --json TRAIN EVAL1 EVAL2`` takes TRAIN
    for its FILE and still leaves the command the files it needs: this check keeps the training
    set from being replaced with the result.
    """
    from capgeo._atomic import is_standard_output, stream_target

    if path is None or is_standard_output(path):
        return
    written = os.path.expanduser(os.fspath(path))
    if stream_target(written) is not None or not os.path.isfile(written) or written_by_capgeo(written):
        return  # /dev/stdout, a FIFO: written into, never replaced; a new file; an earlier output
    if option == "--json":
        raise CapgeoError(f"--json {path}: that file exists and is not a capgeo result (a dataset?), so it is "
                          "not overwritten; --json takes the name right after it as its FILE: put --json after "
                          f"the file names, give it a new file name, or {force_with} to replace it")
    what = f"{path} (the default output; -o FILE writes elsewhere)" if default else f"{option} {path}"
    raise CapgeoError(f"{what}: that file exists and capgeo did not write it (it carries no capgeo mark; "
                      f"docs/errors.md), so it is not replaced; give a new file name, or {force_with} to replace it")


#: how a library caller replaces a file capgeo did not write (the commands' is --force)
LIBRARY_FORCE = "pass force=True"


def check_outputs(inputs: Mapping[str, str | Iterable[str] | None], outputs: Mapping[str, str | os.PathLike | None],
                  *, force: bool = False, defaults: Iterable[str] = (), force_with: str = LIBRARY_FORCE) -> None:
    """The rule every writer obeys, commands and library alike, checked before any work: no output
    over an input or another output (:func:`check_output_paths`), and, unless ``force``, none over an
    existing file capgeo did not write (:func:`refuse_replacing_a_foreign_file`). ``defaults``
    names the outputs that are default names the user did not give."""
    check_output_paths(inputs, {option: None if path is None else os.fspath(path) for option, path in outputs.items()})
    if not force:
        for option, path in outputs.items():
            refuse_replacing_a_foreign_file(option, path, default=option in tuple(defaults), force_with=force_with)
