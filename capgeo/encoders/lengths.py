"""Captions embedded at several maximum token lengths, encoding only what each length changes.

A caption no longer than L tokens shows the model the same tokens at L as at the
full context, so its embedding at L is its full-context one: only the captions
cut at L are encoded at L. Where the encoder can give several lengths from one
forward, exactly (``encode_lengths``, open_clip CLIP and Long-CLIP towers: see
:mod:`capgeo.encoders.prefix`), every length comes from one pass over the
captions; any other encoder runs one pass per length, over the captions that
length cuts. Each length's vectors go through the embedding cache under the key
:func:`capgeo.encoders.embed` gives them, chunk by chunk, so either command
reads what the other wrote and an interrupted run loses at most a chunk.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from capgeo.encoders.base import Embeddings, effective_max_tokens
from capgeo.encoders.cache import DEFAULT_CHUNK_ROWS, CacheEntry, cache_key, chunk_ranges
from capgeo.errors import DataError, EncoderError
from capgeo.progress import Tally, progress_bar


def embed_lengths(captions, encoder, lengths: Sequence[int], *, cache_dir=None, use_cache: bool = True,
                  progress: bool | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> dict[int, Embeddings]:
    """:class:`Embeddings` of ``captions`` cut at each of ``lengths`` and at the full context, keyed
    by length (a loaded, non-precomputed ``encoder``). Each equals ``embed(captions, encoder,
    max_tokens=L)`` up to float rounding, and a caption L does not cut has its full-context vector."""
    from capgeo.encoders.embed import _texts_and_ids
    from capgeo.scale.session import active_ray

    texts, _ = _texts_and_ids(captions)
    if not texts:
        raise DataError("no captions to encode")
    info = encoder.info
    context = int(info.context_length)
    lengths = sorted({effective_max_tokens(length, context) for length in lengths} | {context})
    if active_ray() is not None:
        # the Ray actors encode whole datasets at one length each: embed() at every length
        return _each_length_by_embed(captions, encoder, lengths, cache_dir, use_cache, progress)

    entries = {length: CacheEntry(cache_dir, cache_key(texts, info, length), len(texts), info.width)
               if use_cache else None for length in lengths}
    counts = _token_counts(encoder, texts, entries[context])
    longest = int(counts.max())
    # a length no caption exceeds shows the model the full context's tokens: its vectors are those
    encoded = [length for length in lengths if length == context or length < longest]
    order = np.argsort(-counts, kind="stable")   # embed()'s order, so that the cache chunks are its chunks
    ranges = chunk_ranges(len(texts), max(1, int(chunk_rows)))
    store = _Store(info, entries, counts, order, ranges, encoded)

    # the full context first: the shorter lengths take from it the vectors of the captions they do not cut
    passes = sorted((length for length in encoded if store.missing[length]), key=lambda length: length != context)
    if passes and not getattr(encoder, "prefix_refusal", "no encode_lengths"):
        _one_pass(encoder, texts, store, passes, progress)
    else:
        for number, length in enumerate(passes, start=1):
            _pass_at(encoder, texts, store, length, f"({number}/{len(passes)})", progress)
    store.finish()

    result = {length: Embeddings(vectors=store.vectors[length], token_counts=counts, max_tokens=length, info=info,
                                 origin=store.origin(length)) for length in encoded}
    for length in lengths:
        if length not in result:
            result[length] = Embeddings(vectors=store.vectors[context], token_counts=counts, max_tokens=length,
                                        info=info, origin=store.origin(context))
    return result


def _token_counts(encoder, texts, entry: CacheEntry | None) -> np.ndarray:
    """Untruncated counts, from the full context's cache entry when it has them (as embed() reads them)."""
    counts = entry.load_token_counts() if entry else None
    if counts is None:
        counts = np.asarray(encoder.token_counts(texts), dtype=np.int64)
        if counts.shape != (len(texts),):
            raise EncoderError(f"encoder {encoder.info.spec!r} returned {counts.shape} token counts "
                               f"for {len(texts)} captions")
    return counts


