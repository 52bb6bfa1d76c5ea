"""One dataset's report page: verdict (the alerts), headline numbers, summary, figures, gallery, provenance.

Every section is optional: a profile without ``gamma`` simply has no gamma
figure, and the page's "Left out or changed" list says why (``notes``).

The page reads the typed profile (capgeo.geometry.typed_profile) by attribute. The optional sections
(truncation, gamma, the gallery, the map, leak, pairs) are drawn from the section registry
(capgeo.sections), each by its own HTML renderer, in the registry's order.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from capgeo import __version__
from capgeo.geometry.typed_profile import BatchStatistics, Dataset, Encoder, Gamma, Profile, Provenance, Truncation
from capgeo.display import short_id
from capgeo.map import MAP_FIGURE_ID
from capgeo.report import figures
from capgeo.report.alerts import alerts_for
from capgeo.report.html import Page, Section, escape, figure_div, notes_section, plotly_javascript, table
from capgeo.report.summary import dataset_label, encoder_label, headline_rows, shown_field, summary_rows
from capgeo.sections import SECTIONS, missing_notes, resolve

#: Element ids of the figures, in page order (tests check each is present).
FIGURE_IDS = ("fig-cosines", "fig-buckets", "fig-batch", "fig-lengths", "fig-gamma")
#: The hardest in-batch negative beside the hardest companion: drawn when the profile's batches record its
#: histogram (profiles saved before capgeo recorded it have only its summary: the page says so).
HARDEST_NEGATIVE_FIGURE_ID = "fig-hardest-negative"
#: The caption map (capgeo.map): drawn when the profile has a map section.
OPTIONAL_FIGURE_IDS = (HARDEST_NEGATIVE_FIGURE_ID, MAP_FIGURE_ID)
#: Drawn only when the gamma section carries a measured sweep (`--sweep` on gamma, profile or report).
GAMMA_SWEEP_FIGURE_ID = "fig-gamma-sweep"
#: Drawn only when the profile has a truncation section (`capgeo truncation --json`).
TRUNCATION_FIGURE_ID = "fig-truncation"
#: Truncation-only pairs shown as text (the JSON holds them all).
MAX_TRUNCATION_PAIRS = 4


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def alerts_html(profile: Profile) -> str:
    alerts = alerts_for(profile)
    if not alerts:
        return '<p class="ok">Nothing stands out: no alert fired (thresholds in capgeo/report/alerts.py).</p>'
    items = "".join(f'<li class="{escape(a.level)}" data-alert="{escape(a.key)}"><strong>{escape(a.title)}</strong>'
                    f"{escape(a.message)}</li>" for a in alerts)
    return f'<ul class="alerts">{items}</ul>'


def headline_html(profile: Profile) -> str:
    """The headline numbers (the ones `capgeo compare` lines up) as a row of tiles, not a table."""
    tiles = "".join(f'<div class="tile"><dt>{escape(label)}</dt><dd>{escape(values[0])}</dd></div>'
                    for label, values in headline_rows([profile]))
    return f'<dl class="headline">{tiles}</dl>'


def heatmap_batch(profile: Profile) -> BatchStatistics | None:
    """The batch entry whose example matrix is drawn: the largest batch size that has one."""
    candidates = [entry for entry in profile.batches or () if entry.example and entry.example.cosine]
    return max(candidates, key=lambda entry: entry.batch_size) if candidates else None


def _seen_unseen(caption) -> str:
    """A caption with the part the encoder saw in normal text and the rest greyed."""
    text, offset = caption.text or "", caption.cut_offset
    if offset is None or not 0 <= offset <= len(text):
        return f'<p class="caption">{escape(text)}</p>'
    return (f'<p class="caption">{escape(text[:offset])}<span class="unseen" title="cut: the encoder did not see this">'
            f"{escape(text[offset:])}</span></p>")


def truncation_pairs_html(truncation: Truncation) -> str:
    pairs = (truncation.truncation_only_pairs or ())[:MAX_TRUNCATION_PAIRS]
    if not pairs:
        return ""
    parts = ["<h3>Pairs that are near-duplicates only because they were cut</h3>",
             '<p class="stats">Grey: the part of the caption the encoder did not see at that length.</p>']
    for pair in pairs:
        # a truncation-only pair (TruncationPair, docs/truncation.md)
        stats = (f'<div class="stats">at L={pair.max_tokens} tokens cosine '
                 f'<strong>{pair.cosine_at_length:.4f}</strong>; at the full context '
                 f'{pair.cosine_full:.4f}</div>')
        boxes = "".join(f'<div class="caption-box"><div class="meta">id {escape(short_id(c.id))} · image '
                        f'{escape(short_id(c.group))} · {escape(c.tokens)} tokens</div>{_seen_unseen(c)}</div>'
                        for c in (pair.a, pair.b))
        parts.append(f'<div class="example">{stats}<div class="pair">{boxes}</div></div>')
    return "".join(parts)


def takeaway(text: str | None) -> str:
    """The one line under a chart that says what it means for training."""
    return f'<p class="takeaway">{escape(text)}</p>' if text else ""


def hardest_negative_line(profile: Profile, entry: BatchStatistics) -> str | None:
    """What the hardest in-batch negative means for training, at the headline batch size."""
    in_batch = entry.hardest_in_batch
    median = in_batch.quantile("p50")
    companion = profile.hardest_companion
    companion_median = companion.quantile("p50") if companion else None
    if median is None:
        return None
    line = (f"For training: at B={entry.batch_size} the median caption's hardest in-batch negative has cosine "
            f"{median:.3f}")
    if companion_median is not None:
        gap = companion_median - median
        line += (f", {gap:.3f} below its hardest companion in the whole dataset ({companion_median:.3f}): "
                 + ("random batches rarely hold a caption's near-twin, so Gbar's largest boost lands on negatives "
                    "this far from the twins that decide Recall@1" if gap >= 0.05 else
                    "a random batch already holds negatives nearly as close as a caption's nearest twin, so Gbar "
                    "boosts hard negatives at every step"))
    gamma = profile.gamma or Gamma()
    suggested, scale = gamma.suggested_gamma, gamma.logit_scale
    if suggested is not None and scale:
        line += f"; at the suggested gamma {suggested:.2f} that boost is s·γ·G = {scale * suggested * median:.1f} logits"
    return line + "."


def buckets_line(batches) -> str | None:
    """What the fixed cosine buckets mean for training, at the headline batch size."""
    entry = next((entry for entry in batches if entry.buckets and entry.buckets.shares), None)
    if entry is None:
        return None
    buckets = entry.buckets
    edges, above = buckets.edges or (), buckets.share_above or ()
    per_row = buckets.expected_above_per_row or ()
    if not edges or not above:
        return None
    hardest_edge, share = edges[-1], above[-1]
    line = (f"For training: at B={entry.batch_size}, {100 * share:.1f}% of a row's {entry.negatives_per_row} "
            f"negatives have cosine >= {hardest_edge:g}")
    if per_row:
        line += f" ({per_row[-1]:.1f} per row)"
    if above[0] < 0.05:
        line += (f" and {100 * above[0]:.1f}% >= {edges[0]:g}: under this encoder the fixed edges sit above almost "
                 "every negative, so read the hardest-negative chart above (HN-CLIP's batches under Long-CLIP-L hold "
                 "86-99% at >= 0.8)")
    else:
        line += f"; {100 * above[0]:.1f}% have cosine >= {edges[0]:g} (HN-CLIP's batches under Long-CLIP-L: 86-99% >= 0.8)"
    return line + "."


def figure_sections(profile: Profile) -> list[Section]:
    sections = []
    if profile.pairwise or profile.hardest_companion:
        label = dataset_label(profile)
        figure = figures.cosine_distribution_figure([(label, profile.pairwise, profile.hardest_companion)])
        sections.append(Section("distributions", "Pairwise and hardest-companion cosine", figure_div(figure, "fig-cosines"),
                                "All pairs are captions of different images; a caption's hardest companion is its most "
                                "similar caption of another image (as in HN-CLIP's Figure 1). Dashed lines: means."))
    batches = profile.batches or ()
    in_batch = figures.hardest_in_batch_entries(batches)
    if in_batch:
        label = dataset_label(profile)
        figure = figures.hardest_negative_figure([(label, profile.hardest_companion, batches)])
        sections.append(Section("hardest-negative", "Hardest negative in a batch",
                                figure_div(figure, HARDEST_NEGATIVE_FIGURE_ID)
                                + takeaway(hardest_negative_line(profile, in_batch[0])),
                                "Each caption's hardest negative in random training batches (the entry HN-CLIP's "
                                "Gbar boosts most) beside its hardest companion in the whole dataset, on the same "
                                "batches as every in-batch number here. Dashed lines: means."))
    if any(entry.buckets and entry.buckets.shares for entry in batches):
        series = [(dataset_label(profile), batches)]
        body = figure_div(figures.bucket_composition_figure(series), "fig-buckets") + takeaway(buckets_line(batches))
        sections.append(Section("buckets", "In-batch negatives by hardness", body,
                                "Random training batches of captions of distinct images: the share of each row's "
                                "negatives in each caption-cosine bucket, per batch size (HN-CLIP's Figure A6C)."))
    entry = heatmap_batch(profile)
    if entry is not None:
        figure = figures.batch_heatmap_figure(entry.example, entry.batch_size)
        sections.append(Section("batch-matrix", "One real batch", figure_div(figure, "fig-batch"),
                                f"Caption-caption cosine of one random batch of {entry.batch_size} (diagonal "
                                "masked): the bright off-diagonal cells are the near-twins HN-CLIP's Gbar boosts."))
    lengths = profile.lengths
    if lengths and lengths.histogram and lengths.counted:
        sections.append(Section("lengths", "Caption length", figure_div(figures.caption_length_figure(lengths), "fig-lengths"),
                                "Untruncated token counts with the encoder's own tokenizer; bars right of the dashed "
                                "line are cut when embedded."))
    return sections


def optional_sections(profile: Profile) -> tuple[list[Section], list[str]]:
    """The page's parts for the optional sections the profile holds (capgeo.sections, in its order),
    and the scripts they need."""
    parts, scripts = [], []
    for entry in SECTIONS:
        section = getattr(profile, entry.name)
        body = entry.page_html(section)
        if body is None:
            continue
        parts.append(Section(entry.element_id, entry.title, body, entry.lede_for(section)))
        if entry.script:
            scripts.append(resolve(entry.script))
    return parts, scripts


def truncation_html(truncation: Truncation) -> str | None:
    """The context-length section: the geometry per length, and pairs that are near-duplicates only when cut."""
    if not truncation.per_length:
        return None
    return figure_div(figures.truncation_figure(truncation), TRUNCATION_FIGURE_ID) + truncation_pairs_html(truncation)


def gamma_html(gamma: Gamma) -> str | None:
    """The gamma diagnostics' figures: the measured sweep first, where one ran, then the rule per batch size."""
    if not gamma.batches:
        return None
    body = figure_div(figures.gamma_figure(gamma), "fig-gamma")
    if gamma.sweep:
        body = figure_div(figures.gamma_sweep_figure(gamma.sweep), GAMMA_SWEEP_FIGURE_ID) + body
    return body


