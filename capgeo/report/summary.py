"""The headline numbers of a profile as ``(label, text)`` rows.

Shared by the single report (a two-column table) and the compare view (one
column per profile, rows matched by label). Values are plain text; the page
escapes them. A missing section gives "not computed" rather than an error.
"""

from __future__ import annotations

from pathlib import PurePath

MISSING = "not computed"


def _pct(value) -> str:
    return MISSING if value is None else f"{100 * value:.1f}%"


def _num(value, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def _count(value) -> str:
    return MISSING if value is None else f"{int(value):,}"


def dataset_label(profile: dict) -> str:
    """Short name of a profile's dataset: the source file's name."""
    source = (profile.get("dataset") or {}).get("source") or "dataset"
    return PurePath(str(source)).name or str(source)


def encoder_label(profile: dict) -> str:
    encoder = profile.get("encoder") or {}
    return str(encoder.get("spec") or encoder.get("name") or "encoder")


def gamma_suggestion(gamma: dict | None) -> tuple[float | None, list | None]:
    """(suggested gamma, [low, high]) from a gamma section, whatever its minor layout."""
    if not gamma:
        return None, None
    suggestion = gamma.get("suggestion")
    if isinstance(suggestion, dict):
        value = suggestion.get("gamma", suggestion.get("value"))
        low_high = suggestion.get("range") or [suggestion.get("low"), suggestion.get("high")]
    else:
        value = gamma.get("suggested_gamma", gamma.get("suggested", suggestion))
        low_high = gamma.get("range") or gamma.get("suggested_range")
    if low_high is not None and any(v is None for v in low_high):
        low_high = None
    return value, low_high


def summary_rows(profile: dict) -> list[tuple[str, str]]:
    dataset = profile.get("dataset") or {}
    encoder = profile.get("encoder") or {}
    lengths = profile.get("lengths") or {}
    if lengths.get("known") is False:  # precomputed vectors: no tokenizer, so no token counts
        lengths = {}
    pairwise = profile.get("pairwise") or {}
    within = profile.get("within_group") or {}
    hardest = profile.get("hardest_companion") or {}
    exact = profile.get("exact_duplicates") or {}
    near = profile.get("near_duplicates") or {}

    rows = [
        ("Dataset", f"{dataset_label(profile)} ({dataset.get('format', '?')})"),
        ("Captions / groups (images)", f"{_count(dataset.get('n_captions'))} / {_count(dataset.get('n_groups'))}"),
        ("Encoder", f"{encoder_label(profile)} ({encoder.get('kind', '?')}, {encoder.get('name', '?')}, "
                    f"width {encoder.get('width', '?')})"),
        ("Context length", f"{encoder.get('context_length', '?')} tokens"
                           + (f" (captions cut to {lengths['max_tokens']})"
                              if lengths.get("max_tokens") not in (None, encoder.get("context_length")) else "")),
        ("Logit scale", "none in checkpoint" if encoder.get("logit_scale") is None else _num(encoder["logit_scale"], 1)),
        ("Captions truncated by the encoder",
         f"{_count(lengths.get('n_truncated'))} ({_pct(lengths.get('share_truncated'))})" if lengths
         else "unknown (no token counts)"),
        ("Caption length (tokens)",
         f"mean {_num(lengths.get('mean'), 1)}, median {_num(lengths.get('median'), 0)}, max {_count(lengths.get('max'))}"
         if lengths else MISSING),
        ("Mean pairwise cosine (different images)",
         f"{_num(pairwise.get('mean'))} ± {_num(pairwise.get('std'))}" if pairwise else MISSING),
    ]
    rows.append(("Mean cosine within an image (positives)",
                 _num(within.get("mean")) if within else "none: one caption per image"))
    rows.append(("Mean hardest-companion cosine",
                 f"{_num(hardest.get('mean'))} (N = {_count(hardest.get('count'))})" if hardest else MISSING))
    for entry in profile.get("batches") or []:
        buckets = entry.get("buckets") or {}
        if buckets.get("shares"):
            value = _pct(buckets["shares"][-1])
            relative = entry.get("relative_buckets") or {}
            if relative.get("shares") and relative.get("quantile_levels"):
                value += (f" (above this dataset's pairwise p{100 * relative['quantile_levels'][-1]:g}, "
                          f"cosine {relative['edges'][-1]:.3f}: {_pct(relative['shares'][-1])})")
            rows.append((f"In-batch negatives {buckets['labels'][-1]}, B={entry['batch_size']}", value))
        near_batch = entry.get("near_duplicate") or {}
        if near_batch.get("share_batches") is not None:
            rows.append((f"Batches with a near-twin >={near_batch.get('threshold')}, B={entry['batch_size']}",
                         _pct(near_batch["share_batches"])))
    rows.append((f"Near-duplicate pairs (cosine >= {near.get('threshold', '?')})",
                 f"{_count(near.get('n_pairs_cross_group'))} pairs; {_count(near.get('n_captions_hardest_above'))} "
                 f"captions have one" if near else MISSING))
    rows.append(("Exact duplicates",
                 f"{_count(exact.get('n_sets'))} sets, {_count(exact.get('n_pairs_cross_group'))} pairs across images"
                 if exact else MISSING))
    value, low_high = gamma_suggestion(profile.get("gamma"))
    headline_batch = (profile.get("gamma") or {}).get("headline_batch_size")
    rows.append(("Suggested gamma", MISSING if value is None else
                 f"{value:.2f}" + (f" (range {low_high[0]:.2f}-{low_high[1]:.2f})" if low_high else "")
                 + (f" at B={headline_batch}" if headline_batch else "")))
    matched = (profile.get("gamma") or {}).get("margin_matched_gamma")
    if matched is not None:
        rows.append(("Margin-matched gamma", f"{matched:.2f}"))
    return rows
