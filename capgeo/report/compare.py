"""Several profiles on one page: overlaid distributions, summaries side by side.

Datasets of different sizes compare fairly because every figure draws shares
(per bin, per bucket), never counts; the hardest-companion caveat (it grows
with N) is stated when the Ns differ.
"""

from __future__ import annotations

from collections import Counter
from pathlib import PurePath
from typing import Sequence

from capgeo.geometry.typed_profile import Profile, Provenance
from capgeo.report import figures
from capgeo.report.alerts import alerts_for
from capgeo.report.html import Page, Section, escape, figure_div, notes_section, plotly_javascript, table
from capgeo.report.single import now_utc
from capgeo.report.summary import MISSING, dataset_label, encoder_label, shown, shown_field, summary_rows

#: Element ids of the compare figures, in page order.
COMPARE_FIGURE_IDS = ("fig-compare-cosines", "fig-compare-buckets", "fig-compare-lengths")
#: Drawn only when some profile records the hardest in-batch negative's histogram.
COMPARE_OPTIONAL_FIGURE_IDS = ("fig-compare-hardest-negative",)


def profile_labels(profiles: Sequence[Profile]) -> list[str]:
    """One short, unique label per profile: the dataset name, plus the encoder when datasets repeat."""
    datasets = [dataset_label(p) for p in profiles]
    # different files of one name (a/t.txt, b/t.txt): named by as much of their paths as tells them
    # apart; "default (1)" and "default (2)" would not say which is which
    sources = [str((p.dataset.source if p.dataset else None) or "") for p in profiles]
    for name in set(datasets):
        alike = {source for source, label in zip(sources, datasets) if label == name}
        if len(alike) > 1:
            depth = next((depth for depth in range(2, 64)
                          if len({_tail(source, depth) for source in alike}) == len(alike)), None)
            datasets = [_tail(source, depth) if label == name and depth else label
                        for source, label in zip(sources, datasets)]
    encoders = [encoder_label(p) for p in profiles]
    labels = []
    for dataset, encoder in zip(datasets, encoders):
        repeated_dataset = len({e for d, e in zip(datasets, encoders) if d == dataset}) > 1
        single_dataset_many_encoders = len(set(datasets)) == 1 and len(set(encoders)) > 1
        labels.append(f"{dataset} · {encoder}" if repeated_dataset and not single_dataset_many_encoders
                      else encoder if single_dataset_many_encoders else dataset)
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        seen[label] += 1
        unique.append(label if labels.count(label) == 1 else f"{label} ({seen[label]})")
    return unique


def _tail(path: str, parts: int) -> str:
    """The last ``parts`` components of a path, as written."""
    return "/".join(PurePath(path).parts[-parts:])


def compare_table(profiles: Sequence[Profile], labels: Sequence[str]) -> str:
    """Rows matched by label across profiles (batch sizes may differ); missing cells say so."""
    all_rows = [summary_rows(p) for p in profiles]
    per_profile = [dict(rows) for rows in all_rows]
    order: list[str] = []
    for rows in all_rows:
        for label, _ in rows:
            if label not in order:
                order.append(label)
    head = "<tr><th></th>" + "".join(f"<th>{escape(label)}</th>" for label in labels) + "</tr>"
    body = "".join(
        f"<tr><th>{escape(row)}</th>" + "".join(f'<td class="num">{escape(rows.get(row, MISSING))}</td>'
                                                for rows in per_profile) + "</tr>"
        for row in order)
    return f'<div class="scroll"><table class="compare"><thead>{head}</thead><tbody>{body}</tbody></table></div>'


def compare_alerts(profiles: Sequence[Profile], labels: Sequence[str]) -> str:
    parts = []
    for label, profile in zip(labels, profiles):
        alerts = alerts_for(profile)
        items = "".join(f'<li class="{escape(a.level)}" data-alert="{escape(a.key)}"><strong>{escape(a.title)}</strong>'
                        f"{escape(a.message)}</li>" for a in alerts) or '<li class="notice">No alert fired.</li>'
        parts.append(f"<h3>{escape(label)}</h3><ul class=\"alerts\">{items}</ul>")
    return "".join(parts)


