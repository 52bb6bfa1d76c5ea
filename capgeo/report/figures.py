"""Plotly figures of a profile, one builder per figure, each taking sections of it.

Every builder reads only sections of the profile (docs/profile-schema.md): typed ones
(capgeo.geometry.typed_profile: Lengths, Distribution, BatchStatistics), read from their
JSON objects when given those; the gamma and truncation sections and a batch's buckets
and example matrix stay read-only mappings (one builder each reads them). Each returns a ``plotly.graph_objects.Figure``; it never needs embeddings, so a
saved profile can be drawn without recomputing anything. Builders that overlay
several datasets take a list of ``(label, section)`` pairs and draw shares, not
counts, so datasets of different sizes sit on one axis.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from capgeo.defaults import GAMMA_HARD_EDGE
from capgeo.display import short_id
from capgeo.geometry.typed_profile import (BatchExample, BatchStatistics, Buckets, Distribution, Gamma, Histogram, Lengths,
                                           Truncation)

#: Colours per dataset in overlays (plotly's default qualitative palette).
PALETTE = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880")
#: Bucket colours, easiest (light) to hardest (dark red).
BUCKET_COLOURS = ("#c6dbef", "#6baed6", "#fdae6b", "#e6550d", "#a63603", "#7f2704")
#: Cosine histograms are re-binned to this width for display (the profile's bins are finer).
DISPLAY_BIN_WIDTH = 0.01

_LAYOUT = dict(template="plotly_white", margin=dict(l=70, r=30, t=60, b=60), height=420,
               font=dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size=13))


def plotly_text(text: object) -> str:
    """A user's string (a label, a dataset name, a caption id) as plotly text that shows it literally.

    Plotly reads its own HTML subset (``<br>``, ``<i>``, ``<a>``, entities) in trace names,
    annotations, tick labels and hover text, and ``%{...}`` in hover templates; ``&`` and
    ``<``/``>`` become entities and ``%`` a numeric one, which plotly turns back into the
    characters after both have been read.
    """
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("%", "&#37;")


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def rebin(histogram: Histogram, width: float = DISPLAY_BIN_WIDTH) -> tuple[np.ndarray, np.ndarray]:
    """Merge a fine ``{"edges", "counts"}`` histogram into bins about ``width`` wide.

    Returns (edges, counts) of the merged histogram, trimmed to the bins that hold
    values; counts are preserved exactly (merging only sums adjacent bins).
    """
    edges = np.asarray(histogram.edges, dtype=np.float64)
    counts = np.asarray(histogram.counts, dtype=np.float64)
    if counts.size == 0 or counts.sum() == 0:
        return edges[:1], counts[:0]
    fine_width = float(np.min(np.diff(edges)))
    factor = max(1, int(round(width / fine_width)))
    # profiles keep only the fine bins their values reach, so each histogram starts somewhere else:
    # pad the front with empty fine bins back to a multiple of ``width``, so merged edges sit on one
    # grid (0.29, 0.30, ...) for every histogram and every dataset
    below = np.floor(edges[0] / width + 1e-9) * width
    lead = (edges[0] - below) / fine_width
    if abs(lead - round(lead)) < 1e-6 and round(lead) < factor:
        lead = int(round(lead))
        edges = np.concatenate([edges[0] - fine_width * np.arange(lead, 0, -1), edges])
        counts = np.concatenate([np.zeros(lead), counts])
    nonzero = np.flatnonzero(counts)
    # keep whole merged bins that hold values; the tail is padded with empty fine bins to a whole bin
    first = (nonzero[0] // factor) * factor
    last = (nonzero[-1] // factor + 1) * factor
    pad = max(0, last - counts.size)
    if pad:
        counts = np.concatenate([counts, np.zeros(pad)])
        edges = np.concatenate([edges, edges[-1] + fine_width * np.arange(1, pad + 1)])
    merged = counts[first:last].reshape(-1, factor).sum(axis=1)
    return edges[first:last + 1:factor], merged


def caption_length_figure(lengths: Lengths, title: str = "Caption length in tokens") -> go.Figure:
    """Histogram of untruncated token counts with the context limit marked."""
    edges = np.asarray(lengths.histogram.edges, dtype=np.float64)
    counts = np.asarray(lengths.histogram.counts, dtype=np.float64)
    centres = (edges[:-1] + edges[1:]) / 2
    widths = np.diff(edges)
    limit = context_limit(lengths)
    colours = ["#e6550d" if limit is not None and left >= limit else "#636efa" for left in edges[:-1]]
    figure = go.Figure(go.Bar(
        x=centres, y=counts, width=widths, marker_color=colours, name="captions",
        customdata=np.stack([edges[:-1], edges[1:]], axis=1),
        hovertemplate="%{customdata[0]:.0f}-%{customdata[1]:.0f} tokens: %{y:,} captions<extra></extra>",
    ))
    # the axis ends near the longest caption (13-token captions were drawn on an axis to 350); the context
    # limit is marked when it lies within reach of the data, else the title says where it is
    filled = np.flatnonzero(counts)
    end = float(edges[filled[-1] + 1]) if filled.size else float(edges[-1])
    marked = limit is not None and limit <= LIMIT_REACH * end
    if marked:
        end = max(end, float(limit))
        share = lengths.share_truncated
        note = f"context limit {limit} tokens"
        if share is not None:
            note += f": {_pct(share)} of captions are cut"
        figure.add_vline(x=limit, line=dict(color="#a63603", width=2, dash="dash"),
                         annotation=dict(text=note, font=dict(color="#a63603")),
                         annotation_position="top left" if limit > 0.6 * end else "top right")
    elif limit is not None:
        title += f" (context limit {limit} tokens, beyond the longest caption: none is cut)"
    figure.update_layout(title=title, xaxis_title="caption length (tokens, start/end included)",
                         yaxis_title="captions (count)", bargap=0.02, showlegend=False, **_LAYOUT)
    figure.update_xaxes(range=[float(edges[0]), end + 0.03 * (end - float(edges[0]))])
    figure.update_yaxes(range=[0, HEADROOM * float(counts.max(initial=0) or 1)])
    return figure


#: the caption-length axis reaches out to the context limit when it lies within this multiple of the longest
#: caption's bin edge
LIMIT_REACH = 1.5


def context_limit(lengths: Lengths) -> int | None:
    """The token count past which captions were cut: the profile's --max-tokens, else the context."""
    return lengths.max_tokens or lengths.context_length


