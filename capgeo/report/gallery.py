"""The near-duplicate gallery: queries with their nearest other captions, shared words marked.

Reads a ``dupes`` section (docs/dupes.md, built by
``capgeo.findings.duplicates.dupes_section``): ``examples`` (a query at a
quantile of the hardest-companion distribution with its nearest captions of
other images) and ``pairs`` (the most similar pairs overall). Each pair row
carries ``text_a``/``text_b`` and character spans ``spans_a``/``spans_b`` of
shared and differing content words; they are rendered by
:func:`capgeo.report.html.highlight`, which escapes each piece separately.

The section is read typed (``Profile.dupes``: capgeo.geometry.typed_profile's Dupes, its
pairs DupesPair, its examples DupesExample).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from capgeo.display import short_id
from capgeo.geometry.typed_profile import Dupes, DupesExample, DupesPair
from capgeo.report.html import CaptionIds, caption_html, escape

#: At most this many example queries and top pairs are shown (the JSON holds them all).
MAX_EXAMPLES = 6
MAX_PAIRS = 8


def _box(label: str, caption_id, group, text: str, spans, ids: CaptionIds) -> str:
    meta = (f"{escape(label)} · id <span title=\"{escape(caption_id)}\">{escape(short_id(caption_id))}</span> · image "
            f"<span title=\"{escape(group)}\">{escape(short_id(group))}</span>")
    return f'<div class="caption-box"><div class="meta">{meta}</div>{caption_html(text, spans, ids)}</div>'


def pair_stats(cosine: float, jaccard: float | None, exact_duplicate: bool | None) -> str:
    """The line above a pair of captions: their cosine, word overlap, and whether they are exact copies."""
    badge = ' <span class="badge">exact duplicate</span>' if exact_duplicate else ""
    lexical = f" · word overlap (Jaccard) {jaccard:.2f}" if jaccard is not None else ""
    return f'<div class="stats">cosine <strong>{cosine:.4f}</strong>{lexical}{badge}</div>'


def _pair_stats(row: DupesPair) -> str:
    return pair_stats(row.cosine, row.jaccard, row.exact_duplicate)


def _text(value) -> str:
    """A caption's text, empty when the row has none."""
    return "" if value is None else value


def _pair_html(row: DupesPair, ids: CaptionIds, label_a: str, label_b: str) -> str:
    return (_pair_stats(row) + '<div class="pair">'
            + _box(label_a, row.id_a, row.group_a, _text(row.text_a), row.spans_a, ids)
            + _box(label_b, row.id_b, row.group_b, _text(row.text_b), row.spans_b, ids)
            + "</div>")


#: the legend of marked words in a pair of captions (the leak section's, and the start of the gallery's)
PAIR_LEGEND = ('<p class="legend stats"><mark class="shared">shared word</mark>'
               '<mark class="only">word in only one caption</mark> (content words; stop words and punctuation '
               'ignored, plurals matched).</p>')
#: the gallery's legend, which also explains how a query with several neighbours is marked
LEGEND = PAIR_LEGEND[:-len("</p>")] + (" A query's word is marked shared when it is shared with at least one "
                                       "neighbour (hover for which).</p>")


def merged_query_spans(neighbours: Sequence[DupesPair]) -> list[dict]:
    """The query's spans over all its neighbours: a word is "shared" when it is shared with at
    least one neighbour (its tooltip names which), else "only". Every pair tokenises the query
    the same way, so spans of one word have the same offsets in every pair."""
    merged: dict[tuple[int, int], dict] = {}
    for rank, neighbour in enumerate(neighbours, start=1):
        for span in neighbour.spans_a or ():
            key = (int(span.start), int(span.end))
            entry = merged.setdefault(key, {"start": key[0], "end": key[1], "kind": "only_a", "with": []})
            if span.kind == "shared":
                entry["kind"] = "shared"
                entry["with"].append(str(_rank(neighbour, rank)))
    for entry in merged.values():
        entry["title"] = ("shared with neighbour " + ", ".join(entry["with"]) if entry["with"]
                          else "shared with no neighbour")
    return [merged[key] for key in sorted(merged)]


def _rank(neighbour: DupesPair, rank: int) -> int:
    """A neighbour's rank as the row gives it, else its place in the list."""
    return rank if neighbour.neighbour_rank is None else neighbour.neighbour_rank


