"""The ``pairs`` section on the terminal (`capgeo profile --image-embeddings FILE`, docs/pairs.md)."""

from __future__ import annotations

from capgeo.display import counted, short_id, visible
from capgeo.geometry.typed_profile import Pairs

#: rows of each list printed (the JSON holds them all)
PRINTED_ROWS = 3


def _clip(text: str, width: int = 70) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def pairs_lines(pairs: Pairs) -> list[str]:
    """The section as plain lines (rich markup escaped by the caller's Text)."""
    alignment, retrieval = pairs.alignment, pairs.retrieval
    lines = [f"Pairs: {pairs.n_pairs:,} image-caption pairs, {pairs.n_images:,} images"
             + (f" ({pairs.n_images_missing:,} missing)" if pairs.n_images_missing else "")
             + f", image vectors {pairs.source}"]
    if alignment is not None and alignment.mean is not None:
        lines.append(f"  alignment (image-caption cosine): mean {alignment.mean:.3f}, p1 "
                     f"{alignment.quantile('p1'):.3f}, p50 {alignment.quantile('p50'):.3f}, "
                     f"min {alignment.min:.3f}")
    if retrieval is not None:
        lines.append(f"  retrieval at initialisation (exact): text->image R@1 {retrieval.text_to_image_r1:.1%}, "
                     f"R@5 {retrieval.text_to_image_r5:.1%}; image->text R@1 {retrieval.image_to_text_r1:.1%}, "
                     f"R@5 {retrieval.image_to_text_r5:.1%}")
    mismatched = pairs.mismatched
    if mismatched is not None:
        lines.append(f"  mismatched ({mismatched.rule}): {counted(mismatched.n_pairs, 'pair')} of "
                     f"{counted(mismatched.n_images, 'image')}")
        for card in mismatched.pairs[:PRINTED_ROWS]:
            lines.append(f"    {short_id(card.image)}: {card.alignment:.3f} \"{_clip(card.text)}\"")
    negatives = pairs.false_negatives
    if negatives is not None:
        line = (f"  cross-modal false negatives (delta {negatives.delta:g}): {counted(negatives.n_rows, 'row')}, "
                f"{counted(negatives.n_pairs, 'pair')} of {counted(negatives.n_images, 'image')}")
        if negatives.batch_size:
            line += (f"; {negatives.batch_share_batches:.1%} of random batches of {negatives.batch_size} "
                     f"hold one ({negatives.batch_mean_per_batch:.2f} per batch)")
        lines.append(line)
        for row in negatives.rows[:PRINTED_ROWS]:
            lines.append(f"    {short_id(row.image)} scores \"{_clip(row.negative_text, 50)}\" "
                         f"({short_id(row.negative_image)}) {row.cosine:.3f} vs its own {row.own_cosine:.3f}; "
                         f"boost gamma*Gbar {row.boost:.3f}")
        if negatives.output:
            lines.append(f"    every row: {negatives.output} ({negatives.n_written:,} rows)")
    saturation = pairs.saturation
    if saturation is not None:
        for entry in saturation.gammas:
            lines.append(f"  saturation at B={saturation.batch_size}, s={saturation.logit_scale:g}, "
                         f"gamma {entry.gamma:g}: {entry.share_batches_below:.1%} of batches with loss < "
                         f"{saturation.solved_loss:g}, {entry.share_zero_gradients:.1%} of negative-logit "
                         f"gradients exactly 0 in fp32")
    twins = pairs.twins
    if twins is not None:
        exact = (f"{counted(twins.n_exact_sets, 'set')} of identical images ({twins.n_exact_images:,} ids)"
                 if twins.hashes_known else "identical bytes unknown (vectors from a file)")
        lines.append(f"  image twins under different ids: {exact}; {counted(twins.n_near_pairs, 'pair')} at "
                     f"image cosine >= {twins.threshold:g}")
        for pair in twins.near_pairs[:PRINTED_ROWS]:
            lines.append(f"    {short_id(pair.a)} ~ {short_id(pair.b)}: {pair.cosine:.4f}")
    return [visible(line) for line in lines]


def print_pairs(pairs: Pairs, console) -> None:
    from rich.text import Text

    for line in pairs_lines(pairs):
        console.print(Text(line))
