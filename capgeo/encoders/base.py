"""What every text encoder provides."""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from capgeo.errors import EncoderError

#: a row whose norm is within this of 1 is a unit row: used as given, bit for bit, by the
#: vector loader (capgeo.encoders.precomputed) and by the pairwise pass alike
UNIT_NORM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class EncoderInfo:
    """Identity of an encoder, stored with every result and used as a cache key."""

    spec: str               # what the user typed, e.g. "ViT-B-32/openai", "longclip-L", "minilm"
    kind: str               # "open_clip" | "longclip" | "sentence-transformers" | "precomputed"
    name: str               # model name, e.g. "ViT-L-14"
    width: int              # embedding dimension
    context_length: int     # tokens, start/end tokens included
    logit_scale: float | None  # exp(logit_scale) from the checkpoint, when it has one
    fingerprint: str        # hash of the weights (or of the vector file)

    def to_dict(self) -> dict:
        return asdict(self)


class TextEncoder(Protocol):
    info: EncoderInfo

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        """Untruncated token count of each caption with the encoder's own tokenizer
        (start/end tokens included). A count above ``info.context_length`` means truncated."""
        ...

    def encode(self, texts: Sequence[str], *, max_tokens: int | None = None, batch_size: int = 64,
               progress=None) -> np.ndarray:
        """L2-normalised float32 embeddings, shape (len(texts), width), in input order.

        ``max_tokens`` truncates every caption to at most that many tokens
        (default: the encoder's context length). ``progress``: true for a bar of the
        encoder's own on a terminal, or a bar (anything with ``advance(n)``) to advance
        by each batch's size as it finishes."""
        ...


@dataclass
class Embeddings:
    """A dataset's caption embeddings, row i for caption i of the CaptionSet."""

    vectors: np.ndarray        # (N, width) float32, L2-normalised
    token_counts: np.ndarray   # (N,) int, untruncated token count with the encoder's tokenizer; -1 = unknown
    max_tokens: int            # the length captions were cut to (<= info.context_length)
    info: EncoderInfo
    # where the vectors came from: "encoded" | "cache" | "resumed" (part cache, part encoded) | "precomputed"
    origin: str = "encoded"
    notes: tuple[str, ...] = ()   # remarks worth showing the user (e.g. ids in a vector file left unused)

    @property
    def truncated(self) -> np.ndarray:
        """(N,) bool: the caption was longer than ``max_tokens`` and was cut."""
        return self.token_counts > self.max_tokens


def missing_file_reason(path: Path) -> str:
    """Why a path given for a file cannot be read as one: a folder is not "not found"."""
    return "is a folder, not a file" if path.is_dir() else "not found"


def file_fingerprint(path: str | os.PathLike) -> str:
    """sha256 of a weights or vector file: the encoder's identity in results and cache keys."""
    stat = os.stat(path)
    return _file_sha256(os.fspath(path), *file_version(stat))


def file_version(stat: os.stat_result) -> tuple[int, int, int]:
    """(size, mtime, ctime) in ns: what tells one version of a file from another without reading it.
    The ctime too: a file replaced by another of the same size whose mtime was set back (``touch -r``,
    ``cp -p``) keeps both, but its ctime is the replacement's, which no user can set."""
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


@functools.lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, mtime_ns: int, ctime_ns: int = 0) -> str:
    # the file's version is part of the key so that a file rewritten in place is hashed again
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def effective_max_tokens(max_tokens: int | None, context_length: int) -> int:
    """``max_tokens`` or the context length; values outside 2..context length are an error."""
    if max_tokens is None:
        return int(context_length)
    if not 2 <= int(max_tokens) <= context_length:
        raise EncoderError(f"--max-tokens: expected 2 to the encoder's context length {context_length}, "
                           f"got {max_tokens}")
    return int(max_tokens)
