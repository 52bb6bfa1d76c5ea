"""A caption map: a 2-D projection of the caption embeddings, one point per caption.

:func:`map_section` projects the embeddings (above ``max_points`` captions, a seeded
random sample, stated in the section) with openTSNE on each caption's exact cosine neighbours
(:func:`knn_graph`, or :func:`knn_from_scan` from the pass that finds the hardest companions),
started from the first :data:`PCA_DIMENSIONS` principal components, and records, per point, what the page shows: the
caption's id, image (group) and text, its hardest-companion cosine (the colour), the
near-duplicate set it belongs to, and whether it leaks into an evaluation set
(``leaked_ids``, from `capgeo leak`). The section is JSON (``capgeo.profile/1``, ``map``),
so a report saved with ``--save-profile`` redraws its map without recomputing it.
:func:`map_figure` draws it as a WebGL scatter; :func:`map_page` is `capgeo map`'s page, with a
search box. Deterministic for a seed. Why openTSNE, and the measurements: docs/report.md.

openTSNE is an optional extra (``pip install -e '.[map]'``): :func:`require_projection`
raises :class:`MapUnavailable` (a CapgeoError naming the extra) without it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from capgeo.defaults import MAP_THUMBNAIL_CHARS, MAP_THUMBNAILS, NEAR_DUPLICATE_THRESHOLD, REPORT_PAGE_BYTES, TOP_K
from capgeo.errors import CapgeoError
from capgeo.geometry.typed_profile import CaptionMap

if TYPE_CHECKING:
    from capgeo.geometry.typed_profile import Leak

#: `capgeo map` projects at most this many captions; above it, a seeded random sample of this many.
DEFAULT_MAX_POINTS = 100_000
#: the report's map holds at most this many points, so the page stays under 2 MB
REPORT_MAX_POINTS = 2_000
#: characters of each caption the map carries (hover text and search); longer captions end in "…"
TEXT_CHARS = 300
#: principal components of the embeddings that start the layout (openTSNE's PCA initialisation)
PCA_DIMENSIONS = 2
#: openTSNE's perplexity (its default); smaller datasets get a smaller one. Each point's neighbour graph
#: holds 3 x perplexity captions, openTSNE's rule
PERPLEXITY = 30.0
#: above this many points openTSNE approximates the gradient by FFT interpolation (Barnes-Hut below)
FFT_ABOVE = 10_000
#: above this many points the map takes a third of the neighbours, under half the iterations and a
#: coarser FFT interpolation: at 100,000 captions on 2 cores the pass's top-k lists and the iterations
#: make most of the time, and the later iterations cost the most (the FFT grid grows with the layout).
#: At 10,000 points 100 + 250 iterations keep 95% of the 10-NN preservation of 250 + 500; at 100,000
#: perplexity 10 with 2 interpolation points preserves more than perplexity 15 with 3 in about 75% of
#: its CPU time (measured in docs/report.md)
LARGE_ABOVE = 20_000
LARGE_PERPLEXITY = 10.0
#: exaggerated iterations, then normal ones (openTSNE's defaults: 250, then 500)
LARGE_ITERATIONS = (100, 250)
#: interpolation points per FFT grid interval (openTSNE's default: 3); each point's share of the
#: negative gradient costs their square
LARGE_INTERPOLATION_POINTS = 2
#: companions per caption the pass keeps for the near-duplicate sets, as every command's pass (rows with
#: more at the threshold are searched again by capgeo.findings.duplicates)
NEAR_DUPLICATE_TOP_K = TOP_K
#: element id of the map's figure on a page
MAP_FIGURE_ID = "fig-map"
#: what to install for the map, in the one line that says it is missing
INSTALL_HINT = "pip install -e '.[map]' (or: pip install openTSNE)"


@dataclass(frozen=True)
class MapOptions:
    """How a caption map is made (`capgeo map`, the report's map section): one object, its fields'
    defaults the only defaults of these options."""

    #: the projection's seed, and the sample's above ``max_points``
    seed: int = 0
    #: captions projected at most; above it, a seeded random sample of this many
    max_points: int = DEFAULT_MAX_POINTS
    #: the cosine at which two captions of different images are near-duplicates (and `capgeo map --leak`'s twins)
    near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD
    #: the images' thumbnails for the hover (capgeo.images.ImageVectors.thumbnail: code -> JPEG bytes or
    #: None), or None: no thumbnails
    thumbnail: Any = field(default=None, compare=False)

    @classmethod
    def of(cls, options: "MapOptions | None" = None, **fields) -> "MapOptions":
        """``options`` (default: MapOptions()) with ``fields`` in place of its own."""
        from capgeo.arguments import with_fields

        return with_fields(cls, options, cls.__name__, fields)


@dataclass(frozen=True)
class MapPoints:
    """What each point shows beside its caption (:func:`map_section`)."""

    #: each caption's hardest-companion cosine (NaN without one); None: not shown
    hardest: np.ndarray | None = None
    #: near-duplicate sets (capgeo.findings.duplicates.Component, members as caption rows)
    components: Sequence | None = None
    #: training caption ids with an evaluation twin
    leaked_ids: Sequence[str] = ()


class MapUnavailable(CapgeoError):
    """The projection library (openTSNE) is not installed."""


def require_projection() -> None:
    """Raise MapUnavailable, naming the extra to install, when openTSNE is missing."""
    try:
        import openTSNE  # noqa: F401
    except ImportError as error:
        raise MapUnavailable(f"the caption map needs openTSNE, which is not installed: {INSTALL_HINT}") from error


def sample_rows(n: int, max_points: int, seed: int) -> np.ndarray:
    """Rows of the captions the map shows: all of them, or a sorted seeded random sample of ``max_points``."""
    if max_points < 1:
        raise CapgeoError(f"--max-points: expected 1 or more captions, got {max_points}")
    if n <= max_points:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_points, replace=False))


def perplexity_for(n: int) -> float:
    """openTSNE's perplexity for a map of ``n`` points."""
    return min(PERPLEXITY if n <= LARGE_ABOVE else LARGE_PERPLEXITY, (n - 1) / 3.0)


def neighbour_count(n: int) -> int:
    """Neighbours per point of the map's graph for ``n`` points: 3 x the perplexity, at most n - 1."""
    return max(1, min(n - 1, int(3 * perplexity_for(n))))


def knn_graph(vectors, k: int, *, device: str | None = None, progress: bool | None = None):
    """Each caption's ``k`` most similar other captions, images ignored: (index, cosine) arrays (n, k),
    cosine descending, ties by lower index. Exact: the pairwise pass with one group per caption."""
    from capgeo.geometry.pairwise import scan_pairs

    vectors = np.asarray(vectors, dtype=np.float32)
    scan = scan_pairs(vectors, np.arange(vectors.shape[0]), top_k=k, histograms=False, device=device,
                      progress=progress)
    return np.asarray(scan.companion_index, dtype=np.int64), np.asarray(scan.companion_cosine, dtype=np.float32)


def knn_from_scan(scan, group_codes, vectors, k: int):
    """:func:`knn_graph` from a pass that already ran: its hardest companions (other images, top ``k``
    or more) merged with each caption's own image's captions, so no second pass is needed. Exact:
    a caption's k most similar captions are among its k most similar of other images and those
    of its own image."""
    if scan.top_k < k:
        raise CapgeoError(f"the map's neighbour graph needs the pass's top {k} companions, it kept {scan.top_k}")
    vectors = np.asarray(vectors, dtype=np.float32)
    other_index = np.asarray(scan.companion_index[:, :k], dtype=np.int64)
    other_cosine = np.where(other_index >= 0, np.asarray(scan.companion_cosine[:, :k], dtype=np.float32),
                            np.float32(-np.inf))
    same_index, same_cosine = _same_group_neighbours(vectors, np.asarray(group_codes), k)
    index = np.concatenate([other_index, same_index], axis=1)
    cosine = np.concatenate([other_cosine, same_cosine], axis=1)
    order = np.lexsort((index, -cosine), axis=1)[:, :k]
    return np.take_along_axis(index, order, axis=1), np.take_along_axis(cosine, order, axis=1)


#: cosines held at once while the captions of one image are compared with each other
_SAME_GROUP_CELLS = 1 << 24


def _same_group_neighbours(vectors: np.ndarray, codes: np.ndarray, k: int):
    """Each caption's most similar other captions of its own image, at most ``k``: (n, w) index and
    cosine arrays, padded with -1 and -inf, w = min(k, largest image's captions - 1)."""
    n = vectors.shape[0]
    _, inverse, sizes = np.unique(codes, return_inverse=True, return_counts=True)
    width = int(min(k, sizes.max() - 1))
    index = np.full((n, max(width, 0)), -1, dtype=np.int64)
    cosine = np.full((n, max(width, 0)), -np.inf, dtype=np.float32)
    if width < 1:
        return index, cosine
    members_of = np.argsort(inverse, kind="stable")   # captions grouped by image, in index order
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for size in np.unique(sizes[sizes > 1]).tolist():
        groups = np.flatnonzero(sizes == size)
        members = members_of[starts[groups][:, None] + np.arange(size)]   # (groups, size) caption rows
        keep = min(width, size - 1)
        # a group larger than _SAME_GROUP_CELLS allows is compared in slices of its rows
        row_step = max(1, min(size, _SAME_GROUP_CELLS // size))
        group_step = max(1, _SAME_GROUP_CELLS // (size * size))
        for first in range(0, groups.size, group_step):
            chunk = members[first:first + group_step]
            block = vectors[chunk]                                                  # (g, size, d)
            for row in range(0, size, row_step):
                rows = chunk[:, row:row + row_step]                                 # (g, r)
                similarity = np.matmul(block[:, row:row + row_step], block.transpose(0, 2, 1))  # (g, r, size)
                local = np.arange(rows.shape[1])
                similarity[:, local, row + local] = -np.inf                         # no caption is its own neighbour
                candidates = np.broadcast_to(chunk[:, None, :], similarity.shape)
                if keep < size - 1:
                    top = np.argpartition(-similarity, keep - 1, axis=2)[:, :, :keep]
                    similarity = np.take_along_axis(similarity, top, axis=2)
                    candidates = np.take_along_axis(candidates, top, axis=2)
                order = np.lexsort((candidates, -similarity), axis=2)[:, :, :keep]
                flat = rows.ravel()
                index[flat, :keep] = np.take_along_axis(candidates, order, axis=2).reshape(flat.size, keep)
                cosine[flat, :keep] = np.take_along_axis(similarity, order, axis=2).reshape(flat.size, keep)
    return index, cosine


def project(vectors: np.ndarray, *, seed: int = 0, n_jobs: int | None = None, neighbours=None,
            device: str | None = None, progress: bool | None = None) -> np.ndarray:
    """(n, 2) float32 map coordinates of (n, d) unit embeddings: openTSNE on the exact cosine neighbour
    graph (``neighbours``: :func:`knn_graph`'s (index, cosine) of these vectors with
    :func:`neighbour_count` columns, computed here when None), started from the first two principal
    components; deterministic for ``seed``."""
    require_projection()
    import openTSNE
    from openTSNE.affinity import PerplexityBasedNN
    from openTSNE.initialization import rescale
    from openTSNE.nearest_neighbors import PrecomputedNeighbors

    vectors = np.asarray(vectors, dtype=np.float32)
    n = vectors.shape[0]
    if n < 2:
        return np.zeros((n, 2), dtype=np.float32)
    centred = vectors.astype(np.float64) - vectors.astype(np.float64).mean(axis=0)
    dimensions = min(PCA_DIMENSIONS, n - 1, vectors.shape[1])
    reduced = _principal_components(centred, dimensions)
    if dimensions < 2:
        reduced = np.column_stack([reduced[:, 0], np.zeros(n, dtype=np.float32)])
    if n < 8:  # too few points for t-SNE's neighbourhoods: the first two principal components
        return np.ascontiguousarray(reduced[:, :2], dtype=np.float32)
    k = neighbour_count(n)
    index, cosine = knn_graph(vectors, k, device=device, progress=progress) if neighbours is None else neighbours
    if index.shape != (n, k) or (index < 0).any():
        raise CapgeoError(f"the map's neighbour graph must hold {k} neighbours of each of the {n} points")
    # openTSNE's Gaussian kernels take euclidean distances, which for unit vectors follow from the cosine
    distances = np.sqrt(np.maximum(0.0, 2.0 - 2.0 * np.asarray(cosine, dtype=np.float64)))
    jobs = n_jobs or _threads()
    affinities = PerplexityBasedNN(knn_index=PrecomputedNeighbors(index, distances), perplexity=perplexity_for(n),
                                   n_jobs=jobs)
    settings = {} if n <= LARGE_ABOVE else dict(zip(("early_exaggeration_iter", "n_iter"), LARGE_ITERATIONS),
                                                 n_interpolation_points=LARGE_INTERPOLATION_POINTS)
    # Barnes-Hut up to FFT_ABOVE points (openTSNE's advice: FFT's fixed interpolation grid costs more there)
    embedding = openTSNE.TSNE(n_jobs=jobs, random_state=seed, verbose=False,
                              negative_gradient_method="fft" if n > FFT_ABOVE else "bh", **settings)
    start = reduced[:, :2].astype(np.float64)
    if not start[:, 0].std() > 0:   # identical embeddings: openTSNE's rescaling would divide by zero
        start = np.random.default_rng(seed).normal(size=(n, 2))
    layout = embedding.fit(affinities=affinities, initialization=rescale(start))
    return np.asarray(layout, dtype=np.float32)


def _principal_components(centred: np.ndarray, dimensions: int) -> np.ndarray:
    """The first ``dimensions`` principal-component scores, from the eigenvectors of the d x d covariance
    (float64; exact and fast for n >> d), each sign fixed so its largest loading is positive."""
    covariance = centred.T @ centred
    values, vectors = np.linalg.eigh(covariance)
    top = vectors[:, np.argsort(-values)[:dimensions]]
    signs = np.sign(top[np.argmax(np.abs(top), axis=0), np.arange(top.shape[1])])
    signs[signs == 0] = 1
    return (centred @ (top * signs)).astype(np.float32)


def _threads() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _short(text: str, chars: int = TEXT_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= chars else text[:chars - 1].rstrip() + "…"


#: thumbnails made at a time (a shard's images are read together)
THUMBNAIL_CHUNK = 64


def map_thumbnails(thumbnail, codes: np.ndarray, names: Sequence[str], order: np.ndarray) -> dict[str, str]:
    """The hover thumbnails of a map: base64 JPEGs of the points' images (``codes``: each point's group
    code; ``names``: the group ids by code), served in the points' ``order``, at most
    MAP_THUMBNAILS images and MAP_THUMBNAIL_CHARS characters in all; an image without one is passed
    over. ``thumbnail``: capgeo.images.ImageVectors.thumbnail (code -> JPEG bytes or None; its
    ``many`` makes several at once)."""
    import base64

    wanted = list(dict.fromkeys(np.asarray(codes)[order].tolist()))
    many = getattr(thumbnail, "many", None) or (lambda chunk: {code: thumbnail(code) for code in chunk})
    out: dict[str, str] = {}
    total = 0
    for start in range(0, len(wanted), THUMBNAIL_CHUNK):
        made = many(wanted[start:start + THUMBNAIL_CHUNK])
        for code in wanted[start:start + THUMBNAIL_CHUNK]:
            if not made.get(code):
                continue
            text = base64.b64encode(made[code]).decode("ascii")
            if total + len(text) > MAP_THUMBNAIL_CHARS or len(out) == MAP_THUMBNAILS:
                return out
            out[str(names[code])] = text
            total += len(text)
    return out


def map_section(captions, vectors, options: MapOptions | None = None, *, points: MapPoints | None = None,
                neighbours=None, device: str | None = None, progress: bool | None = None, **fields) -> CaptionMap:
    """The ``map`` section (typed): the projection of ``vectors`` (one per caption of ``captions``) and what each
    point shows (``points``: :class:`MapPoints`). ``options``: :class:`MapOptions` (``fields``: its
    fields in place of its own); ``neighbours``: the sampled points' neighbour graph
    (:func:`project`), found here when None; the options' ``thumbnail``: the images' thumbnails,
    for the hover (:func:`map_thumbnails`: the points in a near-duplicate set or leaking first,
    then the highest hardest-companion cosine). Raises MapUnavailable without openTSNE."""
    options = MapOptions.of(options, **fields)
    points = points or MapPoints()
    seed, max_points, thumbnail = options.seed, options.max_points, options.thumbnail
    near_duplicate_threshold = options.near_duplicate_threshold
    hardest, components, leaked_ids = points.hardest, points.components, points.leaked_ids
    require_projection()
    from capgeo.progress import progress_bar

    vectors = np.asarray(vectors, dtype=np.float32)
    n = len(captions)
    if vectors.shape[0] != n:
        raise CapgeoError(f"the map needs one vector per caption: {vectors.shape[0]} vectors for {n} captions")
    rows = sample_rows(n, max_points, seed)
    started = time.perf_counter()
    if neighbours is None and rows.size >= 8:
        neighbours = knn_graph(vectors[rows], neighbour_count(rows.size), device=device, progress=progress)
    with progress_bar(f"Projecting {rows.size:,} captions (openTSNE)", None, enabled=progress):
        coordinates = project(vectors[rows], seed=seed, neighbours=neighbours, device=device)
    seconds = time.perf_counter() - started
    set_of = np.full(n, -1, dtype=np.int64)
    for number, component in enumerate(components or (), start=1):
        set_of[list(component.members)] = number
    leaked = set(leaked_ids)
    ids, groups, texts = captions.ids, captions.groups, captions.texts
    images = {}
    if thumbnail is not None:
        codes = np.asarray(captions.group_codes)[rows]
        flagged = set_of[rows] > 0
        if leaked:
            flagged |= np.fromiter((str(ids[row]) in leaked for row in rows), dtype=bool, count=rows.size)
        crowded = np.full(rows.size, -np.inf) if hardest is None else np.asarray(hardest, dtype=np.float64)[rows]
        crowded = np.where(np.isnan(crowded), -np.inf, crowded)
        images = {"thumbnails": map_thumbnails(thumbnail, codes, captions.group_names,
                                               np.lexsort((rows, -crowded, ~flagged))),
                  "n_mapped_images": int(np.unique(codes).size)}
    return CaptionMap.from_dict({
        "method": "openTSNE",
        "pca_dimensions": int(min(PCA_DIMENSIONS, max(1, rows.size - 1), vectors.shape[1])),
        "neighbours": int(neighbour_count(rows.size)) if rows.size >= 8 else 0,
        "seed": int(seed),
        "n_captions": int(n),
        "n_points": int(rows.size),
        "sampled": bool(rows.size < n),
        "seconds": round(seconds, 3),
        "near_duplicate_threshold": float(near_duplicate_threshold),
        "text_chars": TEXT_CHARS,
        "x": [round(float(value), 4) for value in coordinates[:, 0]],
        "y": [round(float(value), 4) for value in coordinates[:, 1]],
        "caption_ids": [str(ids[row]) for row in rows],
        "groups": [str(groups[row]) for row in rows],
        "texts": [_short(texts[row]) for row in rows],
        "hardest_companion": None if hardest is None else
        [None if not np.isfinite(hardest[row]) else round(float(hardest[row]), 4) for row in rows],
        "near_duplicate_set": [int(set_of[row]) if set_of[row] > 0 else None for row in rows],
        "leaked": [str(ids[row]) in leaked for row in rows] if leaked else None,
        **images,
    })


def sample_note(section) -> str:
    """What the map shows: every caption, or a stated random sample."""
    if section.sampled:
        return f"A random sample of {section.n_points:,} of the {section.n_captions:,} captions (seed {section.seed})."
    return f"All {section.n_captions:,} captions."


def map_figure(section, title: str = "Caption map") -> "go.Figure":  # noqa: F821
    """WebGL scatter of a ``map`` section: colour the hardest-companion cosine; near-duplicate sets and
    leaked captions as marked overlays; hover shows id, image, cosine and caption text."""
    import plotly.graph_objects as go

    from capgeo.report.figures import _LAYOUT, plotly_text

    x = np.asarray(section.x, dtype=np.float32)
    y = np.asarray(section.y, dtype=np.float32)
    hardest = section.hardest_companion
    colour = None if hardest is None else np.array([np.nan if v is None else v for v in hardest], dtype=np.float32)
    from capgeo.display import short_id

    hover = [f"<b>{plotly_text(short_id(i))}</b> · image {plotly_text(short_id(g))}"
             + ("" if colour is None or not np.isfinite(colour[k]) else f" · hardest companion {colour[k]:.3f}")
             + "<br>" + _wrapped(plotly_text(t))
             for k, (i, g, t) in enumerate(zip(section.caption_ids, section.groups, section.texts))]
    marker = dict(size=4 if x.size > 20_000 else 6, opacity=0.8)
    if colour is not None:
        marker.update(color=colour, colorscale="Viridis", showscale=True,
                      colorbar=dict(title=dict(text="hardest<br>companion<br>cosine")))
    # each point's thumbnail, as its place in the page's list of them (-1: none); HOVER_THUMBNAIL_SCRIPT shows it
    slot = {name: place for place, name in enumerate(section.thumbnails or ())}
    custom = np.array([slot.get(group, -1) for group in section.groups], dtype=np.int32) if slot else None
    figure = go.Figure(go.Scattergl(x=x, y=y, mode="markers", name="captions", marker=marker, text=hover,
                                    customdata=custom, hovertemplate="%{text}<extra></extra>", showlegend=False))
    overlays = []
    sets = section.near_duplicate_set
    # a section without its threshold was drawn at every command's
    threshold = section.near_duplicate_threshold
    threshold = NEAR_DUPLICATE_THRESHOLD if threshold is None else threshold
    if sets and any(s is not None for s in sets):
        overlays.append(([k for k, s in enumerate(sets) if s is not None],
                         f"in a near-duplicate set (cosine >= {threshold:g})",
                         dict(symbol="circle-open", size=11, color="#d62728", line=dict(width=2))))
    leaked = section.leaked
    if leaked and any(leaked):
        overlays.append(([k for k, flag in enumerate(leaked) if flag], "leaks into an evaluation set",
                         dict(symbol="x", size=10, color="#000000")))
    for points, name, style in overlays:
        figure.add_trace(go.Scattergl(x=x[points], y=y[points], mode="markers", name=f"{name}: {len(points):,}",
                                      marker=style, text=[hover[k] for k in points],
                                      customdata=None if custom is None else custom[points],
                                      hovertemplate="%{text}<extra></extra>"))
    # the search box's matches (capgeo map's page fills this trace)
    figure.add_trace(go.Scattergl(x=[], y=[], mode="markers", name="search matches",
                                  marker=dict(symbol="diamond", size=12, color="#ff7f0e",
                                              line=dict(width=1, color="#000000")),
                                  text=[], hovertemplate="%{text}<extra></extra>"))
    layout = dict(_LAYOUT, height=640)
    figure.update_layout(title=f"{title}: {sample_note(section)}", legend=dict(orientation="h", y=-0.08),
                         hovermode="closest", **layout)
    figure.update_xaxes(showticklabels=False, title_text="t-SNE 1", zeroline=False)
    figure.update_yaxes(showticklabels=False, title_text="t-SNE 2", zeroline=False, scaleanchor="x")
    return figure


def _wrapped(text: str, width: int = 80) -> str:
    """Hover text broken into lines of about ``width`` characters (plotly does not wrap it)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "<br>".join(lines)


def dataset_map(captions, vectors, options: MapOptions | None = None, *, scan=None, leak: Leak | None = None,
                device: str | None = None, progress: bool | None = None, **fields) -> CaptionMap:
    """:func:`map_section` with what it shows computed here: each caption's hardest companion and the
    near-duplicate sets from ``scan`` (the exact pairwise pass, run here when None or too short), the
    leaked training captions from ``leak`` (a `capgeo leak` result: its ``train_ids_to_drop``), and
    the options' ``thumbnail`` (the images' thumbnails, for the hover) as given. When
    every caption is mapped, that one pass also gives the projection's neighbour graph
    (:func:`knn_from_scan`); a sample gets a pass of its own (:func:`knn_graph`)."""
    require_projection()
    from capgeo.findings.duplicates import near_duplicate_components

    options = MapOptions.of(options, **fields)
    vectors = np.asarray(vectors, dtype=np.float32)
    n = len(captions)
    points = int(min(n, options.max_points))
    # every caption is mapped: the pass's top-k lists, long enough, give the neighbour graph too
    whole = points == n and points >= 8
    top_k = max(NEAR_DUPLICATE_TOP_K, neighbour_count(points) if whole else 0)
    if scan is None or scan.companion_mode != "exact" or scan.top_k < (top_k if whole else 1):
        from capgeo.geometry.pairwise import scan_pairs

        # only what the map shows: no histograms
        scan = scan_pairs(vectors, np.asarray(captions.group_codes), top_k=top_k, histograms=False, device=device,
                          progress=progress)
    hardest = np.asarray(scan.companion_cosine[:, 0], dtype=np.float64)
    components = near_duplicate_components(captions, vectors, options.near_duplicate_threshold, scan=scan,
                                           device=device)
    neighbours = knn_from_scan(scan, captions.group_codes, vectors, neighbour_count(n)) if whole else None
    leaked = (leak.train_ids_to_drop if leak is not None else None) or ()
    return map_section(captions, vectors, options, points=MapPoints(hardest, components, leaked),
                       neighbours=neighbours, device=device, progress=progress)


#: the search box: finds captions whose id, image or text holds what is typed, and marks them on the map
SEARCH_SCRIPT = """
(function () {
  var box = document.getElementById('map-search'), count = document.getElementById('map-search-count');
  var list = document.getElementById('map-search-results');
  var plain = null;
  function unmarked(text) {
    return text.replace(/<br>/g, ' ').replace(/<[^>]+>/g, '').replace(/&lt;/g, '<').replace(/&gt;/g, '>')
      .replace(/&#37;/g, '%').replace(/&amp;/g, '&').toLowerCase();
  }
  box.addEventListener('input', function () {
    var plot = document.getElementById('MAP_FIGURE_ID');
    if (!plot || !plot.data) return;
    var points = plot.data[0], matches = plot.data.length - 1;
    if (plain === null) plain = points.text.map(unmarked);
    var query = box.value.trim().toLowerCase(), found = [];
    if (query) for (var i = 0; i < plain.length; i++) if (plain[i].indexOf(query) !== -1) found.push(i);
    Plotly.restyle(plot, {x: [found.map(function (i) { return points.x[i]; })],
                          y: [found.map(function (i) { return points.y[i]; })],
                          text: [found.map(function (i) { return points.text[i]; })]}, [matches]);
    count.textContent = query ? found.length.toLocaleString() + ' caption(s) match' : '';
    list.innerHTML = '';
    found.slice(0, 20).forEach(function (i) {
      var item = document.createElement('li');
      item.textContent = plain[i].slice(0, 240);
      list.appendChild(item);
    });
  });
})();
""".replace("MAP_FIGURE_ID", MAP_FIGURE_ID)


#: element id of the page's list of the map's thumbnails (base64 JPEGs, in the points' customdata order)
THUMBNAILS_ID = "map-thumbnails"

#: run once the map is drawn: the hovered point's image, beside the pointer (plotly's hover labels hold text only)
HOVER_THUMBNAIL_SCRIPT = """
var plot = document.getElementById('{plot_id}'), store = document.getElementById('THUMBNAILS_ID');
if (plot && store && plot.on) {
  var thumbs = JSON.parse(store.textContent), tip = document.createElement('img');
  tip.className = 'map-thumbnail';
  tip.alt = '';
  tip.style.cssText = 'position:fixed;display:none;pointer-events:none;z-index:20;width:96px;height:auto;'
    + 'border:1px solid #888;background:#fff;box-shadow:0 1px 4px rgba(0,0,0,.3)';
  document.body.appendChild(tip);
  plot.on('plotly_hover', function (event) {
    var point = event.points && event.points[0], slot = point ? point.customdata : -1;
    if (slot == null || slot < 0 || !thumbs[slot]) { tip.style.display = 'none'; return; }
    var pointer = event.event || {};
    tip.src = 'data:image/jpeg;base64,' + thumbs[slot];
    tip.style.left = ((pointer.clientX || 0) + 18) + 'px';
    tip.style.top = ((pointer.clientY || 0) + 18) + 'px';
    tip.style.display = 'block';
  });
  plot.on('plotly_unhover', function () { tip.style.display = 'none'; });
}
""".replace("THUMBNAILS_ID", THUMBNAILS_ID)


def thumbnail_note(section) -> str:
    """How many of the map's images show a thumbnail on hover, and why not all ('' without thumbnails)."""
    if section.thumbnails is None:
        return ""
    count, images = len(section.thumbnails), section.n_mapped_images or 0
    if not count:
        return (f"No thumbnails on hover: no mapped image could be read, or the page had no room for one under "
                f"{REPORT_PAGE_BYTES / 1e6:g} MB.")
    if count >= images:
        return f"Hover a point for its image's thumbnail ({count:,} images)."
    return (f"Hover a point for its image's thumbnail: {count:,} of the {images:,} mapped images carry one (a map "
            f"holds at most {MAP_THUMBNAILS:,}, {MAP_THUMBNAIL_CHARS / 1e6:.1f} MB in all, and a report page what "
            f"keeps it under {REPORT_PAGE_BYTES / 1e6:g} MB; points in near-duplicate sets or leaking first, then "
            "those with the closest hardest companion).")


def fewer_thumbnails(section, chars: int):
    """``section`` (typed) with its least telling hover thumbnails (the last served) dropped, at least
    ``chars`` characters of the page's: what a report page over REPORT_PAGE_BYTES gives up first."""
    import types
    from dataclasses import replace

    kept = dict(section.thumbnails or {})
    dropped = 0
    for name in reversed(list(kept)):
        if dropped >= chars:
            break
        dropped += len(kept.pop(name)) + len('"",')   # its base64 and its place in the page's JSON list
    return replace(section, thumbnails=types.MappingProxyType(kept))


def map_body(section, title: str = "Caption map") -> str:
    """The map's figure, its search box and the line saying what it shows, as page HTML."""
    import json

    from capgeo.report.html import escape, figure_div

    legend = ("Colour: each caption's hardest-companion cosine (its most similar caption of another image); "
              "red rings: captions in a near-duplicate set")
    if section.leaked is not None:
        legend += "; black crosses: training captions with an evaluation twin (--leak)"
    thumbnails = ""
    if section.thumbnails:
        # base64 and JSON punctuation only: nothing in it can end the element early
        thumbnails = (f'<script type="application/json" id="{THUMBNAILS_ID}">'
                      f'{json.dumps(list(section.thumbnails.values()))}</script>')
    note = thumbnail_note(section)
    return (thumbnails + figure_div(map_figure(section, title), MAP_FIGURE_ID,
                                    post_script=HOVER_THUMBNAIL_SCRIPT if section.thumbnails else None)
            + '<div class="map-search"><label>Find a caption: <input id="map-search" type="search" '
              'placeholder="words, an id or an image" size="40"></label> <span id="map-search-count"></span>'
              '<ol id="map-search-results" class="stats"></ol></div>'
            + f'<p class="takeaway">{escape(legend)}. {escape(sample_note(section))} Projection: '
              f'{escape(section.method)} {_projection_words(section)}, seed '
              f'{section.seed}; hover text and search hold the first {section.text_chars} characters '
              "of each caption." + (f" {escape(note)}" if note else "") + "</p>")


def _projection_words(section) -> str:
    """How the section's layout was found; a profile saved before the neighbour graph has none."""
    if section.neighbours:
        return (f"on each caption's {section.neighbours} most similar captions (exact cosines), started from the "
                f"first {section.pca_dimensions} principal components")
    return f"after PCA to {section.pca_dimensions} dimensions"


def map_page(section, *, title: str, subtitle: str, provenance: Sequence[tuple[str, str]] = ()) -> str:
    """`capgeo map`'s self-contained page: the map, its search box and provenance."""
    from capgeo.report.html import Page, Section, plotly_javascript, table

    page = Page(title, subtitle)
    page.sections.append(Section("map", "Caption map", map_body(section),
                                 "A 2-D projection of the caption embeddings: nearby points are captions the encoder "
                                 "places close together. Hover a point for its caption; drag to zoom."))
    if provenance:
        page.sections.append(Section("provenance", "Provenance", table(provenance)))
    page.scripts.append(SEARCH_SCRIPT)
    return page.render(plotly_javascript())


def write_map(captions, output, options: MapOptions | None = None, *, encode=None, leak: Sequence = (),
              command: str | None = None, progress: bool | None = None, force: bool = False):
    """All of `capgeo map`: embed ``captions`` (a CaptionSet) under ``encode`` (a
    capgeo.pipeline.EncodeOptions; default: the embedded encoder), find the leaks into ``leak``
    (evaluation sets, paths or CaptionSets; twins at the options' near-duplicate threshold), map
    them (``options``: :class:`MapOptions`) and write the page atomically to ``output``, each point
    showing its image's thumbnail on hover where the dataset names its images
    (capgeo.images.image_thumbnails; no encoder needed). Returns its Path.
    ``output`` may not be the dataset or an evaluation set, nor, unless ``force``, an existing file
    capgeo did not write (:func:`capgeo.paths.check_outputs`)."""
    from pathlib import Path

    from capgeo import __version__
    from capgeo._atomic import atomic_open
    from capgeo.paths import check_outputs
    from capgeo.pipeline import EncodeOptions, embed_captions, leak_datasets
    from capgeo.report.html import escape

    options = options or MapOptions()
    encode = encode or EncodeOptions()
    require_projection()
    check_outputs({"DATA": getattr(captions, "source", None),
                   "--leak": [str(entry) for entry in leak if isinstance(entry, (str, Path))]},
                  {"output": output}, force=force)
    sample_rows(len(captions), options.max_points, options.seed)   # a bad --max-points before the encoding
    embeddings = embed_captions(captions, encode, progress=progress)
    leak_result = None
    if leak:
        leak_result = leak_datasets(captions, list(leak), encode, progress=progress, train_embeddings=embeddings,
                                    threshold=options.near_duplicate_threshold)
    from capgeo.images import image_thumbnails

    section = dataset_map(captions, embeddings.vectors, replace(options, thumbnail=image_thumbnails(captions)),
                          leak=leak_result, device=encode.device, progress=progress)
    info = getattr(embeddings, "info", None)
    encoder_name = getattr(info, "name", None) or getattr(info, "spec", None) or "default"
    rows = [("Made with", f"capgeo {escape(__version__)}"),
            ("Command to reproduce", f'<pre class="command">{escape(command or "(built from the library)")}</pre>'),
            ("Data file", escape(str(captions.source))), ("Encoder", escape(encoder_name)),
            ("Projection", escape(section.method))]
    if leak_result is not None:
        rows.append(("Evaluation sets (--leak)", escape(", ".join(entry.source for entry in leak_result.evals))))
    page = map_page(section, title=f"capgeo map: {Path(str(captions.source)).name}",
                    subtitle=f"{len(captions):,} captions of {captions.n_groups:,} images · encoder {encoder_name}",
                    provenance=rows)
    with atomic_open(output) as handle:
        handle.write(page)
    return Path(output)