def map_lede(caption_map) -> str:
    """The caption map's lede, which names how many captions `capgeo map` maps."""
    from capgeo.map import DEFAULT_MAX_POINTS

    return ("A 2-D projection of the caption embeddings (as `capgeo map` draws it, which maps up to "
            f"{DEFAULT_MAX_POINTS:,} captions): nearby points are captions the encoder places close together. "
            "Hover a point for its caption; drag to zoom.")


def gamma_caption(gamma: Gamma) -> str:
    """The headline gamma (the measured one when a sweep ran, else the rule's), the caution and the paper's
    sweep. The margin view stays in the JSON and in `capgeo gamma`: beside the headline it read as a
    second suggestion."""
    headline = gamma.headline
    suggestion = headline.suggestion
    low, high = suggestion.range
    parts = []
    if gamma.sweep:
        from capgeo.findings.gamma_sweep import measured_headline

        sweep = gamma.sweep
        proxy = "a caption-caption proxy, not image-text retrieval" if sweep["mode"] != "image-text" else "image-text"
        parts.append(f"Gamma {measured_headline(sweep)}: the best held-out mean R@1 of a short proxy fine-tune at "
                     f"each gamma (first figure; {proxy}); the rule's suggestion is "
                     f"{sweep['rule_position'] or 'not among its gammas'}. The rule's instant estimate, from the "
                     "geometry alone:")
    parts += [f"{'Suggested' if not gamma.sweep else 'rule'} gamma {suggestion.gamma:.2f} (range {low:.2f}-{high:.2f}) "
              f"at B={headline.batch_size}, the headline batch size; other rows are extra batch sizes.",
              headline.why or ""]
    if gamma.paper_sweep_note:
        parts.append(f"Evidence: {gamma.paper_sweep_note}.")
    if gamma.encoder_caution:
        parts.append(f"Caution: {gamma.encoder_caution}")
    parts.append(f"Rule: {_shown(gamma.rule, 'see capgeo docs gamma')}. Logit scale from "
                 f"{_shown(gamma.logit_scale_source, '?')}.")
    return " ".join(part for part in parts if part)


