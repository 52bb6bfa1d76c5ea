"""Near-duplicate captions: mine them, pick examples, group them, describe them.

Mining starts from the geometry engine's top-k companion lists
(:func:`capgeo.geometry.pairwise.scan_pairs`): every caption's k most similar
captions of *other* groups. A pair (i, j) is missed by those lists only when
both i and j already hold k companions at least as similar, so a row whose
k-th companion cosine is at or above the cut-off may hide pairs. Given the
vectors, such rows are re-searched exactly (in blocks, never an N x N matrix);
given only a scan, a :class:`IncompleteMiningWarning` says how many rows may
hide pairs.

Captions of one group describe the same image: they are positives of each
other and never reported.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from capgeo.defaults import (DUPES_NEIGHBOURS, DUPES_PER_QUANTILE, DUPES_QUANTILES, DUPES_TOP, PAIR_BLOCK_SIZE,
                             TOP_K)
from capgeo.display import counted
from capgeo.encoders.base import UNIT_NORM_TOLERANCE
from capgeo.errors import CapgeoError
from capgeo.findings.dupes_options import ExampleOptions, MiningOptions, PairListOptions, SetOptions
from capgeo.findings.highlight import highlight_pair, is_exact_duplicate
from capgeo.geometry.inbatch import DEFAULT_NEAR_DUPLICATE_THRESHOLD
from capgeo.geometry.row_norms import row_norms
from capgeo.findings.result import section
from capgeo.geometry.typed_profile import (Dupes, DupesExample, DupesPair, DupesQuery, Encoder, NearDuplicateSet,
                                          NearDuplicateTotals)
from capgeo.preflight import check_pair_threshold
from capgeo.progress import labelled, progress_bar

SCHEMA = "capgeo.dupes/1"

DEFAULT_QUANTILES = DUPES_QUANTILES


class IncompleteMiningWarning(UserWarning):
    """Some pairs above the cut-off may be missing from the mined list."""


@dataclass(frozen=True, order=True)
class Pair:
    """Two captions of different groups, ``index_a < index_b`` (row numbers in the CaptionSet)."""

    index_a: int
    index_b: int
    cosine: float


@dataclass(frozen=True)
class Example:
    """A query caption whose hardest-companion cosine sits at ``quantile`` of that distribution."""

    quantile: float
    target_cosine: float          # the quantile's value
    index: int                    # the query caption
    hardest_cosine: float         # its own hardest-companion cosine
    neighbours: tuple[tuple[int, float], ...]  # (caption index, cosine), nearest first


@dataclass(frozen=True)
class Component:
    """Captions joined by near-duplicate links (cosine >= threshold), directly or through others."""

    members: tuple[int, ...]      # caption indices, ascending
    weakest_link: float           # min edge of the component's maximum spanning tree
    strongest_link: float         # max edge inside the component
    n_edges: int
    min_member_cosine: float | None  # smallest cosine between any two members (None when not computed)

    @property
    def size(self) -> int:
        return len(self.members)


# --------------------------------------------------------------------------- inputs


def _vectors_of(source) -> np.ndarray | None:
    """The normalised vectors when ``source`` is an array or an Embeddings, else None (a scan)."""
    if isinstance(source, np.ndarray):
        vectors = source
    elif hasattr(source, "vectors"):
        vectors = source.vectors
    else:
        return None
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise CapgeoError(f"vectors: expected a 2-D array (captions x dimensions), got shape {vectors.shape}")
    norms = row_norms(vectors)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        bad = int(np.flatnonzero(~np.isfinite(norms[:, 0]) | (norms[:, 0] == 0))[0])
        raise CapgeoError(f"vectors: row {bad} is all zeros or not finite; expected caption embeddings")
    # the exact re-search must compare the vectors the scan compares: the scan uses unit rows
    # as given (capgeo.geometry.pairwise.prepare_inputs) and divides the others by their norms
    if np.all(np.abs(norms - 1) <= UNIT_NORM_TOLERANCE):
        return np.ascontiguousarray(vectors)
    return np.ascontiguousarray(vectors / norms)


def _scan_pairs(vectors: np.ndarray, group_codes: np.ndarray, top_k: int, block_size: int, device=None,
                exclude_codes=None):
    # imported here: the geometry engine is built alongside this module
    from capgeo.geometry.pairwise import scan_pairs

    # only the companion lists are needed here, not the distributions
    return scan_pairs(vectors, group_codes, top_k=top_k, block_size=block_size, device=device, histograms=False,
                      exclude_codes=exclude_codes)


def _check_sizes(captions, vectors: np.ndarray | None, scan) -> None:
    n = len(captions)
    if vectors is not None and vectors.shape[0] != n:
        raise CapgeoError(f"vectors: {vectors.shape[0]} rows for {n} captions; expected one row per caption")
    if scan is not None:
        shape = np.asarray(scan.companion_index).shape
        if shape[0] != n:
            raise CapgeoError(f"pair scan: {shape[0]} rows for {n} captions; expected one row per caption")
        if len(shape) != 2 or shape[1] < 1:
            raise CapgeoError("pair scan: no companions per caption (top_k 0); scan with top_k >= 1")


def _resolve(captions, source, top_k: int, block_size: int, scan=None, device=None, exclude_codes=None):
    """(vectors or None, a scan): ``scan`` when given, else one of ``top_k`` columns computed from the vectors."""
    vectors = _vectors_of(source)
    if vectors is None:
        scan = source
    else:
        _check_sizes(captions, vectors, None)
        if scan is None:
            k = max(1, min(top_k, len(captions) - 1))
            scan = _scan_pairs(vectors, np.asarray(captions.group_codes), k, block_size, device, exclude_codes)
    _check_sizes(captions, None, scan)
    return vectors, scan


# --------------------------------------------------------------------------- mining


def _scan_candidates(scan, threshold: float | None = None, limit: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (caption, companion) links of the scan that can be among the ``limit`` best pairs at or
    above ``threshold`` (all of them when neither is given), as unordered pairs, each once."""
    index = np.asarray(scan.companion_index)
    cosine = np.asarray(scan.companion_cosine, dtype=np.float64)
    columns = index.ravel()
    values = cosine.ravel()
    keep = (columns >= 0) & np.isfinite(values)
    if threshold is not None:
        keep &= values >= threshold
    if limit is not None and int(keep.sum()) > 2 * limit:
        # a pair is at most two links (one from each end), so fewer than 2 * limit links lie above
        # the limit-th best pair: links below the (2 * limit)-th largest cannot reach the answer.
        # Sorting only those spares sorting all N x k links (seconds at a million captions)
        kept_values = values[keep]
        floor = np.partition(kept_values, kept_values.size - 2 * limit)[kept_values.size - 2 * limit]
        keep &= values >= floor
    kept = np.flatnonzero(keep)
    return _unique_links(kept // index.shape[1], columns[kept], values[kept])


def _unique_links(rows: np.ndarray, columns: np.ndarray, values: np.ndarray):
    """Links as (low index, high index, cosine) arrays, each unordered pair once; a pair seen
    twice keeps its larger cosine (the two directions can differ in the last float32 bit)."""
    low, high = np.minimum(rows, columns), np.maximum(rows, columns)
    order = np.lexsort((-values, high, low))
    low, high, values = low[order], high[order], values[order]
    first = np.ones(len(low), dtype=bool)
    first[1:] = (low[1:] != low[:-1]) | (high[1:] != high[:-1])
    return low[first], high[first], values[first]


def _ordered_links(links, threshold: float | None, limit: int | None):
    """The links at or above ``threshold``, cosine descending, ties by caption indices ascending,
    the first ``limit``: (low, high, cosine) arrays."""
    low, high, values = links
    if threshold is not None:
        keep = values >= threshold
        low, high, values = low[keep], high[keep], values[keep]
    order = np.lexsort((high, low, -values))[:limit]
    return low[order], high[order], values[order]


def _ordered(links, threshold: float | None, limit: int | None) -> list[Pair]:
    low, high, values = _ordered_links(links, threshold, limit)
    return [Pair(int(a), int(b), float(c)) for a, b, c in zip(low.tolist(), high.tolist(), values.tolist())]


def _rows_that_may_hide_pairs(scan, cutoff: float) -> np.ndarray:
    """Rows whose k-th companion is at or above the cut-off (nan/-1 padding means the row is complete)."""
    cosine = np.asarray(scan.companion_cosine, dtype=np.float64)
    index = np.asarray(scan.companion_index)
    last = cosine[:, -1]
    full = (index[:, -1] >= 0) & np.isfinite(last) & (last >= cutoff)
    return np.flatnonzero(full)


def _exact_links(vectors: np.ndarray, group_codes: np.ndarray, rows: np.ndarray, cutoff: float,
                 per_row: int | None, mining: MiningOptions, exclude_codes=None):
    """All other-group links of ``rows`` with cosine >= cutoff (at most ``per_row`` best per row), exactly.

    One pass of the all-pairs engine over the tiles that hold these rows: with ``per_row``
    its running top-k (k = per_row) gives each row's best links; without, its threshold
    consumer gives every pair >= cutoff, stopping past ``mining.max_pairs`` pairs."""
    from capgeo.geometry.pairwise import TooManyPairs, make_grid, prepare_inputs, tile_partial
    from capgeo.geometry.partials import sorted_pairs

    max_links = mining.max_pairs
    matrix, groups, device = prepare_inputs(vectors, group_codes, mining.device)
    grid = make_grid(len(group_codes), mining.block_size, device)
    blocks = np.unique(rows // grid.block_size).tolist()
    tiles = {(min(block, other), max(block, other)) for block in blocks for other in range(grid.blocks)}
    try:
        # its tiles are a part of the whole pass's: named, or its bar reads as that one running backwards
        with labelled(f"re-searching {counted(len(rows), 'crowded caption')}"):
            partial = tile_partial(matrix, groups, grid, tiles, top_k=per_row or 0, histograms=False,
                                   threshold=None if per_row else cutoff, max_pairs=None if per_row else max_links,
                                   exclude_codes=exclude_codes)
    except TooManyPairs as error:
        raise CapgeoError(f"{error}; raise --threshold or set a --top limit") from None
    if per_row:
        index, cosine = partial.dense_companions()
        index, cosine = index[rows], cosine[rows].astype(np.float64)
        keep = (index >= 0) & (np.nan_to_num(cosine, nan=-np.inf) >= cutoff)
        return np.repeat(rows, per_row)[keep.ravel()], index[keep], cosine[keep]
    found_rows, found_columns, found_values = sorted_pairs(partial)
    crowded = np.zeros(len(group_codes), dtype=bool)
    crowded[rows] = True
    keep = crowded[found_rows] | crowded[found_columns]
    return found_rows[keep], found_columns[keep], found_values[keep].astype(np.float64)


def near_duplicate_pairs(captions, vectors_or_scan, *, threshold: float | None = None, limit: int | None = DUPES_TOP,
                         scan=None, exclude_codes=None, mining: MiningOptions | None = None,
                         **mining_options) -> list[Pair]:
    """Caption pairs of different groups, most similar first, each unordered pair once.

    ``vectors_or_scan`` is the captions' normalised vectors (an array or an Embeddings) or
    a PairScan from :func:`capgeo.geometry.pairwise.scan_pairs`. Pairs have cosine
    >= ``threshold`` (when given) and at most ``limit`` are returned (when given).
    Ties are broken by caption indices.

    With vectors the answer is exact: the scan uses ``k = max(top_k, limit)``
    (the global top-L pairs are always inside each end's top-L list) and rows
    that may hide pairs are re-searched exactly. With a scan only, an
    :class:`IncompleteMiningWarning` gives the number of rows that may hide pairs.
    ``scan``: a scan of these vectors to reuse instead of scanning again (any k:
    crowded rows are re-searched either way). ``device``: where the pass runs (default: the best available).
    ``exclude_codes``: (N,) integers; pairs of equal codes are left out by the pass itself (with
    vectors only; a given ``scan`` is then not reused). ``mining``: how the passes run
    (:class:`~capgeo.findings.dupes_options.MiningOptions`: ``top_k``, ``block_size``, ``max_pairs``,
    ``device``), or its fields as keywords. ``limit`` is at most ``max_pairs``: the pass keeps at
    most that many pairs in memory whatever the data.
    """
    mining = MiningOptions.of(mining, **mining_options)
    max_pairs = mining.max_pairs
    if threshold is None and limit is None:
        raise CapgeoError("near-duplicate mining needs a threshold, a limit, or both")
    if limit is not None and limit < 1:
        raise CapgeoError(f"limit: expected a positive number of pairs, got {limit}")
    if limit is not None and limit > max_pairs:
        raise CapgeoError(f"limit: at most {max_pairs:,} pairs are listed (each end of a pair keeps a list of "
                          f"that length), got {limit:,}")
    if exclude_codes is not None:
        scan = None
    if threshold is not None:
        check_pair_threshold(threshold)
    low, high, values = _mined_links(captions, vectors_or_scan, threshold, limit, mining, scan, exclude_codes)
    return [Pair(int(a), int(b), float(c)) for a, b, c in zip(low.tolist(), high.tolist(), values.tolist())]


def _mined_links(captions, vectors_or_scan, threshold, limit, mining: MiningOptions, scan, exclude_codes):
    """:func:`near_duplicate_pairs` as (low, high, cosine) arrays, in its order."""
    max_pairs = mining.max_pairs
    if len(captions) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    if limit is None and scan is None and _vectors_of(vectors_or_scan) is not None:
        # every pair at or above the threshold: one pass that keeps them (at most max_pairs), no top-k lists
        vectors = _vectors_of(vectors_or_scan)
        _check_sizes(captions, vectors, None)
        every = np.arange(len(captions))
        links = _exact_links(vectors, np.asarray(captions.group_codes), every, threshold, None, mining,
                             exclude_codes)
        return _ordered_links(links, threshold, None)
    vectors, scan = _resolve(captions, vectors_or_scan, max(mining.top_k, limit or 0), mining.block_size, scan,
                             mining.device, exclude_codes)
    links = _scan_candidates(scan, threshold, limit)
    ordered = _ordered_links(links, threshold, limit)
    cutoff = -np.inf if threshold is None else threshold
    if limit is not None and ordered[2].size >= limit:
        cutoff = max(cutoff, float(ordered[2][limit - 1]))
    crowded = _rows_that_may_hide_pairs(scan, cutoff)
    if len(crowded) == 0:
        return ordered
    if vectors is None:
        k = np.asarray(scan.companion_index).shape[1]
        warnings.warn(IncompleteMiningWarning(
            f"{len(crowded):,} captions have {k} or more other-group companions at cosine >= {cutoff:.4f}: "
            f"pairs among them may be missing; scan with a larger top_k (> {k}) or pass the vectors"), stacklevel=3)
        return ordered
    extra = _exact_links(vectors, np.asarray(captions.group_codes), crowded, cutoff, limit, mining, exclude_codes)
    merged = _unique_links(*(np.concatenate([known, found]) for known, found in zip(links, extra)))
    if threshold is not None and limit is None and int((merged[2] >= threshold).sum()) > max_pairs:
        raise CapgeoError(f"more than {max_pairs:,} caption pairs reach cosine {threshold:.4f}; "
                          "raise --threshold or set a --top limit")
    return _ordered_links(merged, threshold, limit)


# --------------------------------------------------------------------------- examples


def _nearest_ranks(position: float, count: int, n: int) -> np.ndarray:
    """The ``count`` ranks of 0..n-1 nearest to ``position`` (ties to the lower rank), ascending.
    (A window around the rounded position leaned one rank low whenever it rounded down.)"""
    low, high = max(0, int(np.floor(position)) - count), min(n, int(np.ceil(position)) + count + 1)
    candidates = np.arange(low, high)
    nearest = candidates[np.argsort(np.abs(candidates - position), kind="stable")[:count]]
    return np.sort(nearest)


def examples_at_quantiles(captions, source, quantiles: Sequence[float] = DEFAULT_QUANTILES, *,
                          n_per_quantile: int = 1, neighbours: int = DUPES_NEIGHBOURS, scan=None,
                          mining: MiningOptions | None = None, **mining_options) -> list[Example]:
    """Query captions whose hardest-companion cosine sits at each quantile, with their nearest companions.

    The hardest-companion cosine of a caption is its highest cosine with a caption
    of another group (column 0 of the scan). For each quantile q the queries are the
    ``n_per_quantile`` captions whose rank in that distribution is nearest to
    q * (n - 1) (ties by index); each comes with its ``neighbours`` nearest
    other-group captions. ``mining``: how the pass runs (or its fields as keywords).
    """
    mining = MiningOptions.of(mining, **mining_options)
    for q in quantiles:
        if not 0.0 <= q <= 1.0:
            raise CapgeoError(f"quantile: expected a value between 0 and 1, got {q}")
    if n_per_quantile < 1 or neighbours < 1:
        raise CapgeoError("examples: need at least one query per quantile and one neighbour")
    if len(captions) < 2:
        return []
    _, scan = _resolve(captions, source, max(mining.top_k, neighbours), mining.block_size, scan, mining.device)
    index = np.asarray(scan.companion_index)
    cosine = np.asarray(scan.companion_cosine, dtype=np.float64)
    # a small dataset has fewer other-image captions than neighbours asked for: show those it has
    neighbours = min(neighbours, index.shape[1])
    hardest = cosine[:, 0]
    valid = np.flatnonzero((index[:, 0] >= 0) & np.isfinite(hardest))
    if len(valid) == 0:
        return []
    # stable sort: equal cosines keep caption order, so choices are reproducible
    ranked = valid[np.argsort(hardest[valid], kind="stable")]
    n_queries = min(n_per_quantile, len(ranked))
    examples = []
    for q in quantiles:
        target = float(np.quantile(hardest[valid], q))
        for query in ranked[_nearest_ranks(q * (len(ranked) - 1), n_queries, len(ranked))]:
            row = [(int(j), float(c)) for j, c in zip(index[query, :neighbours], cosine[query, :neighbours])
                   if j >= 0 and np.isfinite(c)]
            examples.append(Example(float(q), target, int(query), float(hardest[query]), tuple(row)))
    return examples


# --------------------------------------------------------------------------- components


def near_duplicate_components(captions, source, threshold: float, *, member_cosine_limit: int = 2000, scan=None,
                              mining: MiningOptions | None = None, **mining_options) -> list[Component]:
    """Connected components of the graph whose edges are the pairs with cosine >= threshold.

    Components chain: two members can be far below the threshold when each is
    close to a third. ``weakest_link`` is the smallest cosine among the edges that
    hold the component together, i.e. the minimum edge of its maximum spanning
    tree (the largest cosine c such that the component stays connected using only
    edges >= c). ``min_member_cosine`` is the smallest cosine between any two
    members, computed when vectors are given and the component has at most
    ``member_cosine_limit`` members. Largest components first. ``mining``: how the passes run (or
    its fields as keywords).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components, minimum_spanning_tree

    pairs = near_duplicate_pairs(captions, source, threshold=threshold, limit=None, scan=scan,
                                 mining=MiningOptions.of(mining, **mining_options))
    if not pairs:
        return []
    vectors = _vectors_of(source)
    n = len(captions)
    rows = np.array([p.index_a for p in pairs])
    columns = np.array([p.index_b for p in pairs])
    values = np.array([p.cosine for p in pairs])
    graph = coo_matrix((np.ones(len(pairs)), (rows, columns)), shape=(n, n)).tocsr()
    _, labels = connected_components(graph, directed=False)
    edge_label = labels[rows]
    components = []
    for label in np.unique(edge_label):
        in_component = edge_label == label
        edge_rows, edge_columns, edge_values = rows[in_component], columns[in_component], values[in_component]
        members = np.unique(np.concatenate([edge_rows, edge_columns]))
        local = {int(m): i for i, m in enumerate(members)}
        # weights 2 - cosine are > 0 for every cosine <= 1, so no edge is read as "absent"
        # (plain negation would drop cosine 0), and a minimum spanning tree of them is
        # a maximum spanning tree of the cosines
        weights = coo_matrix((2.0 - edge_values, ([local[int(r)] for r in edge_rows],
                                                  [local[int(c)] for c in edge_columns])),
                             shape=(len(members), len(members)))
        tree = minimum_spanning_tree(weights)
        weakest = float(2.0 - tree.data.max())
        member_min = None
        if vectors is not None and len(members) <= member_cosine_limit:
            block = vectors[members] @ vectors[members].T
            member_min = float(block[np.triu_indices(len(members), k=1)].min())
        components.append(Component(tuple(int(m) for m in members), weakest, float(edge_values.max()),
                                    int(in_component.sum()), member_min))
    components.sort(key=lambda c: (-c.size, -c.weakest_link, c.members[0]))
    return components


# --------------------------------------------------------------------------- typed rows and results


def pair_row(captions, index_a: int, index_b: int, cosine: float, *, rank: int | None = None,
             neighbour_rank: int | None = None, columns=None) -> DupesPair:
    """One pair, typed: ids, groups, texts, cosine, Jaccard, highlights (a ``rank`` in a pair list,
    a ``neighbour_rank`` beside an example query). ``columns``: the captions' (texts, ids, groups),
    read once by a caller that makes many rows."""
    texts, ids, groups = columns or (captions.texts, captions.ids, captions.groups)
    highlight = highlight_pair(texts[index_a], texts[index_b])
    return DupesPair(
        rank=rank, neighbour_rank=neighbour_rank, index_a=index_a, index_b=index_b,
        id_a=ids[index_a], id_b=ids[index_b], group_a=groups[index_a], group_b=groups[index_b],
        text_a=texts[index_a], text_b=texts[index_b], cosine=float(cosine), jaccard=highlight.jaccard,
        exact_duplicate=highlight.exact_duplicate, shared_words=highlight.shared, only_a_words=highlight.only_a,
        only_b_words=highlight.only_b,
        spans_a=highlight.spans_a, spans_b=highlight.spans_b)


def pair_rows(captions, pairs: Sequence[Pair]) -> tuple[DupesPair, ...]:
    columns = captions.texts, captions.ids, captions.groups
    rows = []
    with progress_bar("Highlighting pairs", len(pairs)) as bar:
        for rank, p in enumerate(pairs, start=1):
            rows.append(pair_row(captions, p.index_a, p.index_b, p.cosine, rank=rank, columns=columns))
            bar.advance(1)
    return tuple(rows)


def component_rows(captions, components: Iterable[Component], threshold: float) -> tuple[NearDuplicateSet, ...]:
    texts, ids, groups = captions.texts, captions.ids, captions.groups
    return tuple(section(
        NearDuplicateSet, component=number, size=c.size, threshold=threshold,
        n_groups=len({groups[m] for m in c.members}),
        n_edges=c.n_edges, weakest_link=c.weakest_link, strongest_link=c.strongest_link,
        min_member_cosine=c.min_member_cosine, indices=tuple(c.members), ids=tuple(ids[m] for m in c.members),
        groups=tuple(groups[m] for m in c.members), texts=tuple(texts[m] for m in c.members),
    ) for number, c in enumerate(components, start=1))


CHAINING_WARNING = ("components chain through links: members are joined when a path of pairs at or above the "
                    "threshold connects them, so two members of one component can be far below the threshold "
                    "(min_member_cosine, the smallest cosine between two members, shows how far)")


def near_duplicate_totals(captions, source, threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD, *,
                          scan=None, mining: MiningOptions | None = None) -> NearDuplicateTotals:
    """How many pairs of different groups are near-duplicates (cosine >= ``threshold``), and how
    many of those are exact copies: the totals behind any top-N list (exact given the vectors)."""
    mining = mining or MiningOptions()
    check_pair_threshold(threshold)
    try:
        low, high, _ = _mined_links(captions, source, threshold, None, mining, scan, None)
    except CapgeoError:  # too many to list: say so rather than stop the command that asked for a top N
        return section(NearDuplicateTotals, threshold=float(threshold), n_pairs=None, more_than=mining.max_pairs,
                       n_exact_duplicate_pairs=None)
    codes = text_codes(captions.texts)  # each text normalised once, not once per pair
    exact = int(np.count_nonzero(codes[low] == codes[high]))
    return section(NearDuplicateTotals, threshold=float(threshold), n_pairs=int(low.size), more_than=None,
                   n_exact_duplicate_pairs=exact)


def text_codes(texts: Sequence[str]) -> np.ndarray:
    """One integer per caption, equal for exact copies (:func:`capgeo.findings.highlight.is_exact_duplicate`)."""
    from capgeo.captions.exact_duplicates import normalize_text

    seen: dict[str, int] = {}
    return np.array([seen.setdefault(normalize_text(text), len(seen)) for text in texts], dtype=np.int64)


#: rows of exact copies compared at a time when counting those skipped (a float64 block of this many
#: rows against one text's distinct vectors)
COPY_ROWS = 2048


def exact_copies_at_or_above(vectors: np.ndarray, group_codes, codes: np.ndarray, cutoff: float) -> int:
    """Pairs of exact copies (equal ``codes``) of different groups whose cosine is >= ``cutoff``.

    Counted per text from its distinct vectors and their multiplicities (an exact copy is
    usually the same vector), in blocks of :data:`COPY_ROWS` rows: memory stays bounded
    however many copies there are (20,000 identical captions are one vector)."""
    from scipy.sparse import csr_matrix

    groups = np.asarray(group_codes)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    total = 0
    for members in np.split(order, bounds):
        if members.size < 2 or np.unique(groups[members]).size < 2:
            continue
        distinct, which = np.unique(vectors[members], axis=0, return_inverse=True)
        which = which.reshape(-1)
        _, local_groups = np.unique(groups[members], return_inverse=True)
        # per distinct vector: its captions in each group (sparse: one entry per caption at most)
        by_group = csr_matrix((np.ones(members.size), (which, local_groups.reshape(-1))),
                              shape=(len(distinct), int(local_groups.max()) + 1))
        counts = np.asarray(by_group.sum(axis=1)).ravel()
        unit = distinct.astype(np.float64)
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        for start in range(0, len(distinct), COPY_ROWS):
            rows = slice(start, start + COPY_ROWS)
            reaches = unit[rows] @ unit.T >= cutoff
            # c_a c_b less those of one group: each pair of two vectors' captions; for a vector with
            # itself every pair is counted twice, and so halved
            pairs = counts[rows, None] * counts[None, :] - (by_group[rows] @ by_group.T).toarray()
            local = np.arange(len(distinct))[None, :] - np.arange(start, start + pairs.shape[0])[:, None]
            weight = np.where(local > 0, 1.0, np.where(local == 0, 0.5, 0.0))
            total += int(round(float((pairs * weight * reaches).sum())))
    return total


#: the pair floor that lists every pair: the lowest cosine
EVERY_PAIR = -1.0

#: the keys every ``capgeo.dupes/1`` object writes, null where the question was not asked ...
DUPES_KEYS = ("schema", "n_captions", "n_groups", "threshold", "limit", "top_k", "pairs", "quantiles", "examples",
              "components_threshold", "components", "warnings")
#: ... then those written when asked (the encoder: when the source has one), in the order written
DUPES_ORDER = DUPES_KEYS + ("encoder", "n_exact_skipped", "skip_exact", "near_duplicates", "dedup")


def dupes_section(captions, source, *, pairs: PairListOptions | None = PairListOptions(),
                  examples: ExampleOptions | None = ExampleOptions(), sets: SetOptions | None = None,
                  mining: MiningOptions | None = None,
                  near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD, scan=None) -> Dupes:
    """The engine behind :func:`pairs_section`, :func:`examples_section`, :func:`sets_section` and
    :func:`gallery_section`: any of their parts in one typed ``capgeo.dupes/1`` section
    (:class:`~capgeo.geometry.typed_profile.Dupes`, shape in docs/dupes.md), from one scan of the vectors.

    ``source``: the captions' normalised vectors (array or Embeddings) or a PairScan.
    Pairs are mined when ``pairs`` is given (:class:`PairListOptions`), with the total number of
    near-duplicate pairs (cosine >= ``near_duplicate_threshold``) beside them; examples when
    ``examples`` is (:class:`ExampleOptions`); sets when ``sets`` is (:class:`SetOptions`), with its
    ``keep`` also the dedup decision that keeps one caption per set. Warnings (incomplete mining,
    chaining) are listed under "warnings". ``mining``: how the pairwise passes run. ``scan``: a scan
    of these vectors with exact companions to reuse (the profile's, in a report) instead of scanning again.
    """
    mining = mining or MiningOptions()
    vectors = _vectors_of(source)
    if scan is not None:
        _check_sizes(captions, vectors, scan)
    elif vectors is not None:
        # one scan serves the pairs, the examples and the components
        needed = max(mining.top_k, (pairs.limit or 0) if pairs else 0, examples.neighbours if examples else 0)
        with labelled("pairs"):
            _, scan = _resolve(captions, vectors, needed, mining.block_size, device=mining.device)
    notes: list[str] = []

    def collecting(function, *args, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", IncompleteMiningWarning)
            result = function(*args, **kwargs)
        notes.extend(str(w.message) for w in caught if issubclass(w.category, IncompleteMiningWarning))
        return result

    fields: dict = {}
    if pairs is not None:
        rows, skipped = _pair_rows(captions, source, vectors, pairs, mining, scan, collecting)
        fields.update(pairs=rows, skip_exact=pairs.skip_exact, n_exact_skipped=skipped)
        with labelled("near-duplicate totals"):
            totals = collecting(near_duplicate_totals, captions, source, near_duplicate_threshold, scan=scan,
                                mining=mining)
        fields["near_duplicates"] = totals
    if examples is not None:
        with labelled("examples"):
            chosen = examples_at_quantiles(captions, source, examples.quantiles, n_per_quantile=examples.per_quantile,
                                           neighbours=examples.neighbours, scan=scan, mining=mining)
        fields["quantiles"] = tuple(float(q) for q in examples.quantiles)
        fields["examples"] = _grouped_examples(captions, chosen)
    if sets is not None:
        components, dedup = _sets(captions, source, vectors, sets, mining, scan, collecting, notes)
        fields.update(components=components, dedup=dedup)
    written = dict.fromkeys(DUPES_KEYS)
    written.update(schema=SCHEMA, n_captions=len(captions), n_groups=captions.n_groups,
                   threshold=pairs.threshold if pairs else None, limit=pairs.limit if pairs else None,
                   top_k=mining.top_k, components_threshold=sets.threshold if sets else None, **fields,
                   warnings=tuple(notes))
    return Dupes(**written, encoder=_encoder_of(source), order=DUPES_ORDER,
                 nulls=frozenset(key for key in DUPES_KEYS if written[key] is None))


def _encoder_of(source) -> Encoder | None:
    """The typed encoder of an Embeddings (None for vectors or a scan), its unknown fields written as null."""
    if not hasattr(source, "info"):
        return None
    info = source.info.to_dict()
    return Encoder(**info, nulls=frozenset(key for key, value in info.items() if value is None))


def _pair_rows(captions, source, vectors, listing: PairListOptions, mining: MiningOptions, scan,
               collecting) -> tuple[tuple[DupesPair, ...], int | None]:
    """The pair list of a dupes section, and the exact copies it left out (None unless ``skip_exact``)."""
    limit, skip_exact = listing.limit, listing.skip_exact
    # no threshold and no limit lists every pair of different images (up to max_pairs)
    floor = EVERY_PAIR if listing.threshold is None and limit is None else listing.threshold
    skipped = None

    def mine(count):
        return collecting(near_duplicate_pairs, captions, source, threshold=floor, limit=count, scan=scan,
                          mining=mining)

    if skip_exact and vectors is not None:
        # the pass itself leaves copies out, so the list is mined once, at its length
        codes = text_codes(captions.texts)
        with labelled("most similar pairs, exact copies left out"):
            mined = collecting(near_duplicate_pairs, captions, source, threshold=floor, limit=limit,
                               exclude_codes=codes, mining=mining)
        cutoff = mined[-1].cosine if limit is not None and len(mined) == limit else floor
        skipped = exact_copies_at_or_above(vectors, captions.group_codes, codes, -np.inf if cutoff is None else cutoff)
    elif skip_exact:  # a scan only: the copies among its pairs are dropped (the list may come out shorter)
        found = mine(limit)
        mined = [pair for pair in found if not is_exact_duplicate(captions.texts[pair.index_a],
                                                                  captions.texts[pair.index_b])]
        skipped = len(found) - len(mined)
    else:
        with labelled("most similar pairs"):
            mined = mine(limit)
    return pair_rows(captions, mined), skipped


def _sets(captions, source, vectors, sets: SetOptions, mining: MiningOptions, scan, collecting, notes: list[str]):
    """The near-duplicate set rows of a dupes section and, with ``sets.keep``, the dedup decision (else
    None), typed as the section holds them; the chaining warning goes to ``notes``."""
    with labelled("near-duplicate sets"):
        found = collecting(near_duplicate_components, captions, source, sets.threshold, scan=scan, mining=mining)
    rows = component_rows(captions, found, sets.threshold)
    # a pair, or a set whose every two members are at or above the threshold, does not chain
    if any(component.size > 2 and (component.min_member_cosine is None
                                    or component.min_member_cosine < sets.threshold)
           for component in found):
        notes.append(CHAINING_WARNING)
    if sets.keep is None:
        return rows, None
    from capgeo.findings.dedup import dedup_section

    decision = dedup_section(captions, vectors, scan, found, sets.keep, sets.seed, mining.block_size, mining.device)
    return rows, decision


def pairs_section(captions, source, *, threshold: float | None = None, top: int | None = DUPES_TOP,
                  skip_exact: bool = False, top_k: int = TOP_K, block_size: int | None = PAIR_BLOCK_SIZE,
                  device: str | None = None) -> "NearDuplicatePairs":
    """`capgeo dupes`: the ``top`` most similar caption pairs of different images at or above
    ``threshold`` (None: no floor), most similar first; ``top`` 0 or None lists every such pair
    (at most 1,000,000). ``skip_exact`` leaves exact copies out. Beside them, the exact total of
    near-duplicate pairs (cosine >= 0.95). ``source``: vectors, Embeddings or a PairScan."""
    return NearDuplicatePairs(dupes_section(
        captions, source, pairs=PairListOptions(threshold, top or None, skip_exact), examples=None,
        mining=MiningOptions(top_k=top_k, block_size=block_size, device=device)))


def examples_section(captions, source, *, quantiles: Sequence[float] = DEFAULT_QUANTILES,
                     per_quantile: int = DUPES_PER_QUANTILE,
                     neighbours: int = DUPES_NEIGHBOURS, top_k: int = TOP_K, block_size: int | None = PAIR_BLOCK_SIZE,
                     device: str | None = None) -> Dupes:
    """`capgeo dupes-examples`: ``per_quantile`` query captions at each quantile of the
    hardest-companion distribution, each with its ``neighbours`` nearest captions of other images."""
    return dupes_section(captions, source, pairs=None, examples=ExampleOptions(quantiles, per_quantile, neighbours),
                         mining=MiningOptions(top_k=top_k, block_size=block_size, device=device))


def sets_section(captions, source, *, threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD, keep: str | None = None,
                 seed: int = 0, top_k: int = TOP_K, block_size: int | None = PAIR_BLOCK_SIZE,
                 device: str | None = None) -> Dupes:
    """`capgeo dupes-sets`: near-duplicate sets (connected components of the pairs at or above
    ``threshold``), largest first; with ``keep`` (a policy of
    :data:`capgeo.defaults.KEEP_POLICIES`; ``seed`` for random) the captions that keeping one
    per set drops, and what that removes."""
    return dupes_section(captions, source, pairs=None, examples=None, sets=SetOptions(threshold, keep, seed),
                         mining=MiningOptions(top_k=top_k, block_size=block_size, device=device))


def gallery_section(captions, embeddings, *, pairs: int, quantiles: Sequence[float], scan=None,
                    near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD) -> Dupes:
    """The report's near-duplicate gallery: the ``pairs`` most similar pairs (as :func:`pairs_section`)
    and one example query at each of ``quantiles``, with its three nearest captions, from one scan
    (``scan``: the profile's, when its companions are exact); near-duplicates counted at the
    profile's ``near_duplicate_threshold``."""
    return dupes_section(captions, embeddings, pairs=PairListOptions(limit=pairs),
                         examples=ExampleOptions(quantiles, per_quantile=1, neighbours=3), scan=scan,
                         near_duplicate_threshold=near_duplicate_threshold)


def _grouped_examples(captions, examples: list[Example]) -> tuple[DupesExample, ...]:
    columns = texts, ids, groups = captions.texts, captions.ids, captions.groups
    return tuple(DupesExample(
        quantile=example.quantile, target_cosine=example.target_cosine,
        query=DupesQuery(index=example.index, id=ids[example.index], group=groups[example.index],
                         text=texts[example.index]),
        hardest_cosine=example.hardest_cosine,
        neighbours=tuple(pair_row(captions, example.index, j, c, neighbour_rank=rank, columns=columns)
                         for rank, (j, c) in enumerate(example.neighbours, start=1)),
    ) for example in examples)


def _of_section(name: str, doc: str):
    """A read-only attribute of a NearDuplicatePairs: its section's ``name``."""
    return property(lambda self: getattr(self.section, name), doc=doc)


def _of_totals(name: str, doc: str):
    """A read-only attribute of a NearDuplicatePairs: its near-duplicate totals' ``name``."""
    return property(lambda self: getattr(self.totals, name), doc=doc)


@dataclass(frozen=True)
class NearDuplicatePairs:
    """The most similar caption pairs of different images: what `capgeo dupes` prints and
    :func:`capgeo.near_duplicates` returns (docs/dupes.md). ``section`` is the typed
    ``capgeo.dupes/1`` object; the attributes read it as the Python API always has."""

    section: Dupes

    n_captions = _of_section("n_captions", "Captions in the dataset.")
    n_groups = _of_section("n_groups", "Images (groups) in the dataset.")
    threshold = _of_section("threshold", "The floor asked for (None: none).")
    top = _of_section("limit", "Pairs asked for (None: every pair at or above the floor).")
    n_exact_skipped = _of_section("n_exact_skipped", "Exact copies left out (skip_exact), else None.")
    near_duplicate_threshold = _of_totals("threshold", "The cosine at which two captions are near-duplicates.")
    n_near_duplicate_pairs = _of_totals("n_pairs", "All such pairs in the dataset (None: more than 1,000,000).")
    n_exact_duplicate_pairs = _of_totals("n_exact_duplicate_pairs", "Of those, exact copies.")

    @property
    def rows(self) -> tuple[DupesPair, ...]:
        """The pairs, typed, most similar first."""
        return self.section.pairs or ()

    @property
    def pairs(self) -> tuple[dict, ...]:
        """The pair rows as dicts, most similar first (fields in docs/dupes.md): copies, so changing one
        changes no result."""
        return tuple(row.to_dict() for row in self.rows)

    @property
    def totals(self) -> NearDuplicateTotals:
        """How many pairs of the dataset are near-duplicates, and how many of them exact copies."""
        return self.section.near_duplicates

    @property
    def encoder(self) -> Encoder | None:
        """The encoder the pairs were found under (``.spec``, ``.name``, ``.fingerprint`` ...)."""
        return self.section.encoder

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self.section.warnings or ())

    def to_dict(self) -> dict:
        """The `capgeo dupes --json` object (``capgeo.dupes/1``), a new one at each call."""
        return self.section.to_dict()

    def to_polars(self):
        """One row per pair, the columns of `capgeo dupes -o pairs.parquet`."""
        import polars as pl

        rows = self.pairs
        if not rows:
            return pl.DataFrame(schema={column: pl.String for column in PAIR_COLUMNS})
        return pl.DataFrame(list(rows), infer_schema_length=None)


#: the columns of each kind of row, so that a file with no rows still has its header
PAIR_COLUMNS = ("rank", "index_a", "index_b", "id_a", "id_b", "group_a", "group_b", "text_a", "text_b", "cosine",
                "jaccard", "exact_duplicate", "shared_words", "only_a_words", "only_b_words", "spans_a", "spans_b")
COMPONENT_COLUMNS = ("component", "size", "threshold", "n_groups", "n_edges", "weakest_link", "strongest_link",
                     "min_member_cosine", "indices", "ids", "groups", "texts")


def _dupes_of(result) -> Dupes:
    """The typed section of a dupes result (a NearDuplicatePairs holds one)."""
    return result.section if isinstance(result, NearDuplicatePairs) else result


def section_columns(section) -> tuple[str, ...]:
    """The columns of :func:`section_rows` for this section (examples always have rows)."""
    return COMPONENT_COLUMNS if _dupes_of(section).components is not None else PAIR_COLUMNS


def section_rows(section) -> list[dict]:
    """The rows a file gets: components if computed, else examples if chosen, else pairs."""
    dupes = _dupes_of(section)
    if dupes.components is not None:
        return dupes.to_dict()["components"]
    if dupes.examples is not None:
        return flat_example_rows(dupes)
    return [row.to_dict() for row in dupes.pairs or ()]


def flat_example_rows(section) -> list[dict]:
    """The examples of a dupes section as one row per (query, neighbour)."""
    rows = []
    for example in _dupes_of(section).examples or ():
        for neighbour in example.neighbours:
            rows.append({"quantile": example.quantile, "target_cosine": example.target_cosine,
                         "query_hardest_cosine": example.hardest_cosine, **neighbour.to_dict()})
    return rows


# --------------------------------------------------------------------------- files

ROW_FORMATS = ("jsonl", "csv", "parquet")


#: the first characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value):
    """A row value as a CSV cell: lists and span dicts become JSON text, so every cell is a plain
    string or number; a string a spreadsheet would run as a formula (a caption "=HYPERLINK(...)")
    gets a leading single quote, as OWASP recommends. Numbers stay numbers (-0.25 is a cosine)."""
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write_rows(rows: list[dict], fmt: str, output: str | None, stream=None, columns: Sequence[str] = (),
               parquet_schema: dict | None = None) -> None:
    """Write rows as jsonl, csv or parquet: atomically to ``output``, or to ``stream``.

    In csv, list columns (words, spans, component members) are JSON-encoded strings, and string
    cells that start like a formula are neutralised (``_csv_cell``); jsonl and parquet keep the
    values as they are, lists as lists (of structs for spans). With no rows, csv and
    parquet still get the header ``columns``. ``parquet_schema`` (column -> polars type)
    fixes parquet's column types, where inference would see a column of nulls as untyped.
    """
    import polars as pl

    from capgeo._atomic import atomic_open, atomic_path, write_all

    if fmt not in ROW_FORMATS:
        raise CapgeoError(f"format: expected one of {', '.join(ROW_FORMATS)}, got {fmt!r}")
    if fmt == "jsonl":
        text = "".join(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n" for row in rows)
    elif fmt == "csv":
        frame = (pl.DataFrame([{key: _csv_cell(value) for key, value in row.items()} for row in rows],
                              infer_schema_length=None)
                 if rows else pl.DataFrame(schema={column: pl.String for column in columns}))
        text = frame.write_csv()
    else:
        if parquet_schema is not None:
            frame = pl.DataFrame(rows, schema=parquet_schema)
        else:
            frame = (pl.DataFrame(rows, infer_schema_length=None) if rows
                     else pl.DataFrame(schema={column: pl.String for column in columns}))
        from capgeo._atomic import MARK_KEY, output_mark

        if output is None:  # the file's bytes, to a stream that a shell redirected or piped
            import io

            buffer = io.BytesIO()
            frame.write_parquet(buffer, metadata={MARK_KEY: output_mark()})
            write_all(stream, buffer.getvalue())
            return
        with atomic_path(output) as tmp:
            frame.write_parquet(tmp, metadata={MARK_KEY: output_mark()})
        return
    if output is None:
        # rows are data, UTF-8 as in a file, whatever the terminal's encoding: one that cannot hold a
        # caption would turn its characters into "?" (two ids into one) rather than fail; written in
        # full or failing (a disk that fills mid-write)
        write_all(stream, text.encode("utf-8"))
        return
    with atomic_open(output) as handle:
        handle.write(text)