#: the y-axis reaches this multiple of the tallest value, so labels at the top of a line sit above the data
HEADROOM = 1.25


def _share_steps(summary: Distribution) -> tuple[np.ndarray, np.ndarray] | None:
    """A distribution's display histogram as step-line points (x, share per display bin in %)."""
    if not summary or not summary.histogram:
        return None
    edges, counts = rebin(summary.histogram)
    if counts.size == 0:
        return None
    shares = counts / counts.sum()
    return np.repeat(edges, 2)[1:-1], np.repeat(100 * shares, 2)


def _distribution_lines(figure: go.Figure, lines: Sequence[tuple[str, Distribution, str, str, bool]],
                        labelled_means: bool) -> float:
    """Draw ``(name, summary, colour, dash, fill)`` step lines with their means dashed; returns the tallest share.

    ``labelled_means``: print each mean beside its line (one or two lines: the first left of its mean, the
    others right of theirs, a row lower each). With more lines the mean goes into the legend instead,
    where labels of close means cannot print over each other.
    """
    tallest = 0.0
    drawn: list[tuple[float, str]] = []
    for name, summary, colour, dash, fill in lines:
        steps = _share_steps(summary)
        if steps is None:
            continue
        x, y = steps
        tallest = max(tallest, float(y.max()))
        mean = summary.mean
        shown = name if labelled_means or mean is None else f"{name} (mean {mean:.3f})"
        figure.add_trace(go.Scatter(
            x=x, y=y, mode="lines", name=shown, line=dict(color=colour, width=2, dash=dash),
            fill="tozeroy" if fill else None, opacity=0.9,
            hovertemplate=f"{shown}<br>cosine %{{x:.3f}}<br>%{{y:.2f}}% per {DISPLAY_BIN_WIDTH} bin<extra></extra>",
        ))
        if mean is not None:
            figure.add_vline(x=mean, line=dict(color=colour, width=1.5, dash="dash"))
            drawn.append((mean, colour))
    if labelled_means:
        for row, (mean, colour) in enumerate(drawn):
            figure.add_annotation(x=mean, y=1 - 0.07 * max(0, row - 1), xref="x", yref="paper",
                                  text=f"mean {mean:.3f}", showarrow=False, xanchor="right" if row == 0 else "left",
                                  yanchor="top", font=dict(color=colour, size=11))
    return tallest


