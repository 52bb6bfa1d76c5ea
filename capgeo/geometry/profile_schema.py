"""The ``capgeo.profile/1`` schema's name and version, and reading a saved profile back (checked).

Apart from capgeo/geometry/profile.py, which builds profiles, so that the typed Profile
(typed_profile.py), which profile.py returns, can check and load without importing the builder.
"""

from __future__ import annotations

import json
from pathlib import Path

from capgeo import __version__, _json
from capgeo.errors import CapgeoError

SCHEMA_NAME = "capgeo.profile"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"
#: Sections every writer of the schema includes (profile, gamma, truncation, report).
REQUIRED_SECTIONS = ("dataset", "encoder")


def load_profile(path: str | Path) -> dict:
    """Read a profile JSON written by ``capgeo profile --json``; check its schema.

    Raises CapgeoError naming the file when it is missing, not JSON, not a profile,
    or of a newer schema version than this capgeo reads.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark an editor added is not JSON
    except FileNotFoundError:
        raise CapgeoError(f"{path}: profile file not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CapgeoError(f"{path}: cannot read the profile: {error}") from None
    try:
        profile = _json.loads(text)
    except json.JSONDecodeError as error:
        raise CapgeoError(f"{path}: not a JSON file (line {error.lineno}: {error.msg}); "
                          "expected the output of `capgeo profile --json`") from None
    check_profile(profile, str(path))
    return profile


def check_profile(profile, where: str = "profile") -> None:
    """Raise CapgeoError unless ``profile`` is a ``capgeo.profile/1`` dict."""
    schema = profile.get("schema") if isinstance(profile, dict) else None
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_NAME + "/"):
        raise CapgeoError(f"{where}: not a capgeo profile (field 'schema' is {schema!r}, expected {SCHEMA!r}); "
                          "write one with `capgeo profile DATA --json FILE`")
    version = schema.split("/", 1)[1]
    if not version.isdigit():
        raise CapgeoError(f"{where}: unreadable schema version {schema!r}, expected {SCHEMA!r}")
    if int(version) != SCHEMA_VERSION:
        raise CapgeoError(f"{where}: profile schema {schema!r} is not supported by capgeo {__version__} "
                          f"(it reads {SCHEMA!r}); recompute it with this version's `capgeo profile`")
    # gamma and truncation write profiles with only their own section, so only what
    # every writer includes is required
    missing = [key for key in REQUIRED_SECTIONS if not isinstance(profile.get(key), dict)]
    if missing:
        raise CapgeoError(f"{where}: profile lacks the section(s) {', '.join(missing)}")