def example_html(example: DupesExample, ids: CaptionIds) -> str:
    """One query (left) beside its nearest captions of other images (right)."""
    query = example.query
    neighbours = example.neighbours or ()
    hardest = example.hardest_cosine
    heading = (f"Query at the {100 * (example.quantile or 0):g}th percentile of hardest-companion cosine"
               + (f" (its hardest companion: {hardest:.4f})" if hardest is not None else ""))
    query_box = _box("query", query.id if query else None, query.group if query else None,
                     _text(query.text if query else None), merged_query_spans(neighbours), ids)
    rows = []
    for rank, neighbour in enumerate(neighbours, start=1):
        label = f"neighbour {_rank(neighbour, rank)}"
        rows.append("<div>" + _pair_stats(neighbour)
                    + _box(label, neighbour.id_b, neighbour.group_b, _text(neighbour.text_b), neighbour.spans_b, ids)
                    + "</div>")
    return (f'<div class="example"><h4>{escape(heading)}</h4><div class="example-grid">{query_box}'
            f'<div class="neighbours">{"".join(rows)}</div></div></div>')


@dataclass(frozen=True)
class ExactCopies:
    """Three or more captions of different images with one text: shown once, not as each of their pairs."""

    text: str
    cosine: float
    #: (caption id, image) of each copy, in the order the pairs name them
    members: tuple[tuple[str, str], ...]


def exact_copies_once(pairs) -> list:
    """``pairs`` in order, with each set of three or more exact copies (pairs of exact duplicates joined by
    a shared caption) as one :class:`ExactCopies` in the place of its first pair. Two copies stay a pair."""
    parent: dict = {}

    def root(caption_id):
        while parent.setdefault(caption_id, caption_id) != caption_id:
            caption_id = parent[caption_id]
        return caption_id

    exact = [row for row in pairs if row.exact_duplicate]
    for row in exact:
        parent[root(row.id_a)] = root(row.id_b)
    members: dict = {}
    for row in exact:
        found = members.setdefault(root(row.id_a), {})
        found.setdefault(row.id_a, row.group_a)
        found.setdefault(row.id_b, row.group_b)
    shown, entries = set(), []
    for row in pairs:
        copies = members.get(root(row.id_a)) if row.exact_duplicate else None
        if copies is None or len(copies) < 3:
            entries.append(row)
        elif root(row.id_a) not in shown:
            shown.add(root(row.id_a))
            entries.append(ExactCopies(_text(row.text_a), row.cosine, tuple(copies.items())))
    return entries


def _copies_html(copies: ExactCopies, ids: CaptionIds) -> str:
    images = len({group for _, group in copies.members})
    stats = pair_stats(copies.cosine, None, True)[:-len("</div>")] + (
        f" · the same text in {len(copies.members)} captions of {images} images</div>")
    label = f"{len(copies.members)} exact copies"
    meta = (f"{escape(label)} · ids {escape(', '.join(str(i) for i, _ in copies.members))} · images "
            f"{escape(', '.join(str(g) for _, g in copies.members))}")
    return (stats + f'<div class="caption-box"><div class="meta">{meta}</div>'
            f"{caption_html(copies.text, (), ids)}</div>")


def gallery_html(dupes: Dupes, ids: CaptionIds | None = None) -> str:
    """HTML body of the gallery section for one typed dupes section (already escaped)."""
    ids = ids or CaptionIds("dupe")
    parts = [LEGEND]
    examples = (dupes.examples or ())[:MAX_EXAMPLES]
    if examples:
        parts.append("<h3>Example queries and their nearest captions of other images</h3>")
        parts.extend(example_html(example, ids) for example in examples)
    pairs = exact_copies_once(dupes.pairs or ())[:MAX_PAIRS]
    if pairs:
        parts.append("<h3>Most similar caption pairs of different images</h3>")
        if dupes.near_duplicates is not None:  # profiles saved before the totals existed have none
            parts.append(f'<p class="stats">{escape(dupes.near_duplicates.text())}</p>')
        for row in pairs:
            body = (_copies_html(row, ids) if isinstance(row, ExactCopies)
                    else _pair_html(row, ids, "caption A", "caption B"))
            parts.append(f'<div class="example">{body}</div>')
    if not examples and not pairs:
        parts.append('<p class="stats">No near-duplicate pairs were found.</p>')
    for warning in dupes.warnings or ():
        parts.append(f'<p class="stats">Note: {escape(warning)}</p>')
    return "".join(parts)