def _distribution_layout(figure: go.Figure, title: str, tallest: float) -> go.Figure:
    figure.update_layout(title=title, xaxis_title="caption-caption cosine similarity",
                         yaxis_title=f"share of values per {DISPLAY_BIN_WIDTH} bin (%)",
                         legend=dict(orientation="h", y=-0.2), **_LAYOUT)
    figure.update_yaxes(range=[0, HEADROOM * (tallest or 1)])
    return figure


def cosine_distribution_figure(series: Sequence[tuple[str, Distribution, Distribution]],
                               title: str = "Caption cosine: all pairs vs hardest companion") -> go.Figure:
    """Distribution of all negative pairwise cosines and of hardest-companion cosines, means marked.

    ``series`` holds ``(label, pairwise_summary, hardest_companion_summary)``; one entry
    gives the HN-CLIP Figure 1 view, several overlay datasets or encoders (dotted: all
    pairs, solid: hardest companion, each mean in the legend). The y-axis is the share of
    values per display bin, so datasets with different N are comparable.
    """
    figure = go.Figure()
    overlay = len(series) > 1
    lines = []
    for index, (label, pairwise, hardest) in enumerate(series):
        label = plotly_text(label)
        colour = PALETTE[index % len(PALETTE)]
        for kind, summary, dash, single_colour in (("all pairs", pairwise, "dot", "#636efa"),
                                                   ("hardest companion", hardest, "solid", "#ef553b")):
            if overlay:
                lines.append((f"{label}: {kind}", summary, colour, dash, False))
            else:
                lines.append((kind, summary, single_colour, "solid", True))
    return _distribution_layout(figure, title, _distribution_lines(figure, lines, labelled_means=not overlay))


def hardest_in_batch_entries(batches: Sequence[BatchStatistics] | None) -> list[BatchStatistics]:
    """The batch entries whose hardest in-batch negative has a histogram (profiles saved before
    capgeo recorded it have only its summary), headline batch size first."""
    return [entry for entry in batches or ()
            if entry.hardest_in_batch and entry.hardest_in_batch.histogram]


def hardest_negative_figure(series: Sequence[tuple[str, Distribution | None, Sequence | None]],
                            headline_only: bool | None = None,
                            title: str = "Hardest negative: in a training batch vs in the whole dataset") -> go.Figure:
    """Each caption's hardest in-batch negative (the entry HN-CLIP's Gbar boosts most) beside its
    hardest companion in the whole dataset.

    ``series`` holds ``(label, hardest_companion_summary, batches_section)``. One dataset draws
    every batch size; several (``headline_only``, the default for more than one) draw each one's
    headline batch size, coloured per dataset: solid the hardest companion, dashed the hardest in-batch
    negative. Shares per display bin, so datasets of different sizes sit on one axis.
    """
    overlay = len(series) > 1
    headline_only = overlay if headline_only is None else headline_only
    in_batch_dashes = ("dash", "dot", "dashdot", "longdash")
    lines = []
    for index, (label, hardest, batches) in enumerate(series):
        label = plotly_text(label)
        colour = PALETTE[index % len(PALETTE)]
        entries = hardest_in_batch_entries(batches)[:1 if headline_only else None]
        prefix = f"{label}: " if overlay else ""
        lines.append((f"{prefix}hardest companion (dataset)", hardest, colour if overlay else "#ef553b", "solid",
                      not overlay))
        for number, entry in enumerate(entries):
            lines.append((f"{prefix}hardest in-batch negative, B={entry.batch_size}", entry.hardest_in_batch,
                          colour if overlay else PALETTE[(number + 2) % len(PALETTE)],
                          in_batch_dashes[number % len(in_batch_dashes)] if overlay else "solid", False))
    figure = go.Figure()
    tallest = _distribution_lines(figure, lines, labelled_means=False)
    return _distribution_layout(figure, title, tallest)