def provenance_table(profiles: Sequence[Profile], labels: Sequence[str], command: str | None, created: str) -> str:
    from capgeo import __version__

    rows = [("Report made with", f"capgeo {escape(__version__)} on {escape(created)}"),
            ("Command to reproduce", f'<pre class="command">{escape(command or "(built from the library)")}</pre>')]
    for label, profile in zip(labels, profiles):
        dataset, encoder = profile.dataset, profile.encoder
        provenance = profile.provenance or Provenance()
        rows.append((label, f"{escape(shown(dataset.source))}, sha256 <code>{escape(shown_field(dataset, 'fingerprint'))}</code>; "
                            f"encoder {escape(encoder_label(profile))} (<code>{escape(shown_field(encoder, 'fingerprint'))}</code>); "
                            f"profiled {escape(shown(provenance.created))} with capgeo "
                            f"{escape(shown(provenance.capgeo_version))}"
                            + (f'<pre class="command">{escape(provenance.command)}</pre>' if provenance.command else "")))
    return table(rows)


def render_compare(profiles: Sequence[Profile], *, labels: Sequence[str] | None = None, command: str | None = None,
                   created: str | None = None, notes: Sequence[str] = ()) -> str:
    """The compare page for two or more profiles as an HTML string; ``notes`` (what was adapted or
    left out while profiling a dataset) are listed before the provenance."""
    from capgeo.errors import CapgeoError

    if len(profiles) < 2:
        raise CapgeoError(f"compare needs at least two profiles, got {len(profiles)}")
    labels = list(labels) if labels else profile_labels(profiles)
    if len(labels) != len(profiles):
        raise CapgeoError(f"compare: {len(labels)} labels for {len(profiles)} profiles")
    created = created or now_utc()
    page = Page("capgeo compare: " + " vs ".join(labels), f"{len(profiles)} profiles · {created}")
    page.sections.append(Section("summary", "Side by side", compare_table(profiles, labels)))
    # a profile without a companion section (a gamma result) has no N to differ by
    sizes = {p.hardest_companion.count for p in profiles if p.hardest_companion} - {None}
    lead = ("Shares per 0.01 bin, so datasets of different sizes overlay. Dotted: all pairs of different images; "
            "solid: each caption's hardest companion; dashed verticals: means.")
    if len(sizes) > 1:
        lead += (" The datasets have different numbers of captions; a caption's hardest companion grows with N, "
                 "so compare hardest-companion cosines with that in mind (or profile equal --limit slices).")
    series = [(label, p.pairwise, p.hardest_companion) for label, p in zip(labels, profiles)]
    page.sections.append(Section("distributions", "Pairwise and hardest-companion cosine",
                                 figure_div(figures.cosine_distribution_figure(series), "fig-compare-cosines"), lead))
    in_batch = [(label, p.hardest_companion, p.batches) for label, p in zip(labels, profiles)
                if figures.hardest_in_batch_entries(p.batches)]
    if in_batch:
        page.sections.append(Section(
            "hardest-negative", "Hardest negative in a batch",
            figure_div(figures.hardest_negative_figure(in_batch), "fig-compare-hardest-negative"),
            "Each caption's hardest negative in random batches of each profile's headline batch size (dashed; the "
            "entry HN-CLIP's Gbar boosts most) beside its hardest companion in the whole dataset (solid)"
            + ("; profiles saved before capgeo recorded it are left out." if len(in_batch) < len(profiles) else ".")))
    buckets = [(label, p.batches) for label, p in zip(labels, profiles)]
    page.sections.append(Section("buckets", "In-batch negatives by hardness",
                                 figure_div(figures.bucket_composition_figure(buckets), "fig-compare-buckets"),
                                 "Share of in-batch negatives per caption-cosine bucket, per profile and batch size "
                                 "(HN-CLIP's Figure A6C)."))
    # precomputed vectors have no tokenizer: their lengths section says so (known: false) and is not drawn
    lengths = [(label, p.lengths if p.lengths and p.lengths.histogram and p.lengths.counted else None)
               for label, p in zip(labels, profiles)]
    if any(l for _, l in lengths):
        page.sections.append(Section("lengths", "Caption length",
                                     figure_div(figures.length_overlay_figure(lengths), "fig-compare-lengths"),
                                     "Token counts with each encoder's own tokenizer; dashed: each context limit."))
    page.sections.append(Section("alerts", "Alerts per profile", compare_alerts(profiles, labels)))
    if notes:
        page.sections.append(notes_section(notes))
    page.sections.append(Section("provenance", "Provenance", provenance_table(profiles, labels, command, created)))
    return page.render(plotly_javascript())
