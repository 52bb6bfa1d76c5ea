"""The Hugging Face ``Image`` feature as a caption's group: its path, or a hash of its bytes.

An ``Image`` column holds a struct ``{bytes, path}`` per row. The image a caption
describes is named by its path; an image stored only as bytes (path empty) is named
by the sha256 of those bytes, so captions of one image still share a group. The
bytes are hashed, never decoded.
"""

from __future__ import annotations

import hashlib

from capgeo.errors import DataError

IMAGE_FIELDS = frozenset({"bytes", "path"})


def is_image_dtype(dtype) -> bool:
    """Is a polars dtype the struct an ``Image`` feature is stored as?"""
    import polars as pl

    return isinstance(dtype, pl.Struct) and {field.name for field in dtype.fields} == IMAGE_FIELDS


def is_image_value(value) -> bool:
    """Is a Python value one row of an ``Image`` column ({"bytes": ..., "path": ...})?"""
    return isinstance(value, dict) and bool(value) and set(value) <= IMAGE_FIELDS


def image_key(path, data, source, place: str, column: str) -> str:
    """The group of one image: its path, else ``sha256:<hex>`` of its bytes."""
    if isinstance(path, str) and path:
        return path
    if data:
        return "sha256:" + hashlib.sha256(bytes(data)).hexdigest()
    raise DataError(f"{source}: {place}: the image column {column!r} has neither bytes nor path; expected an "
                    "Image feature ({bytes, path}) with one of them set")


def image_keys_of_values(values: list, source, where, column: str) -> list[str]:
    """Groups for a column of {bytes, path} dicts (records read as Python objects)."""
    keys = []
    for row, value in enumerate(values):
        value = value if isinstance(value, dict) else {}
        keys.append(image_key(value.get("path"), value.get("bytes"), source, where(row), column))
    return keys


def image_keys_of_frame(frame, column: str, source, where):
    """Groups for a polars struct column, as a polars Series: paths are taken as they are; only
    the rows without a path have their bytes read out of the frame (and hashed)."""
    import polars as pl

    paths = frame.select(pl.col(column).struct.field("path")).to_series()
    missing = (paths.is_null() | (paths == "")).arg_true()
    if not len(missing):
        return paths
    data = frame.select(pl.col(column).struct.field("bytes")).to_series().gather(missing).to_list()
    hashes = [image_key(None, payload, source, where(row), column) for row, payload in zip(missing.to_list(), data)]
    return paths.scatter(missing, pl.Series(hashes, dtype=pl.String))
