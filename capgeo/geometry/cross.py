"""The exact pass over two caption sets: every query caption against every reference caption.

`capgeo leak` asks which evaluation captions have a twin in the training set. That is a
rectangular (queries x references) problem, unlike the symmetric pass of
:mod:`capgeo.geometry.pairwise`, so it gets its own small walker: query rows in blocks,
reference columns in blocks (tiles), never the whole M x N matrix.

From each tile it keeps (1) every pair with cosine >= ``threshold`` and (2) each query's
``top_k`` most similar references. Both are exact: no pair is skipped or estimated, and the
result does not depend on the block size: every cosine comes from an arithmetic block of one
shape (:class:`capgeo.geometry.cpu_pass.BlockProducts` on the CPU, in numpy;
:class:`capgeo.geometry.torch_blocks.TorchBlockProducts` for ``--device cuda`` / mps, which run
the same walk in torch), whatever the tile. Equal cosines are ordered by the lower reference
index first, as in pairwise.py, so results are reproducible.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from capgeo.defaults import FIXED_BLOCK_SIZE
from capgeo.errors import CapgeoError
from capgeo.progress import progress_bar

#: pairs at or above the threshold kept at most; more means the threshold is far too low
DEFAULT_MAX_PAIRS = 5_000_000


@dataclass
class CrossScan:
    """Result of :func:`scan_cross`; indices are rows of the query and reference sets."""

    pair_query: np.ndarray       # (P,) int64, pairs with cosine >= threshold, sorted by query then cosine desc
    pair_reference: np.ndarray   # (P,) int64
    pair_cosine: np.ndarray      # (P,) float32
    top_index: np.ndarray        # (M, k) int64 best references per query, cosine desc, ties by lower index
    top_cosine: np.ndarray       # (M, k) float32
    threshold: float


@dataclass(frozen=True)
class CrossOptions:
    """What :func:`scan_cross` keeps: pairs with cosine >= ``threshold`` (raising past ``max_pairs``
    of them) and each query's ``top_k`` best references; ``asked_threshold``: the threshold the
    user gave, named in that error where ``threshold`` is a margin below it."""

    threshold: float
    top_k: int = 1
    block_size: int = FIXED_BLOCK_SIZE
    max_pairs: int = DEFAULT_MAX_PAIRS
    device: str | None = None
    progress: bool | None = None
    asked_threshold: float | None = None


def _unit_rows(vectors, name: str) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] == 0:
        raise CapgeoError(f"{name}: expected a non-empty 2-D array of caption vectors, got shape {vectors.shape}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise CapgeoError(f"{name}: a row is all zeros or not finite; expected caption embeddings")
    return np.ascontiguousarray(vectors / norms)


def scan_cross(queries, references, options: CrossOptions | None = None, **values) -> CrossScan:
    """Exact cosines of every query row against every reference row, blockwise.

    ``queries`` (M, d) and ``references`` (N, d) are normalised here. ``options``: a
    :class:`CrossOptions` (or its fields as keywords, which replace those of ``options``; without
    it ``threshold`` is required). Keeps the pairs with cosine >= ``threshold`` (raising past
    ``max_pairs`` of them, so memory stays bounded) and each query's ``top_k`` best references
    (none with ``top_k=0``).
    """
    options = dataclasses.replace(options, **values) if options is not None else CrossOptions(**values)
    threshold, top_k, block_size, device = options.threshold, options.top_k, options.block_size, options.device
    if not -1.0 <= threshold <= 1.0:
        raise CapgeoError(f"threshold: expected a cosine between -1 and 1, got {threshold}")
    if top_k < 0 or block_size < 1:
        raise CapgeoError(f"top_k must be at least 0 and block_size at least 1, got {top_k} and {block_size}")
    query_matrix = _unit_rows(queries, "query vectors")
    reference_matrix = _unit_rows(references, "reference vectors")
    if query_matrix.shape[1] != reference_matrix.shape[1]:
        raise CapgeoError(f"vectors of width {query_matrix.shape[1]} and {reference_matrix.shape[1]} cannot be "
                          "compared; encode both sets with the same encoder")
    from capgeo.device import check_device

    check_device(device)  # a cache hit loads no model, which would have asked for the hardware
    from capgeo.geometry.pairwise import runs_on_numpy

    if runs_on_numpy(device):
        return _scan_cross_numpy(query_matrix, reference_matrix, options)
    import torch

    torch_device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return _scan_cross_torch(query_matrix, reference_matrix, torch_device, options)


def _scan_cross_torch(query_matrix, reference_matrix, torch_device, options: CrossOptions) -> CrossScan:
    """:func:`scan_cross` in torch on ``torch_device``: every cosine from one fixed-shape arithmetic
    block product (:class:`capgeo.geometry.torch_blocks.TorchBlockProducts`), whatever the tile."""
    import torch

    from capgeo.geometry.torch_blocks import TorchBlockProducts, block_threads

    with block_threads(torch_device) as pool:
        query_rows = torch.from_numpy(query_matrix).to(torch_device)
        reference_rows = torch.from_numpy(reference_matrix).to(torch_device)
        return _walk_cross_torch(TorchBlockProducts(query_rows, reference_rows, pool=pool), options)


def _walk_cross_torch(products, options: CrossOptions) -> CrossScan:
    import torch

    threshold, top_k, block_size, max_pairs = options.threshold, options.top_k, options.block_size, options.max_pairs

    query_rows, reference_rows = products.rows, products.columns
    torch_device = query_rows.device
    m, n = query_rows.shape[0], reference_rows.shape[0]
    buffer = torch.empty(min(block_size, m) * min(block_size, n), dtype=torch.float32, device=torch_device)
    k = max(min(top_k, n), 1)
    found_query, found_reference, found_cosine = [], [], []
    found = 0
    best_cosine = np.empty((m, k), dtype=np.float32)
    best_index = np.empty((m, k), dtype=np.int64)
    query_starts = range(0, m, block_size)
    reference_starts = range(0, n, block_size)
    with torch.inference_mode(), progress_bar("train x eval cosines", len(query_starts) * len(reference_starts),
                                              enabled=options.progress) as bar:
        for query_start in query_starts:
            rows = query_rows[query_start:query_start + block_size]
            running_cosine = torch.full((rows.shape[0], 0), float("-inf"), device=torch_device)
            running_index = torch.full((rows.shape[0], 0), -1, dtype=torch.int64, device=torch_device)
            for reference_start in reference_starts:
                reference_end = min(reference_start + block_size, n)
                tile = buffer[:rows.shape[0] * (reference_end - reference_start)].view(
                    rows.shape[0], reference_end - reference_start)
                products.tile_into(query_start, query_start + rows.shape[0], reference_start, reference_end, tile)
                hit_rows, hit_columns = torch.nonzero(tile >= threshold, as_tuple=True)
                found += int(hit_rows.numel())
                if found > max_pairs:
                    raise _too_many_pairs(options)
                if hit_rows.numel():
                    found_query.append((hit_rows + query_start).cpu().numpy())
                    found_reference.append((hit_columns + reference_start).cpu().numpy())
                    found_cosine.append(tile[hit_rows, hit_columns].cpu().numpy())
                tile_cosine, tile_position = _row_topk(tile, k)
                # later tiles hold larger reference indices than any kept so far, so a stable
                # sort (running list first) keeps equal cosines in index order
                merged_cosine = torch.cat([running_cosine, tile_cosine], dim=1)
                merged_index = torch.cat([running_index, tile_position + reference_start], dim=1)
                order = torch.sort(merged_cosine, dim=1, descending=True, stable=True).indices[:, :k]
                running_cosine = torch.gather(merged_cosine, 1, order)
                running_index = torch.gather(merged_index, 1, order)
                bar.advance(1)
            best_cosine[query_start:query_start + rows.shape[0]] = running_cosine.cpu().numpy()
            best_index[query_start:query_start + rows.shape[0]] = running_index.cpu().numpy()
    return _result(found_query, found_reference, found_cosine, best_index[:, :top_k], best_cosine[:, :top_k],
                   threshold)


def _too_many_pairs(options: CrossOptions) -> CapgeoError:
    # the threshold the user gave, not the candidates' margin below it (0.949997 for 0.95)
    asked = options.threshold if options.asked_threshold is None else options.asked_threshold
    max_pairs = options.max_pairs
    # `report --leak` has no --threshold of its own: the advice names the command that does
    return CapgeoError(f"more than {max_pairs:,} pairs reach cosine {asked:g}; raise the twin threshold "
                       "(`capgeo leak --threshold T`)")


def _result(found_query, found_reference, found_cosine, best_index, best_cosine, threshold) -> CrossScan:
    pair_query = np.concatenate(found_query) if found_query else np.zeros(0, dtype=np.int64)
    pair_reference = np.concatenate(found_reference) if found_reference else np.zeros(0, dtype=np.int64)
    pair_cosine = np.concatenate(found_cosine) if found_cosine else np.zeros(0, dtype=np.float32)
    order = np.lexsort((pair_reference, -pair_cosine.astype(np.float64), pair_query))
    return CrossScan(pair_query[order].astype(np.int64), pair_reference[order].astype(np.int64),
                     pair_cosine[order].astype(np.float32), best_index, best_cosine, float(threshold))


def _row_topk(tile, k):
    """Each row's k largest values and their column positions, equal values by lower position.

    torch.topk orders equal values arbitrarily, so rows with a tie inside their top k or
    at its edge are redone with a stable sort (rare: cosines of distinct captions seldom tie).
    """
    import torch

    width = min(k + 1, tile.shape[1])
    values, positions = torch.topk(tile, width, dim=1, largest=True, sorted=True)
    tied = (values[:, 1:] == values[:, :-1]).any(dim=1)
    if bool(tied.any()):
        rows = torch.nonzero(tied)[:, 0]
        values[rows], positions[rows] = (part[:, :width] for part in
                                         torch.sort(tile[rows], dim=1, descending=True, stable=True))
    return values[:, :k], positions[:, :k]


def _scan_cross_numpy(query_matrix, reference_matrix, options: CrossOptions) -> CrossScan:
    """:func:`scan_cross` on the CPU, in numpy (no torch)."""
    from capgeo.geometry.cpu_pass import BlockProducts, block_threads

    with block_threads() as pool:
        return _walk_cross(BlockProducts(query_matrix, reference_matrix, pool=pool), options)


def _walk_cross(products, options: CrossOptions) -> CrossScan:
    threshold, top_k, block_size, max_pairs = options.threshold, options.top_k, options.block_size, options.max_pairs
    query_matrix, reference_matrix = products.rows, products.columns
    m, n = query_matrix.shape[0], reference_matrix.shape[0]
    k = min(top_k, n)
    found_query, found_reference, found_cosine = [], [], []
    found = 0
    best_cosine = np.full((m, k), -np.inf, dtype=np.float32)
    best_index = np.full((m, k), -1, dtype=np.int64)
    buffer = np.empty(min(block_size, m) * min(block_size, n), dtype=np.float32)
    query_starts = range(0, m, block_size)
    reference_starts = range(0, n, block_size)
    with progress_bar("train x eval cosines", len(query_starts) * len(reference_starts),
                      enabled=options.progress) as bar:
        for query_start in query_starts:
            query_end = min(query_start + block_size, m)
            for reference_start in reference_starts:
                reference_end = min(reference_start + block_size, n)
                tile = buffer[:(query_end - query_start) * (reference_end - reference_start)].reshape(
                    query_end - query_start, reference_end - reference_start)
                products.tile_into(query_start, query_end, reference_start, reference_end, tile)
                hit_rows, hit_columns = np.nonzero(tile >= threshold)
                found += int(hit_rows.size)
                if found > max_pairs:
                    raise _too_many_pairs(options)
                if hit_rows.size:
                    found_query.append(hit_rows + query_start)
                    found_reference.append(hit_columns + reference_start)
                    found_cosine.append(tile[hit_rows, hit_columns])
                if k:
                    _merge_top(best_cosine[query_start:query_end], best_index[query_start:query_end], tile,
                               reference_start)
                bar.advance(1)
    return _result(found_query, found_reference, found_cosine, best_index, best_cosine, threshold)


def _merge_top(best_cosine, best_index, tile, column_start):
    """Merge a tile into running top-k lists (in place): cosine descending, lower index first.
    Later tiles hold larger indices, so a stable sort (running list first) keeps ties in order."""
    k = best_cosine.shape[1]
    if k == 1:  # argmax takes the first of equal values: the lowest index
        position = np.argmax(tile, axis=1)
        value = tile[np.arange(tile.shape[0]), position]
        better = value > best_cosine[:, 0]
        best_cosine[better, 0] = value[better]
        best_index[better, 0] = position[better] + column_start
        return
    width = min(k, tile.shape[1])
    if tile.shape[1] > width:
        kth = np.partition(tile, tile.shape[1] - width, axis=1)[:, tile.shape[1] - width]
        rows, columns = np.nonzero(tile >= kth[:, None])
    else:
        rows, columns = np.nonzero(np.ones(tile.shape, dtype=bool))
    values = np.concatenate([best_cosine.ravel(), tile[rows, columns]])
    ids = np.concatenate([best_index.ravel(), columns + column_start])
    owner = np.concatenate([np.repeat(np.arange(tile.shape[0]), k), rows])
    order = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), -values, owner))
    owner, values, ids = owner[order], values[order], ids[order]
    starts = np.searchsorted(owner, np.arange(tile.shape[0]))
    rank = np.arange(owner.size) - starts[owner]
    keep = rank < k
    best_cosine[owner[keep], rank[keep]] = values[keep]
    best_index[owner[keep], rank[keep]] = ids[keep]