def _shown(value, default: str) -> str:
    """``value``, or ``default`` when the profile does not have it."""
    return default if value is None else value


def _data_fingerprint(dataset: Dataset) -> str:
    """The data file's sha256; captions built in memory (a DataFrame, a list) have no file, and their
    texts digest identifies them instead: said so, not "None"."""
    if dataset.fingerprint is None and dataset.texts_digest and "fingerprint" in dataset.nulls:
        return ("none: the captions were built in memory, not read from a file; the caption texts digest "
                "below identifies them")
    return f"<code>{escape(shown_field(dataset, 'fingerprint'))}</code>"


def provenance_rows(profile: Profile, command: str | None, created: str) -> list[tuple[str, str]]:
    dataset = profile.dataset or Dataset()
    encoder = profile.encoder or Encoder()
    provenance = profile.provenance or Provenance()
    options = profile.options.to_dict() if profile.options else {}
    rows = [
        ("Report made with", f"capgeo {escape(__version__)} on {escape(created)}"),
        ("Command to reproduce", f'<pre class="command">{escape(command or "(built from the library)")}</pre>'),
        ("Profile computed", f"capgeo {escape(_shown(provenance.capgeo_version, '?'))} on "
                             f"{escape(_shown(provenance.created, '?'))}"
                             + (f" in {provenance.elapsed_s:.1f} s" if provenance.elapsed_s is not None else "")),
    ]
    if provenance.command:
        rows.append(("Profile command", f'<pre class="command">{escape(provenance.command)}</pre>'))
    rows += [
        ("Data file", f"{escape(_shown(dataset.source, '?'))} ({escape(_shown(dataset.format, '?'))})"),
        ("Data fingerprint (sha256)", _data_fingerprint(dataset)),
        ("Caption texts digest (sha256)", f"<code>{escape(_shown(dataset.texts_digest, '?'))}</code>"),
        ("Encoder", f"{escape(encoder_label(profile))}: {escape(_shown(encoder.kind, '?'))} "
                    f"{escape(_shown(encoder.name, '?'))}, fingerprint "
                    f"<code>{escape(_shown(encoder.fingerprint, '?'))}</code>"),
        ("Profile options", f"<code>{escape(json.dumps(options, sort_keys=True))}</code>"),
    ]
    for name in ("dupes", "gamma", "truncation"):
        if getattr(profile, name):
            rows.append((f"{name} section", "included"))
    return rows


