"""The report's pairs section (docs/pairs.md): the numbers of the image side, and a card per flagged
image (its thumbnail, its captions, its hardest wrong caption), thumbnails inlined as small JPEGs.

Reads the typed ``Pairs`` section (capgeo.geometry.typed_profile); its thumbnails are base64 JPEG bytes
keyed by image id, inlined as ``data:`` URIs (the page loads nothing from the network)."""

from __future__ import annotations

from capgeo.display import short_id
from capgeo.geometry.typed_profile import Pairs
from capgeo.report.html import CaptionIds, caption_html, escape, table

#: cards shown per list (the JSON holds the listed rows, the exports every row)
MAX_CARDS = 8
CSS = """
.pair-card { display:grid; grid-template-columns: 120px 1fr; gap:14px; border-top:1px solid var(--line); padding:12px 0; }
.pair-card img, .pair-twins img { width:112px; height:auto; border-radius:4px; border:1px solid var(--line); }
.pair-card .no-image { width:112px; height:84px; border:1px dashed var(--line); border-radius:4px; color:var(--muted);
                       font-size:0.75rem; display:flex; align-items:center; justify-content:center; text-align:center; }
.pair-card ul { margin:4px 0; padding-left:18px; } .pair-card li.own { font-weight:600; }
.pair-twins { display:flex; gap:10px; align-items:center; margin:6px 0; }
"""


def thumbnail_html(pairs: Pairs, image: str) -> str:
    """The image's inlined thumbnail, or a box that says there is none (vectors read from a file)."""
    data = (pairs.thumbnails or {}).get(image)
    if data:
        return f'<img alt="image {escape(short_id(image))}" title="{escape(image)}" src="data:image/jpeg;base64,{data}">'
    return '<div class="no-image">no thumbnail<br>(image vectors from a file)</div>'


def _image_label(image: str) -> str:
    return f'<span title="{escape(image)}">{escape(short_id(image))}</span>'


def _mismatch_card(pairs: Pairs, card) -> str:
    items = "".join(f'<li class="{"own" if c.id == card.caption_id else ""}">{c.alignment:.3f} · '
                    f'{escape(c.text)}</li>' for c in card.captions)
    wrong = card.hardest_wrong
    return (f'<div class="pair-card">{thumbnail_html(pairs, card.image)}<div>'
            f'<div class="stats">image {_image_label(card.image)} · caption {escape(short_id(card.caption_id))} '
            f'aligned <strong>{card.alignment:.3f}</strong>; {card.image_rank:,} captions of other images score '
            f'higher for this image, {card.text_rank:,} other images score higher for the caption</div>'
            f'<ul>{items}</ul><div class="stats">hardest wrong caption ({_image_label(wrong.image)}, cosine '
            f'{wrong.cosine:.3f}): {escape(wrong.text)}</div></div></div>')


def _negative_card(pairs: Pairs, row, ids: CaptionIds) -> str:
    own = caption_html(row.text, row.spans_a, ids)
    other = caption_html(row.negative_text, row.spans_b, ids)
    return (f'<div class="pair-card"><div>{thumbnail_html(pairs, row.image)}</div><div>'
            f'<div class="stats">image {_image_label(row.image)} scores a caption of '
            f'{_image_label(row.negative_image)} at <strong>{row.cosine:.3f}</strong>, its own at '
            f'{row.own_cosine:.3f}; caption cosine Gbar {row.caption_cosine:.3f}, boost gamma·Gbar '
            f'{row.boost:.3f}</div><div class="pair"><div class="caption-box"><div class="meta">own caption '
            f'{escape(short_id(row.caption_id))}</div>{own}</div><div class="caption-box"><div class="meta">'
            f'caption {escape(short_id(row.negative_id))} of the other image</div>{other}</div></div>'
            f'<div class="pair-twins">{thumbnail_html(pairs, row.negative_image)}'
            f'<span class="stats">the other image</span></div></div></div>')