def _level_name(level: float) -> str:
    return f"p{100 * level:g}"


def bucket_names(buckets: Buckets) -> list[str]:
    """Display names of a bucket composition. Relative buckets are named by their quantile levels
    ("p50-p90"), which mean the same thing for every dataset; absolute ones by their cosine labels."""
    levels = buckets.quantile_levels
    if buckets.kind == "relative" and levels:
        names = [_level_name(level) for level in levels]
        return [f"< {names[0]}"] + [f"{a}-{b}" for a, b in zip(names, names[1:])] + [f">= {names[-1]}"]
    return [f"cosine {label}" for label in buckets.labels]


def bucket_composition_figure(series: Sequence[tuple[str, Sequence[BatchStatistics]]], kind: str = "buckets",
                              title: str = "In-batch negatives by hardness bucket") -> go.Figure:
    """Stacked bars: share of in-batch negatives in each cosine bucket, per batch size.

    ``series`` holds ``(label, batches_section)``; ``kind`` picks ``"buckets"`` (absolute
    cosine edges) or ``"relative_buckets"`` (edges at the dataset's own pairwise quantiles).
    Bars are labelled ``B=128`` for one dataset and ``label · B=128`` for several. Buckets
    are matched by name, so profiles with different edges still draw.
    """
    overlay = len(series) > 1
    names: list[str] = []
    first_range: dict[str, tuple[float, float]] = {}
    bars: list[tuple[str, dict, dict]] = []
    for label, batches in series:
        for entry in batches or ():
            buckets = getattr(entry, kind)
            if not buckets or not buckets.shares:
                continue
            # two lines, so long dataset names stay level instead of turning into the legend
            x_label = f"{plotly_text(label)}<br>B={entry.batch_size}" if overlay else f"B={entry.batch_size}"
            entry_names = bucket_names(buckets)
            edges = [None, *buckets.edges, None]
            ranges = {name: (edges[i], edges[i + 1]) for i, name in enumerate(entry_names)}
            bars.append((x_label, dict(zip(entry_names, buckets.shares)), ranges))
            for name in entry_names:
                if name not in names:
                    names.append(name)
                    low, high = ranges[name]
                    first_range[name] = (-math.inf if low is None else low, math.inf if high is None else high)
    # stacked and coloured easiest (lowest cosines, lightest) to hardest whatever order the profiles
    # named them in: profiles with other --buckets put their "<0.8" on top in the hardest colour
    names.sort(key=first_range.__getitem__)
    figure = go.Figure()
    for index, name in enumerate(names):
        colour = BUCKET_COLOURS[min(index, len(BUCKET_COLOURS) - 1)] if len(names) <= len(BUCKET_COLOURS) \
            else PALETTE[index % len(PALETTE)]
        shares = [100 * shares_by_name.get(name, 0.0) for _, shares_by_name, _ in bars]
        cosine_ranges = []
        for _, _, ranges in bars:
            low, high = ranges.get(name, (None, None))
            cosine_ranges.append(("" if low is None else f"{low:.3f}") + " to " + ("" if high is None else f"{high:.3f}"))
        figure.add_trace(go.Bar(
            x=[x for x, _, _ in bars], y=shares, name=name, marker_color=colour, customdata=cosine_ranges,
            text=[f"{s:.0f}%" if s >= 4 else "" for s in shares], textposition="inside",
            hovertemplate=f"%{{x}}<br>{name} (cosine %{{customdata}}): %{{y:.1f}}% of negatives<extra></extra>",
        ))
    figure.update_layout(title=title, barmode="stack", xaxis_title="batch size (captions per batch)",
                         yaxis_title="share of in-batch negatives (%)", yaxis_range=[0, 100],
                         legend=dict(traceorder="normal", title=dict(text="bucket")), **_LAYOUT)
    figure.update_xaxes(tickangle=0, automargin=True)
    return figure


