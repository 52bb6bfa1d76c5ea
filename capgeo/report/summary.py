"""The headline numbers of a profile as ``(label, text)`` rows.

Shared by the single report (a two-column table) and the compare view (one
column per profile, rows matched by label). Values are plain text; the page
escapes them. A missing section gives "not computed" rather than an error.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Sequence

from capgeo.display import counted
from capgeo.geometry.typed_profile import Gamma, Profile

MISSING = "not computed"


def _pct(value) -> str:
    return MISSING if value is None else f"{100 * value:.1f}%"


def _num(value, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def _general(value) -> str:
    return MISSING if value is None else f"{value:g}"


def _count(value) -> str:
    return MISSING if value is None else f"{int(value):,}"


def _counted(value, noun: str) -> str:
    return MISSING if value is None else counted(int(value), noun)


def dataset_label(profile: Profile) -> str:
    """Short name of a profile's dataset: the source file's name."""
    dataset = profile.dataset
    source = (dataset.source if dataset else None) or "dataset"
    return PurePath(str(source)).name or str(source)


def encoder_label(profile: Profile) -> str:
    encoder = profile.encoder
    return str((encoder.spec or encoder.name if encoder else None) or "encoder")


def gamma_suggestion(gamma: Gamma | None) -> tuple[float | None, tuple | None]:
    """(suggested gamma, (low, high)) from a ``gamma`` section (findings/gamma.py's gamma_section)."""
    if gamma is None:
        return None, None
    low_high = gamma.suggested_range
    if low_high is not None and any(v is None for v in low_high):
        low_high = None
    return gamma.suggested_gamma, low_high


def summary_rows(profile: Profile) -> list[tuple[str, str]]:
    dataset, encoder = profile.dataset, profile.encoder
    # precomputed vectors have no tokenizer, so no token counts
    lengths = profile.lengths if profile.lengths and profile.lengths.known is not False else None
    pairwise, within, hardest = profile.pairwise, profile.within_group, profile.hardest_companion
    exact, near = profile.exact_duplicates, profile.near_duplicates
    # vectors from a file: no tokenizer, no checkpoint (their context length is stored as 0)
    precomputed = encoder.kind == "precomputed"

    rows = [
        ("Dataset", f"{dataset_label(profile)} ({shown(dataset.format)})"),
        ("Captions / groups (images)", f"{_count(dataset.n_captions)} / {_count(dataset.n_groups)}"),
        ("Encoder", f"{encoder_label(profile)} ({shown(encoder.kind)}, {shown(encoder.name)}, "
                    f"width {shown(encoder.width)})"),
        ("Context length", "unknown (precomputed vectors)" if precomputed else
                           f"{shown(encoder.context_length)} tokens"
                           + (f" (captions cut to {lengths.max_tokens})" if lengths and lengths.max_tokens
                              not in (None, encoder.context_length) else "")),
        ("Logit scale", _num(encoder.logit_scale, 1) if encoder.logit_scale is not None
         else "unknown (precomputed vectors)" if precomputed else "none in checkpoint"),
        ("Captions truncated by the encoder",
         f"{_count(lengths.n_truncated)} ({_pct(lengths.share_truncated)})" if lengths
         # a `capgeo truncation` result has token counts in its own section, not in `lengths`
         else MISSING + " (see the truncation section)" if profile.truncation and not precomputed
         else "unknown (no token counts)"),
        ("Caption length (tokens)",
         # the median as the JSON and the terminal give it (136.5, not 136 by rounding half to even)
         f"mean {_num(lengths.mean, 1)}, median {_general(lengths.median)}, "
         f"max {_count(lengths.max)}" if lengths else MISSING),
        ("Mean pairwise cosine (different images)",
         f"{_num(pairwise.mean)} ± {_num(pairwise.std)}" if pairwise else MISSING),
    ]
    # null: every image has one caption; absent: the profile (gamma's, truncation's) has no such section
    rows.append(("Mean cosine within an image (positives)",
                 _num(within.mean) if within else "none: one caption per image" if profile.written_null("within_group")
                 else MISSING))
    rows.append(("Mean hardest-companion cosine",
                 f"{_num(hardest.mean)} (N = {_count(hardest.count)})" if hardest else MISSING))
    for entry in profile.batches or ():
        buckets = entry.buckets
        if buckets and buckets.shares:
            value = _pct(buckets.shares[-1])
            relative = entry.relative_buckets
            if relative and relative.shares and relative.quantile_levels:
                value += (f" (above this dataset's pairwise p{100 * relative.quantile_levels[-1]:g}, "
                          f"cosine {relative.edges[-1]:.3f}: {_pct(relative.shares[-1])})")
            rows.append((f"In-batch negatives {buckets.labels[-1]}, B={entry.batch_size}", value))
        near_batch = entry.near_duplicate
        if near_batch and near_batch.share_batches is not None:
            # the threshold in the value, not the label: compare lines profiles up by label
            rows.append((f"Batches with a near-twin, B={entry.batch_size}",
                         f"{_pct(near_batch.share_batches)} (a pair at cosine >= {near_batch.threshold})"))
    # one label whatever the threshold, so compare lines profiles up in one row (the threshold in
    # the label would give a "not computed" row beside the computed one)
    rows.append(("Near-duplicate pairs",
                 f"{_counted(near.n_pairs_cross_group, 'pair')} at cosine >= {shown(near.threshold)}; "
                 f"{_counted(near.n_captions_hardest_above, 'caption')} "
                 f"{'has' if near.n_captions_hardest_above == 1 else 'have'} one" if near else MISSING))
    # one number, the pairs of identical captions of different images, as the alert gives it
    rows.append(("Exact duplicates", f"{_counted(exact.n_pairs_cross_group, 'pair')} across images"
                 if exact else MISSING))
    value, _ = gamma_suggestion(profile.gamma)
    gamma = profile.gamma
    headline = headline_gamma_text(gamma)
    if headline and gamma.encoder_caution:
        headline += f" (for {encoder_geometry(profile)}, not the tower training fine-tunes)"
    rows.append(("Suggested gamma", headline or MISSING))
    if value is not None and gamma.logit_scale is not None:
        # gamma and s act only through s * gamma: the same captions suggest 0.19 at s = 100 and 0.96 at s = 20
        rows.append(("Logit scale s behind the gamma",
                     f"{gamma.logit_scale:g}" + (f" ({shown(gamma.logit_scale_source)})"
                                                 if gamma.logit_scale_source else "")))
    # the margin view (margin-matched gamma) is in the gamma section, beside what it means: one
    # gamma here, as on the terminal
    return rows


def headline_gamma_text(gamma: Gamma | None) -> str | None:
    """The headline gamma as every first screen gives it: "0.13 (range 0.06-0.19) at B=128", with
    which end of the range the clip interval cuts, or why the gamma itself is at its end. None
    without a suggestion."""
    value, low_high = gamma_suggestion(gamma)
    if gamma is not None and gamma.sweep:
        # a sweep ran: the measured gamma is the headline, the rule's estimate beside it
        from capgeo.findings.gamma_sweep import measured_headline

        return measured_headline(gamma.sweep) + (f"; the rule's instant estimate {value:.2f}" if value is not None else "")
    if value is None:
        return None
    headline = gamma.headline
    suggestion = headline.suggestion if headline else None
    batch_size = gamma.headline_batch_size or (headline.batch_size if headline else None)
    text = f"{value:.2f}"
    if low_high:
        ends = (suggestion.range_clipped if suggestion else None) or (False, False)
        clipped = ("" if (suggestion and suggestion.clipped) or not any(ends) else
                   "; both ends clipped" if all(ends) else "; lower end clipped" if ends[0] else "; upper end clipped")
        text += f" (range {low_high[0]:.2f}-{low_high[1]:.2f}{clipped})"
    if batch_size:
        text += f" at B={batch_size}"
    if suggestion and suggestion.clipped and suggestion.clip_note:
        text += f", clipped: {suggestion.clip_note}"
    return text


def encoder_geometry(profile: Profile) -> str:
    """Whose geometry a cautioned gamma is for, in a few words."""
    encoder = profile.encoder
    if encoder and encoder.kind == "sentence-transformers":
        return f"{shown(encoder.name)}'s geometry"
    return "the geometry of vectors of unknown origin"


def shown(value) -> str:
    """A field as text, "?" when the profile does not have it."""
    return "?" if value is None else str(value)


def shown_field(section, name: str) -> str:
    """Field ``name`` of a typed section as text: "None" when written as null, "?" when absent."""
    value = getattr(section, name)
    return "None" if value is None and name in section.nulls else shown(value)


#: the rows `capgeo compare` prints on the terminal, by the start of their labels (a batch size's row
#: names its B): the headline numbers, one line each
HEADLINE_ROWS = ("Captions / groups (images)", "Mean pairwise cosine (different images)",
                 "Mean hardest-companion cosine", "In-batch negatives", "Near-duplicate pairs", "Suggested gamma")


def headline_rows(profiles: Sequence[Profile]) -> list[tuple[str, list[str]]]:
    """(label, one value per profile) for :data:`HEADLINE_ROWS`: each profile's first row of each
    kind (its headline batch size); where profiles name that row differently (B=128 beside B=60),
    the row takes the kind's name and each value starts with what its label adds ("B=60: ...")."""
    per_profile = [summary_rows(profile) for profile in profiles]
    table = []
    for wanted in HEADLINE_ROWS:
        found = [next(((label, value) for label, value in rows if label.startswith(wanted)), None)
                 for rows in per_profile]
        labels = {item[0] for item in found if item is not None}
        if not labels:
            continue
        if len(labels) == 1:
            table.append((labels.pop(), [item[1] if item else MISSING for item in found]))
            continue
        table.append((wanted, [MISSING if item is None else
                               f"{item[0][len(wanted):].strip(' ,')}: {item[1]}" for item in found]))
    return table