def _rows(pairs: Pairs) -> list[tuple[str, str]]:
    """The section's numbers as (label, plain text) rows."""
    alignment, retrieval = pairs.alignment, pairs.retrieval
    rows = [("Pairs / images", f"{pairs.n_pairs:,} / {pairs.n_images:,}"
             + (f" ({pairs.n_images_missing:,} images missing)" if pairs.n_images_missing else "")),
            ("Image vectors", str(pairs.source))]
    if alignment is not None and alignment.mean is not None:
        rows.append(("Alignment (image-caption cosine)",
                     f"mean {alignment.mean:.3f}, p1 {alignment.quantile('p1'):.3f}, "
                     f"p50 {alignment.quantile('p50'):.3f}, min {alignment.min:.3f}"))
    if retrieval is not None:
        rows.append(("Retrieval at initialisation (exact)",
                     f"text→image R@1 {retrieval.text_to_image_r1:.1%}, R@5 {retrieval.text_to_image_r5:.1%}; "
                     f"image→text R@1 {retrieval.image_to_text_r1:.1%}, R@5 {retrieval.image_to_text_r5:.1%}"))
    negatives = pairs.false_negatives
    if negatives is not None:
        text = (f"{negatives.n_rows:,} rows (delta {negatives.delta:g}): {negatives.n_pairs:,} pairs of "
                f"{negatives.n_images:,} images")
        if negatives.batch_size:
            text += (f"; {negatives.batch_share_batches:.1%} of random batches of {negatives.batch_size} hold one")
        rows.append(("Cross-modal false negatives", text))
    saturation = pairs.saturation
    if saturation is not None:
        for entry in saturation.gammas:
            rows.append((f"Saturation, gamma {entry.gamma:g} (B={saturation.batch_size}, "
                         f"s={saturation.logit_scale:g})",
                         f"{entry.share_batches_below:.1%} of batches with loss < {saturation.solved_loss:g}; "
                         f"{entry.share_zero_gradients:.1%} of negative-logit gradients exactly 0 in fp32"))
    twins = pairs.twins
    if twins is not None:
        rows.append(("Image twins under different ids",
                     (f"{twins.n_exact_sets:,} sets of identical images; " if twins.hashes_known else "")
                     + f"{twins.n_near_pairs:,} pairs at image cosine ≥ {twins.threshold:g}"))
    return rows


def pairs_html(pairs: Pairs, ids: CaptionIds | None = None) -> str:
    """HTML body of the pairs section (already escaped)."""
    ids = ids or CaptionIds("pair")
    parts = [f"<style>{CSS}</style>", table([(label, escape(value)) for label, value in _rows(pairs)])]
    mismatched = pairs.mismatched
    if mismatched is not None and mismatched.pairs:
        parts.append(f"<h3>Mismatched pairs: {mismatched.n_pairs:,} ({escape(mismatched.rule)})</h3>")
        parts += [_mismatch_card(pairs, card) for card in mismatched.pairs[:MAX_CARDS]]
    negatives = pairs.false_negatives
    if negatives is not None and negatives.rows:
        parts.append("<h3>Cross-modal false negatives: a caption of another image the image scores at least as "
                     "high as its own</h3>")
        parts += [_negative_card(pairs, row, ids) for row in negatives.rows[:MAX_CARDS]]
    twins = pairs.twins
    if twins is not None and (twins.near_pairs or twins.exact_sets):
        parts.append("<h3>Image twins under different ids</h3>")
        for names in twins.exact_sets[:MAX_CARDS]:
            parts.append(f'<div class="pair-twins">{"".join(thumbnail_html(pairs, name) for name in names[:2])}'
                         f'<span class="stats">identical bytes: {", ".join(_image_label(n) for n in names)}</span></div>')
        for pair in twins.near_pairs[:MAX_CARDS]:
            parts.append(f'<div class="pair-twins">{thumbnail_html(pairs, pair.a)}{thumbnail_html(pairs, pair.b)}'
                         f'<span class="stats">{_image_label(pair.a)} ~ {_image_label(pair.b)}: image cosine '
                         f'{pair.cosine:.4f}</span></div>')
    return "".join(parts)
