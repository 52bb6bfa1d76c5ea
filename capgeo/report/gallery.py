"""The near-duplicate gallery: queries with their nearest other captions, shared words marked.

Reads a ``dupes`` section (docs/dupes.md, built by
``capgeo.findings.duplicates.dupes_section``): ``examples`` (a query at a
quantile of the hardest-companion distribution with its nearest captions of
other images) and ``pairs`` (the most similar pairs overall). Each pair row
carries ``text_a``/``text_b`` and character spans ``spans_a``/``spans_b`` of
shared and differing content words; they are rendered by
:func:`capgeo.report.html.highlight`, which escapes each piece separately.

The dupes section stays an untyped, read-only mapping (``Profile.dupes``): it is the
``capgeo dupes`` result, read here and by that command's own printer only, and its rows
are open-ended (pair, example and dedup fields grow with that command), so a class per
row would only restate docs/dupes.md.
"""

from __future__ import annotations

from capgeo.report.html import CaptionIds, caption_html, escape

#: At most this many example queries and top pairs are shown (the JSON holds them all).
MAX_EXAMPLES = 6
MAX_PAIRS = 8


def _box(label: str, caption_id, group, text: str, spans, ids: CaptionIds) -> str:
    meta = f"{escape(label)} · id {escape(caption_id)} · image {escape(group)}"
    return f'<div class="caption-box"><div class="meta">{meta}</div>{caption_html(text, spans, ids)}</div>'


def _pair_stats(row: dict) -> str:
    badge = ' <span class="badge">exact duplicate</span>' if row.get("exact_duplicate") else ""
    jaccard = row.get("jaccard")
    lexical = f" · word overlap (Jaccard) {jaccard:.2f}" if jaccard is not None else ""
    return f'<div class="stats">cosine <strong>{row["cosine"]:.4f}</strong>{lexical}{badge}</div>'


def _pair_html(row: dict, ids: CaptionIds, label_a: str, label_b: str) -> str:
    return (_pair_stats(row) + '<div class="pair">'
            + _box(label_a, row.get("id_a"), row.get("group_a"), row.get("text_a", ""), row.get("spans_a"), ids)
            + _box(label_b, row.get("id_b"), row.get("group_b"), row.get("text_b", ""), row.get("spans_b"), ids)
            + "</div>")


#: the legend of marked words in a pair of captions (the leak section's, and the start of the gallery's)
PAIR_LEGEND = ('<p class="legend stats"><mark class="shared">shared word</mark>'
               '<mark class="only">word in only one caption</mark> (content words; stop words and punctuation '
               'ignored, plurals matched).</p>')
#: the gallery's legend, which also explains how a query with several neighbours is marked
LEGEND = PAIR_LEGEND[:-len("</p>")] + (" A query's word is marked shared when it is shared with at least one "
                                       "neighbour (hover for which).</p>")


def merged_query_spans(neighbours: list[dict]) -> list[dict]:
    """The query's spans over all its neighbours: a word is "shared" when it is shared with at
    least one neighbour (its tooltip names which), else "only". Every pair tokenises the query
    the same way, so spans of one word have the same offsets in every pair."""
    merged: dict[tuple[int, int], dict] = {}
    for rank, neighbour in enumerate(neighbours, start=1):
        for span in neighbour.get("spans_a") or []:
            key = (int(span["start"]), int(span["end"]))
            entry = merged.setdefault(key, {"start": key[0], "end": key[1], "kind": "only_a", "with": []})
            if span.get("kind") == "shared":
                entry["kind"] = "shared"
                entry["with"].append(str(neighbour.get("neighbour_rank", rank)))
    for entry in merged.values():
        entry["title"] = ("shared with neighbour " + ", ".join(entry["with"]) if entry["with"]
                          else "shared with no neighbour")
    return [merged[key] for key in sorted(merged)]


def example_html(example: dict, ids: CaptionIds) -> str:
    """One query (left) beside its nearest captions of other images (right)."""
    query = example.get("query") or {}
    neighbours = example.get("neighbours") or []
    hardest = example.get("hardest_cosine")
    heading = (f"Query at the {100 * example.get('quantile', 0):g}th percentile of hardest-companion cosine"
               + (f" (its hardest companion: {hardest:.4f})" if hardest is not None else ""))
    query_box = _box("query", query.get("id"), query.get("group"), query.get("text", ""),
                     merged_query_spans(neighbours), ids)
    rows = []
    for rank, neighbour in enumerate(neighbours, start=1):
        label = f"neighbour {neighbour.get('neighbour_rank', rank)}"
        rows.append("<div>" + _pair_stats(neighbour)
                    + _box(label, neighbour.get("id_b"), neighbour.get("group_b"), neighbour.get("text_b", ""),
                           neighbour.get("spans_b"), ids) + "</div>")
    return (f'<div class="example"><h4>{escape(heading)}</h4><div class="example-grid">{query_box}'
            f'<div class="neighbours">{"".join(rows)}</div></div></div>')


def gallery_html(dupes: dict, ids: CaptionIds | None = None) -> str:
    """HTML body of the gallery section for one dupes section (already escaped)."""
    ids = ids or CaptionIds("dupe")
    parts = [LEGEND]
    examples = (dupes.get("examples") or [])[:MAX_EXAMPLES]
    if examples:
        parts.append("<h3>Example queries and their nearest captions of other images</h3>")
        parts.extend(example_html(example, ids) for example in examples)
    pairs = (dupes.get("pairs") or [])[:MAX_PAIRS]
    if pairs:
        parts.append("<h3>Most similar caption pairs of different images</h3>")
        if dupes.get("near_duplicates"):  # profiles saved before the totals existed have none
            from capgeo.findings.duplicates import near_duplicate_total_text

            parts.append(f'<p class="stats">{escape(near_duplicate_total_text(dupes["near_duplicates"]))}</p>')
        for row in pairs:
            parts.append(f'<div class="example">{_pair_html(row, ids, "caption A", "caption B")}</div>')
    if not examples and not pairs:
        parts.append('<p class="stats">No near-duplicate pairs were found.</p>')
    for warning in dupes.get("warnings") or []:
        parts.append(f'<p class="stats">Note: {escape(warning)}</p>')
    return "".join(parts)