def largest_off_diagonal(matrix: np.ndarray) -> tuple[int, int, float]:
    """(row, column, value) of the largest finite off-diagonal entry of a square matrix."""
    values = np.array(matrix, dtype=np.float64)
    np.fill_diagonal(values, -np.inf)
    values[~np.isfinite(values)] = -np.inf
    row, column = np.unravel_index(int(np.argmax(values)), values.shape)
    return int(row), int(column), float(values[row, column])


#: characters of a caption id in the batch matrix's label (the hover shows it whole)
SHORT_ID = 24


def _short(caption_id: str) -> str:
    return caption_id if len(caption_id) <= SHORT_ID else caption_id[:SHORT_ID - 1] + "…"


def batch_heatmap_figure(example: BatchExample, batch_size: int | None = None,
                         title: str = "One real batch: caption-caption cosine") -> go.Figure:
    """Heatmap of one real batch's caption-similarity matrix, largest off-diagonal value annotated.

    ``example`` is a ``batches[i].example`` section: ``cosine`` nested lists with ``null``
    on the diagonal, and ``caption_ids`` for the hover text.
    """
    matrix = np.array([[np.nan if value is None else value for value in row] for row in example.cosine],
                      dtype=np.float64)
    size = matrix.shape[0]
    # hash ids (sha256:<64 hex>#3) shortened: whole, they spilled over the heatmap
    ids = [plotly_text(short_id(i)) for i in (range(size) if example.caption_ids is None else example.caption_ids)]
    # each row and column named "index · id" on category axes, so the hover reads both from the axes: a
    # text per cell (B x B strings) would add 0.6 MB to a 128-caption batch's page
    labels = [f"{index} · {caption_id}" for index, caption_id in enumerate(ids)]
    figure = go.Figure(go.Heatmap(
        z=matrix, x=labels, y=labels, colorscale="Viridis", colorbar=dict(title=dict(text="cosine")),
        hovertemplate="row %{y}<br>column %{x}<br>cosine %{z:.3f}<extra></extra>", hoverongaps=False,
    ))
    if size >= 2 and np.isfinite(matrix).any():
        row, column, value = largest_off_diagonal(matrix)
        # the label sits in the quarter of the matrix across from the cell, its arrow pointing back: near an
        # edge a label beside the cell ran over the matrix's edge and onto the colour bar
        figure.add_annotation(x=column, y=row, text=f"max {value:.3f}<br>{_short(ids[row])}<br>× {_short(ids[column])}",
                              showarrow=True, arrowhead=2, arrowcolor="#ffffff", axref="x", ayref="y",
                              ax=(0.25 if column >= size / 2 else 0.75) * (size - 1),
                              ay=(0.25 if row >= size / 2 else 0.75) * (size - 1),
                              font=dict(color="#ffffff", size=12), bgcolor="rgba(0,0,0,0.6)")
    shown = f" (first {size} of B={batch_size})" if batch_size and batch_size > size else ""
    layout = dict(_LAYOUT, height=560)
    figure.update_layout(title=title + shown, xaxis_title="caption in batch (hover for index and id)",
                         yaxis_title="caption in batch (hover for index and id)", **layout)
    # fixed ranges: the wide "max" label would otherwise stretch the autorange past the matrix
    figure.update_yaxes(range=[size - 0.5, -0.5], scaleanchor="x", constrain="domain", type="category",
                        showticklabels=False)
    figure.update_xaxes(range=[-0.5, size - 0.5], constrain="domain", type="category", showticklabels=False)
    return figure


