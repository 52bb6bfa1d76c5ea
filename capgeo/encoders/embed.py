"""Captions in, normalised embeddings out: the one entry point every command uses."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from capgeo.encoders.base import Embeddings, TextEncoder, effective_max_tokens
from capgeo.encoders.cache import DEFAULT_CHUNK_ROWS, CacheEntry, cache_key, chunk_ranges
from capgeo.errors import CapgeoError, DataError, EncoderError
from capgeo.progress import Tally, progress_bar
from capgeo.scale.session import active_ray


def embed(captions, encoder: str | TextEncoder | None = None, *, device: str | None = None,
          cache_dir: str | Path | None = None, use_cache: bool = True, max_tokens: int | None = None,
          progress: bool | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Embeddings:
    """Embeddings of a CaptionSet (or a list of texts), row i for caption i.

    ``encoder`` is a spec string (see `capgeo encoders`; None = embedded
    all-MiniLM-L6-v2) or an encoder already loaded, so callers that encode the
    same captions at several lengths load the model once. Captions are cut to
    ``max_tokens`` tokens (default: the encoder's context length). Results are
    cached on disk unless ``use_cache`` is false; ``chunk_rows`` captions are
    encoded and saved at a time, which is how far an interrupted run loses work.
    """
    from capgeo.encoders.precomputed import PrecomputedEncoder
    from capgeo.encoders.registry import get_encoder

    texts, ids = _texts_and_ids(captions)
    if not texts:
        raise DataError("no captions to encode")
    ray_session = active_ray()
    # on Ray the driver's copy only tokenizes and names the cache entry: the CPU will do,
    # and a GPU on the driver's node stays free for an actor
    text_encoder = encoder if _is_encoder(encoder) else get_encoder(
        encoder, device="cpu" if ray_session else device, cache_dir=cache_dir)
    if isinstance(text_encoder, PrecomputedEncoder):
        return _embed_precomputed(text_encoder, ids, max_tokens)

    info = text_encoder.info
    limit = effective_max_tokens(max_tokens, info.context_length)
    entry = CacheEntry(cache_dir, cache_key(texts, info, limit), len(texts), info.width) if use_cache else None

    counts = entry.load_token_counts() if entry else None
    if counts is None:
        counts = np.asarray(text_encoder.token_counts(texts), dtype=np.int64)
        if counts.shape != (len(texts),):
            raise EncoderError(f"encoder {info.spec!r} returned {counts.shape} token counts for {len(texts)} captions")
        if entry:
            entry.check_writable()  # before anything is written or encoded
            entry.save_token_counts(counts)

    # longest first: batches of similar length waste little padding, and the
    # slowest batches come first, so the time estimate errs on the safe side
    order = np.argsort(-counts, kind="stable")
    ranges = chunk_ranges(len(texts), max(1, int(chunk_rows)))
    vectors = np.empty((len(texts), info.width), dtype=np.float32)
    pending = []
    for start, stop in ranges:
        chunk = entry.load_chunk(start, stop) if entry else None
        if chunk is None:
            pending.append((start, stop))
        else:
            vectors[order[start:stop]] = chunk
    if entry and pending:
        entry.check_writable()

    with progress_bar(f"Encoding with {info.name}", total=len(texts), enabled=progress) as bar:
        bar.advance(len(texts) - sum(stop - start for start, stop in pending))
        if ray_session is not None:
            from capgeo.scale.encode import encode_shards

            # each actor loads the encoder again from its spec; a shard moves the bar when it returns
            chunks = ((start, stop, chunk, 0)
                      for start, stop, chunk in encode_shards(ray_session, info.spec, device, texts, order, pending,
                                                              limit, cache_dir))
        else:
            chunks = _encode_pending(text_encoder, texts, order, pending, limit, bar)
        for start, stop, chunk, advanced in chunks:
            rows = order[start:stop]
            chunk = np.asarray(chunk, dtype=np.float32)
            bar.advance(max(0, stop - start - advanced))
            if chunk.shape != (stop - start, info.width):
                raise EncoderError(f"encoder {info.spec!r} returned shape {chunk.shape} "
                                   f"for {stop - start} captions of width {info.width}")
            chunk = _checked_unit_rows(chunk, rows, info.spec)
            if entry:
                entry.save_chunk(start, stop, chunk)
            vectors[rows] = chunk
    if entry and pending:
        entry.write_manifest(info, limit, ranges)
    elif entry and not entry.has_manifest():
        # a full hit reads no manifest: restoring a lost one is a courtesy that a folder this user
        # cannot write (a shared, read-only cache) must not turn into a failed command
        with contextlib.suppress(CapgeoError):
            entry.write_manifest(info, limit, ranges)

    if not pending:
        origin = "cache"
    elif len(pending) < len(ranges):
        origin = "resumed"
    else:
        origin = "encoded"
    return Embeddings(vectors=vectors, token_counts=counts, max_tokens=limit, info=info, origin=origin)


def _encode_pending(text_encoder: TextEncoder, texts, order, pending, limit, bar):
    """(start, stop, vectors, rows the bar was advanced by) for each chunk still to encode, in this process."""
    for start, stop in pending:
        # the encoder advances the bar after each of its batches, so it moves every few seconds
        tally = Tally(bar)
        chunk = text_encoder.encode([texts[i] for i in order[start:stop]], max_tokens=limit, progress=tally)
        yield start, stop, chunk, tally.count


def _checked_unit_rows(chunk: np.ndarray, rows: np.ndarray, spec: str) -> np.ndarray:
    """Refuse non-finite or all-zero output; re-normalise rows that half precision left slightly off unit length."""
    finite = np.isfinite(chunk).all(axis=1)
    if not finite.all():
        raise EncoderError(f"encoder {spec!r} produced NaN or infinite values for caption row "
                           f"{int(rows[np.argmin(finite)])}")
    norms = np.linalg.norm(chunk, axis=1, keepdims=True)
    if not norms.all():  # a zero vector has no direction: dividing would write NaN into the cache and outputs
        raise EncoderError(f"encoder {spec!r} produced an all-zero vector for caption row "
                           f"{int(rows[np.argmin(norms[:, 0] > 0)])}")
    if np.any(np.abs(norms - 1.0) > 1e-4):
        chunk = (chunk / norms).astype(np.float32)
    return chunk


def _is_encoder(candidate) -> bool:
    return candidate is not None and not isinstance(candidate, (str, Path)) and hasattr(candidate, "info") \
        and hasattr(candidate, "encode")


def _texts_and_ids(captions) -> tuple[list[str], list[str]]:
    if hasattr(captions, "texts") and hasattr(captions, "ids"):
        return captions.texts, captions.ids
    if isinstance(captions, (str, Path)):
        # a str is a sequence too: each character would have been embedded as a caption
        raise DataError(f"embed takes a CaptionSet or a list of texts, not the path {str(captions)!r}; "
                        "read it first: capgeo.captions.load_captions(path)")
    try:
        items = list(captions)
    except TypeError:
        raise DataError(f"embed takes a CaptionSet or a list of texts, got {type(captions).__name__}") from None
    stray = next((row for row, text in enumerate(items) if not isinstance(text, str)), None)
    if stray is not None:
        raise DataError(f"text {stray}: expected a caption (str), got {type(items[stray]).__name__}")
    texts = items
    return texts, [str(row) for row in range(len(texts))]


def _embed_precomputed(encoder, ids: Sequence[str], max_tokens: int | None) -> Embeddings:
    if max_tokens is not None:
        raise EncoderError(f"{encoder.path}: precomputed vectors cannot be re-cut to {max_tokens} tokens")
    vectors = encoder.align(ids)
    notes = ()
    if encoder.ignored:
        notes = (f"{encoder.ignored} vectors in {encoder.path.name} match no caption and were ignored",)
    # token counts are unknown (-1) and max_tokens is 0, so nothing counts as truncated
    return Embeddings(vectors=vectors, token_counts=encoder.token_counts(ids), max_tokens=0, info=encoder.info,
                      origin="precomputed", notes=notes)


#: names the JSON of `capgeo encode --json`
ENCODE_SCHEMA = "capgeo.encode/1"


@dataclass(frozen=True)
class EncodeSummary:
    """What `capgeo encode` reports (``capgeo.encode/1``): the encoder, the counts, token lengths
    and timing, and where the vectors were written (``output``: path and aligned_by) if they were."""

    encoder: dict                      # the encoder's info (EncoderInfo.to_dict())
    captions: int
    groups: int | None
    width: int
    max_tokens: int
    tokens: dict | None                # mean, median, p99, max, truncated, truncated_fraction; None: unknown
    origin: str
    seconds: float
    notes: tuple[str, ...]
    output: dict | None = None

    def to_dict(self) -> dict:
        """The `capgeo encode --json` object, a copy; "output" only when the vectors were written."""
        summary = {"schema": ENCODE_SCHEMA, "encoder": dict(self.encoder), "captions": self.captions,
                   "groups": self.groups, "width": self.width, "max_tokens": self.max_tokens,
                   "tokens": None if self.tokens is None else dict(self.tokens), "origin": self.origin,
                   "seconds": self.seconds, "notes": list(self.notes)}
        if self.output is not None:
            summary["output"] = dict(self.output)
        return summary


def encode_summary(captions, embeddings: Embeddings, seconds: float) -> EncodeSummary:
    """What `capgeo encode` reports: the encoder, the counts, token lengths and timing."""
    counts = embeddings.token_counts
    known = counts[counts >= 0]
    tokens = None
    if known.size:
        tokens = {
            "mean": float(known.mean()), "median": float(np.median(known)),
            "p99": float(np.percentile(known, 99)), "max": int(known.max()),
            "truncated": int(embeddings.truncated.sum()),
            "truncated_fraction": float(embeddings.truncated.mean()),
        }
    return EncodeSummary(
        encoder=embeddings.info.to_dict(),
        captions=int(embeddings.vectors.shape[0]),
        groups=int(captions.n_groups) if hasattr(captions, "n_groups") else None,
        width=int(embeddings.vectors.shape[1]),
        max_tokens=int(embeddings.max_tokens),
        tokens=tokens,
        origin=embeddings.origin,
        seconds=round(float(seconds), 3),
        notes=tuple(embeddings.notes),
    )