def render_report(profile: Profile, *, command: str | None = None, notes: list[str] | None = None,
                  created: str | None = None) -> str:
    """The whole report for one profile as an HTML string. Past REPORT_PAGE_BYTES, the caption map's
    hover thumbnails give way, the least telling first (capgeo.map.fewer_thumbnails), and the page
    is drawn again."""
    from capgeo.defaults import REPORT_PAGE_BYTES

    created = created or now_utc()
    page = _report_page(profile, command=command, notes=notes, created=created)
    over = len(page.encode("utf-8")) - REPORT_PAGE_BYTES
    if over > 0 and profile.map and profile.map.thumbnails:
        from dataclasses import replace

        from capgeo.map import fewer_thumbnails

        # (a kilobyte more: the line that says how many carry one grows)
        page = _report_page(replace(profile, map=fewer_thumbnails(profile.map, over + 1_000)), command=command,
                            notes=notes, created=created)
    return page


def _report_page(profile: Profile, *, command: str | None, notes: list[str] | None, created: str) -> str:
    dataset = profile.dataset or Dataset()
    title = f"capgeo report: {dataset_label(profile)}"
    subtitle = (f"{dataset.n_captions:,} captions of {_shown(dataset.n_groups, '?'):,} images · "
                f"encoder {encoder_label(profile)} · {created}") if isinstance(dataset.n_captions, int) \
        else f"encoder {encoder_label(profile)} · {created}"
    page = Page(title, subtitle)
    # the first screen: the verdict, then the headline numbers, before any table
    page.sections.append(Section("alerts", "Verdict", alerts_html(profile)))
    page.sections.append(Section("headline", "Headline numbers", headline_html(profile)))
    rows = [(label, escape(value)) for label, value in summary_rows(profile)]
    half = (len(rows) + 1) // 2
    page.sections.append(Section("summary", "Summary", f'<div class="summary-columns">{table(rows[:half])}'
                                                       f'{table(rows[half:])}</div>'))
    page.sections += figure_sections(profile)
    optional, scripts = optional_sections(profile)
    page.sections += optional
    page.scripts += scripts
    missing = missing_notes(profile, notes)
    if profile.batches and not figures.hardest_in_batch_entries(profile.batches):
        missing.append("Hardest negative in a batch: the profile was saved before capgeo recorded the hardest "
                       "in-batch negative's histogram; profile the dataset again to draw it.")
    if profile.lengths and not profile.lengths.counted:
        missing.append("Caption length: the encoder has no tokenizer capgeo can run (precomputed vectors), "
                       "so token counts are unknown.")
    if missing:
        page.sections.append(notes_section(missing))
    page.sections.append(Section("provenance", "Provenance", table(provenance_rows(profile, command, created))))
    return page.render(plotly_javascript())