def gamma_figure(gamma: Gamma, title: str = "Gamma sweep: how HN-CLIP's boost concentrates the softmax") -> go.Figure:
    """The gamma section's grid diagnostics per batch size, the suggestion and its range marked.

    Left: the effective number of negatives as a share of B-1 (the quantity the rule
    matches to the paper's default; its target is the dotted line) and the softmax mass
    on the hardest bucket. Right: the logit boost s*gamma*G for a median and for the
    hardest in-batch negative.
    """
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "softmax concentration over in-batch negatives", "logit boost s·γ·G"))
    targets: set[float] = set()
    for index, entry in enumerate(gamma.batches or ()):
        grid = entry.grid or ()
        if not grid:
            continue
        colour = PALETTE[index % len(PALETTE)]
        gammas = [point.gamma for point in grid]
        label = f"B={entry.batch_size}"
        figure.add_trace(go.Scatter(x=gammas, y=[100 * p.effective_share for p in grid], mode="lines+markers",
                                    name=f"{label}: effective negatives (% of B-1)", line=dict(color=colour),
                                    hovertemplate="γ=%{x}<br>effective negatives %{y:.1f}% of B-1<extra></extra>"),
                         row=1, col=1)
        if _grid_has(grid, "hard_bucket_mass"):
            figure.add_trace(go.Scatter(x=gammas, y=[100 * p.hard_bucket_mass for p in grid], mode="lines+markers",
                                        name=f"{label}: softmax mass on cosine >= {_or(gamma.hard_edge, GAMMA_HARD_EDGE)} (%)",
                                        line=dict(color=colour, dash="dash"),
                                        hovertemplate="γ=%{x}<br>mass on hardest bucket %{y:.1f}%<extra></extra>"),
                             row=1, col=1)
        for key, name, dash in (("boost_median", "median negative", "dot"), ("boost_hardest", "hardest negative", "solid")):
            if not _grid_has(grid, key):
                continue
            figure.add_trace(go.Scatter(x=gammas, y=[getattr(p, key) for p in grid], mode="lines", name=f"{label}: boost, {name}",
                                        line=dict(color=colour, dash=dash),
                                        hovertemplate="γ=%{x}<br>boost %{y:.1f} logits<extra></extra>"),
                             row=1, col=2)
        target = entry.suggestion.target_share if entry.suggestion else None
        if target is not None and target not in targets:  # batch sizes share it: one line, one label
            targets.add(target)
            figure.add_hline(y=100 * target, line=dict(color="#888", dash="dot", width=1), row=1, col=1,
                             annotation=dict(text=f"target (paper default): {100 * target:.0f}%", font=dict(size=10)),
                             annotation_position="bottom left")
    suggested = gamma.suggested_gamma
    suggested_range = gamma.suggested_range
    for column in (1, 2):
        if suggested_range and None not in suggested_range and suggested_range[1] > suggested_range[0]:
            figure.add_vrect(x0=suggested_range[0], x1=suggested_range[1], fillcolor="#2ca02c", opacity=0.08,
                             line_width=0, row=1, col=column)
        if suggested is not None:
            figure.add_vline(x=suggested, line=dict(color="#2ca02c", width=2), row=1, col=column,
                             annotation=dict(text=f"suggested γ = {suggested:.2f}", font=dict(color="#2ca02c")),
                             annotation_position="top right")
    scale = gamma.logit_scale
    layout = dict(_LAYOUT, height=460)
    figure.update_layout(title=title + (f" (s = {scale:g})" if scale else ""),
                         legend=dict(orientation="h", y=-0.25), **layout)
    figure.update_xaxes(title_text="gamma (γ)")
    figure.update_yaxes(title_text="share (%)", range=[0, 100], row=1, col=1)
    figure.update_yaxes(title_text="boost (logits)", row=1, col=2)
    return figure


