"""The report's leakage section: per evaluation set, how many captions have a training
twin, and the closest (eval, train) pairs with shared words marked (a ``leak`` section,
docs/leak.md)."""

from __future__ import annotations

from capgeo.report.gallery import MAX_PAIRS, PAIR_LEGEND, _box, pair_stats
from capgeo.geometry.typed_profile import Leak
from capgeo.report.html import CaptionIds, escape


def leak_html(leak: Leak, ids: CaptionIds | None = None) -> str:
    """HTML body of the leakage section (already escaped)."""
    ids = ids or CaptionIds("leak")
    parts = [f'<p class="stats">A twin: an exact duplicate or a training caption at cosine &ge; '
             f'{leak.threshold:g}. Dropping the {len(leak.train_ids_to_drop):,} training captions listed by '
             f'<code>capgeo leak -o FILE</code> removes every twin below.</p>', PAIR_LEGEND]
    for entry in leak.evals:
        parts.append(f'<h3>{escape(entry.source)}: {entry.n_leaked:,} of {entry.n_captions:,} captions '
                     f'({entry.share_leaked:.1%}) have a training twin, {entry.n_exact:,} exact</h3>')
        if entry.n_groups_leaked is not None:  # a profile saved by an older capgeo lacks the image counts
            parts.append(f'<p class="stats">{entry.n_groups_leaked:,} of {entry.n_groups:,} evaluation images '
                         f'have a caption twinned in training, {entry.n_groups_all_leaked:,} every caption; the '
                         f'twins sit in {entry.n_train_groups_twinned:,} training images.</p>')
        if entry.images is not None:
            from capgeo.findings.image_leak import describe_image_leak

            parts.append(f'<p class="stats">{escape(describe_image_leak(entry.images))}.</p>')
        for pair in entry.pairs[:MAX_PAIRS]:
            parts.append(f'<div class="example">{pair_stats(pair.cosine, pair.jaccard, pair.exact_duplicate)}'
                         '<div class="pair">'
                         + _box("eval", pair.eval_id, pair.eval_group, pair.eval_text, pair.spans_eval, ids)
                         + _box("train", pair.train_id, pair.train_group, pair.train_text, pair.spans_train, ids)
                         + "</div></div>")
    return "".join(parts)