class _Store:
    """Each length's vectors, in caption order, with its cache entry: what is cached is loaded at the
    start; what is encoded is checked, kept and saved one cache chunk at a time."""

    def __init__(self, info, entries: dict, counts: np.ndarray, order: np.ndarray, ranges, encoded):
        self.info, self.entries, self.counts, self.order, self.ranges = info, entries, counts, order, ranges
        self.vectors = {length: np.empty((len(counts), info.width), dtype=np.float32) for length in encoded}
        self.missing = {}
        for length in encoded:
            entry = entries[length]
            if entry is not None:
                known = entry.load_token_counts()
                if known is None or not np.array_equal(known, counts):
                    entry.check_writable()  # before anything is written or encoded
                    entry.save_token_counts(counts)
            self.missing[length] = []
            for start, stop in ranges:
                chunk = entry.load_chunk(start, stop) if entry is not None else None
                if chunk is None:
                    self.missing[length].append((start, stop))
                else:
                    self.vectors[length][order[start:stop]] = chunk
            if entry is not None and self.missing[length]:
                entry.check_writable()

    def rows(self, start: int, stop: int) -> np.ndarray:
        return self.order[start:stop]

    def full_context(self, start: int, stop: int) -> np.ndarray:
        """The chunk's full-context vectors: what a length that cuts none of its captions gives them."""
        return self.vectors[self.info.context_length][self.order[start:stop]].copy()

    def put(self, length: int, start: int, stop: int, chunk: np.ndarray) -> None:
        from capgeo.encoders.embed import _checked_unit_rows

        rows = self.order[start:stop]
        chunk = _checked_unit_rows(self.shaped(chunk, stop - start), rows, self.info.spec)
        if self.entries[length] is not None:
            self.entries[length].save_chunk(start, stop, chunk)
        self.vectors[length][rows] = chunk

    def shaped(self, vectors, n: int) -> np.ndarray:
        """The encoder's output for ``n`` captions as float32, or an EncoderError saying what came back."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (n, self.info.width):
            raise EncoderError(f"encoder {self.info.spec!r} returned shape {vectors.shape} "
                               f"for {n} captions of width {self.info.width}")
        return vectors

    def finish(self) -> None:
        for length, missing in self.missing.items():
            if missing and self.entries[length] is not None:
                self.entries[length].write_manifest(self.info, length, self.ranges)

    def origin(self, length: int) -> str:
        missing = len(self.missing[length])
        return "cache" if not missing else "resumed" if missing < len(self.ranges) else "encoded"


def _one_pass(encoder, texts, store: _Store, passes: list[int], progress) -> None:
    """Every missing length from one forward per chunk (``encoder.encode_lengths``). A chunk whose
    full-context vectors are cached runs only its captions cut at the shortest length it misses."""
    context = store.info.context_length
    plan = []
    for start, stop in store.ranges:
        needed = [length for length in passes if (start, stop) in store.missing[length]]
        if needed:
            rows = store.rows(start, stop)
            slots = (np.arange(len(rows)) if context in needed
                     else np.flatnonzero(store.counts[rows] > min(needed)))
            plan.append((start, stop, needed, slots))
    shown = ", ".join(str(length) for length in sorted(passes))
    with progress_bar(f"Encoding with {store.info.name}: lengths {shown} in one pass (1/1)",
                      total=sum(len(slots) for *_, slots in plan), enabled=progress) as bar:
        for start, stop, needed, slots in plan:
            rows = store.rows(start, stop)
            tally = Tally(bar)
            out = encoder.encode_lengths([texts[i] for i in rows[slots]], needed, progress=tally)
            bar.advance(max(0, len(slots) - tally.count))
            if context in needed:
                store.put(context, start, stop, out[context])
            for length in needed:
                if length != context:
                    cut = store.counts[rows[slots]] > length
                    chunk = store.full_context(start, stop)
                    chunk[slots[cut]] = store.shaped(out[length], len(slots))[cut]
                    store.put(length, start, stop, chunk)


def _pass_at(encoder, texts, store: _Store, length: int, pass_number: str, progress) -> None:
    """One length's missing chunks: the captions it cuts encoded at it (every caption at the full context)."""
    context = store.info.context_length
    plan = []
    for start, stop in store.missing[length]:
        rows = store.rows(start, stop)
        plan.append((start, stop, np.arange(len(rows)) if length == context
                     else np.flatnonzero(store.counts[rows] > length)))
    what = f"full context {length}" if length == context else f"length {length}"
    with progress_bar(f"Encoding with {store.info.name}: {what} {pass_number}",
                      total=sum(len(slots) for *_, slots in plan), enabled=progress) as bar:
        for start, stop, slots in plan:
            rows = store.rows(start, stop)
            chunk = (np.empty((len(rows), store.info.width), dtype=np.float32) if length == context
                     else store.full_context(start, stop))
            if slots.size:
                tally = Tally(bar)
                chunk[slots] = store.shaped(encoder.encode([texts[i] for i in rows[slots]], max_tokens=length,
                                                           progress=tally), len(slots))
                bar.advance(max(0, len(slots) - tally.count))
            store.put(length, start, stop, chunk)


def _each_length_by_embed(captions, encoder, lengths, cache_dir, use_cache, progress) -> dict[int, Embeddings]:
    from dataclasses import replace

    from capgeo.encoders.embed import embed

    context = int(encoder.info.context_length)
    full = embed(captions, encoder, max_tokens=context, cache_dir=cache_dir, use_cache=use_cache, progress=progress)
    longest = int(np.max(full.token_counts))
    result = {}
    for length in lengths:
        if length == context or length >= longest:
            result[length] = replace(full, max_tokens=length)
        else:
            result[length] = embed(captions, encoder, max_tokens=length, cache_dir=cache_dir, use_cache=use_cache,
                                   progress=progress)
    result[context] = full
    return result