def gamma_sweep_figure(sweep, title: str = "Measured gamma: the proxy fine-tune sweep") -> go.Figure:
    """``--sweep``'s result (the gamma section's ``sweep``). Left: held-out mean R@1 per
    gamma, mean and standard deviation over seeds, the plateau shaded and the rule's suggestion marked.
    Right: the saturation along the run for gamma 0 and the best gamma, per step: the share of
    batches with loss below 1e-3 and of negative logits with an exactly zero fp32 gradient."""
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "held-out mean R@1 (both directions)", "saturation along the run"))
    points = sweep["points"]
    figure.add_trace(go.Scatter(
        x=[p["gamma"] for p in points], y=[p["mean"]["mean_r1"] for p in points], mode="lines+markers",
        error_y=dict(type="data", array=[p["spread"]["mean_r1"] for p in points], visible=True),
        name="mean R@1 (+- sd over seeds)", line=dict(color=PALETTE[0]),
        hovertemplate="γ=%{x}<br>mean R@1 %{y:.2f}%<extra></extra>"), row=1, col=1)
    before = sweep["before"]["mean_r1"]
    figure.add_hline(y=before, line=dict(color="#888", dash="dot", width=1), row=1, col=1,
                     annotation=dict(text=f"before training: {before:.1f}", font=dict(size=10)),
                     annotation_position="bottom right")
    plateau = sweep["plateau"]
    if len(plateau) > 1:
        figure.add_vrect(x0=min(plateau), x1=max(plateau), fillcolor="#2ca02c", opacity=0.08, line_width=0,
                         row=1, col=1)
    figure.add_vline(x=sweep["measured_gamma"], line=dict(color="#2ca02c", width=2), row=1, col=1,
                     annotation=dict(text=f"measured γ = {sweep['measured_gamma']:g}", font=dict(color="#2ca02c")),
                     annotation_position="top right")
    if sweep["rule_gamma"] is not None:
        figure.add_vline(x=sweep["rule_gamma"], line=dict(color="#888", dash="dash", width=1), row=1, col=1,
                         annotation=dict(text=f"rule: {sweep['rule_gamma']:g}", font=dict(size=10)),
                         annotation_position="bottom left")
    for index, curve in enumerate(sweep["saturation"]):
        colour = PALETTE[(index + 1) % len(PALETTE)]
        steps = list(range(1, len(curve["loss_below"]) + 1))
        for key, name, dash in (("loss_below", f"loss < {sweep['saturated_loss']:g}", "solid"),
                                ("zero_gradients", "zero fp32 negative gradients", "dot")):
            figure.add_trace(go.Scatter(x=steps, y=[100 * v for v in curve[key]], mode="lines",
                                        name=f"γ={curve['gamma']:g}: {name} (%)", line=dict(color=colour, dash=dash),
                                        hovertemplate="step %{x}<br>%{y:.1f}%<extra></extra>"), row=1, col=2)
    label = "caption-caption proxy" if sweep["mode"] != "image-text" else "image-text"
    figure.update_layout(title=f"{title} ({label}, {len(sweep['seeds'])} seeds, {sweep['steps']} steps)",
                         legend=dict(orientation="h", y=-0.25), **dict(_LAYOUT, height=440))
    figure.update_xaxes(title_text="gamma (γ)", row=1, col=1)
    figure.update_xaxes(title_text="step", row=1, col=2)
    figure.update_yaxes(title_text="R@1 (%)", row=1, col=1)
    figure.update_yaxes(title_text="share (%)", range=[0, 100], row=1, col=2)
    return figure


def _grid_has(grid, key: str) -> bool:
    """Whether the gamma grid's points carry ``key`` (profiles saved before it was recorded lack it)."""
    return getattr(grid[0], key) is not None


def _or(value, default):
    """``value``, or ``default`` when the profile does not have it."""
    return default if value is None else value


def length_overlay_figure(series: Sequence[tuple[str, Lengths | None]],
                          title: str = "Caption length in tokens, per dataset/encoder") -> go.Figure:
    """Token-count distributions of several profiles as shares per bin, each context limit marked
    (once per distinct limit, naming the profiles it applies to)."""
    figure = go.Figure()
    limits: dict[int, list[tuple[str, str]]] = {}
    for index, (label, lengths) in enumerate(series):
        if not lengths or not lengths.histogram:
            continue
        label = plotly_text(label)
        colour = PALETTE[index % len(PALETTE)]
        edges = np.asarray(lengths.histogram.edges, dtype=np.float64)
        counts = np.asarray(lengths.histogram.counts, dtype=np.float64)
        total = counts.sum() or 1.0
        # share per token (not per bin): profiles bin lengths differently
        density = 100 * counts / total / np.diff(edges)
        figure.add_trace(go.Scatter(x=np.repeat(edges, 2)[1:-1], y=np.repeat(density, 2), mode="lines", name=label,
                                    line=dict(color=colour, width=2),
                                    hovertemplate=f"{label}<br>%{{x:.0f}} tokens: %{{y:.2f}}% per token<extra></extra>"))
        limit = context_limit(lengths)
        if limit is not None:
            limits.setdefault(limit, []).append((label, colour))
    for limit, users in limits.items():
        colour = users[0][1] if len(users) == 1 else "#555"
        names = ", ".join(label for label, _ in users) if len(users) < len(series) else "all"
        figure.add_vline(x=limit, line=dict(color=colour, width=1.5, dash="dash"),
                         annotation=dict(text=f"context limit {limit} ({names})", font=dict(color=colour, size=10)),
                         annotation_position="top right")
    figure.update_layout(title=title, xaxis_title="caption length (tokens, start/end included)",
                         yaxis_title="share of captions per token (%)", legend=dict(orientation="h", y=-0.2),
                         **_LAYOUT)
    return figure


def truncation_figure(truncation: Truncation,
                      title: str = "What the context length does to the geometry") -> go.Figure:
    """Per maximum token length L (log x): negative and hardest-companion cosine, and
    near-duplicate pairs (all, and those that exist only because captions were cut)."""
    from plotly.subplots import make_subplots

    entries = truncation.per_length or ()
    lengths = [entry.max_tokens for entry in entries]
    cut = [f"{100 * (entry.share_cut or 0):.1f}% of captions cut" for entry in entries]
    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                           subplot_titles=("caption cosine", "near-duplicate pairs (different images)"))

    def line(values, name, colour, dash="solid", column=1, unit=""):
        figure.add_trace(go.Scatter(x=lengths, y=values, mode="lines+markers", name=name, customdata=cut,
                                    line=dict(color=colour, dash=dash),
                                    hovertemplate=f"L=%{{x}} tokens<br>{name}: %{{y}}{unit}<br>%{{customdata}}<extra></extra>"),
                         row=1, col=column)

    line([e.pairwise.mean if e.pairwise else None for e in entries], "mean negative cosine", PALETTE[0])
    line([e.hardest_companion.quantile("p50") if e.hardest_companion else None for e in entries],
         "hardest companion p50", PALETTE[1])
    line([e.hardest_companion.quantile("p90") if e.hardest_companion else None for e in entries],
         "hardest companion p90", PALETTE[1], "dash")
    line([e.near_duplicates.n_pairs if e.near_duplicates else None for e in entries], "near-duplicate pairs",
         PALETTE[2], column=2)
    line([e.near_duplicates.n_truncation_only if e.near_duplicates else None for e in entries],
         "of which only because of the cut", PALETTE[3], "dash", column=2)
    reference = truncation.reference_length
    if reference is not None:
        for column in (1, 2):
            # plotly.js 3+: shapes on a log axis take data values, annotations take log10 of them
            figure.add_vline(x=reference, line=dict(color="#888", dash="dot"), row=1, col=column)
            figure.add_annotation(x=float(np.log10(reference)), y=0.02, xref=f"x{column if column > 1 else ''}",
                                  yref=f"y{column if column > 1 else ''} domain", text=f"full context {reference} ",
                                  showarrow=False, xanchor="right", yanchor="bottom", font=dict(size=10))
    layout = dict(_LAYOUT, height=440)
    threshold = truncation.threshold
    figure.update_layout(title=title + (f" (near-duplicate: cosine >= {threshold})" if threshold is not None else ""),
                         legend=dict(orientation="h", y=-0.25), **layout)
    tick_values, tick_text = log_axis_ticks(lengths)
    figure.update_xaxes(type="log", title_text="maximum tokens L (log scale)", tickvals=tick_values,
                        ticktext=tick_text)
    figure.update_yaxes(title_text="cosine", row=1, col=1)
    figure.update_yaxes(title_text="pairs (count)", rangemode="tozero", row=1, col=2)
    return figure


#: ticks closer than this on a log axis (in decades; 248 and 256 are 0.014 apart) share one label
MIN_TICK_DECADES = 0.06


def log_axis_ticks(values: Sequence[float]) -> tuple[list[float], list[str]]:
    """Tick positions and labels for a log axis: values too close to label apart (248 and
    256) become one tick at their geometric mean, labelled "248/256"."""
    groups: list[list[float]] = []
    for value in sorted(values):
        if groups and np.log10(value) - np.log10(groups[-1][0]) < MIN_TICK_DECADES:
            groups[-1].append(value)
        else:
            groups.append([value])
    positions = [group[0] if len(group) == 1 else float(np.sqrt(group[0] * group[-1])) for group in groups]
    return positions, ["/".join(f"{value:g}" for value in group) for group in groups]
