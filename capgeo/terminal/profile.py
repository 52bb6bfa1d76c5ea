"""`capgeo profile`'s terminal summary of a typed profile (``Profile.summary()`` gives it as text): the
overview, the cosine and bucket tables, the duplicates, the optional sections that have a terminal
renderer (capgeo.sections), and the verdict last."""

from __future__ import annotations

from capgeo import terminal
from capgeo.display import counted, visible
from capgeo.geometry.typed_profile import BatchStatistics, Gamma, Profile
from capgeo.sections import SECTIONS
from capgeo.terminal import shown


def _mode_text(result: Profile) -> str:
    # precision, bounds and recall are written by one mode each
    pairwise = result.pairwise
    if result.options.mode_used == "exact":
        precision = pairwise.precision
        if not precision:
            return "exact (all pairs)"
        return (f"all pairs, {precision.mode} products: every cosine within +-{precision.cosine_error_bound:.1e} "
                f"of fp32 (measured max {precision.measured_max_error:.1e}; "
                f"{precision.measured_share_of_bins_changed:.2%} of cosines changed histogram bin); "
                f"companions exact")
    bounds = pairwise.bounds
    text = (f"sampled: {bounds.sample_size:,} of {bounds.population:,} negative pairs; "
            f"mean +-{1.96 * bounds.mean_standard_error:.4f}, every share +-{bounds.cdf_epsilon:.4f} "
            f"(95%)")
    recall = result.hardest_companion.recall
    if recall:
        text += f"; faiss companions, recall@1 {recall.recall_at_1:.3f} on {recall.queries:,} captions"
    return text


def _fmt(value, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def print_profile(result: Profile, console=None) -> None:
    """A compact terminal summary of a profile (``Profile.summary()`` gives it as text), ending with
    what it means for training."""
    from rich.table import Table

    console = console or terminal.console()
    dataset, encoder, lengths = result.dataset, result.encoder, result.lengths
    overview = Table(show_header=False, box=None, pad_edge=False)
    overview.add_column(style="bold")
    overview.add_column(overflow="fold")  # a long path wraps, not "…"
    overview.add_row("dataset", f"{shown(dataset.source)} ({dataset.format}): {dataset.n_captions:,} captions, "
                                f"{dataset.n_groups:,} groups")
    overview.add_row("encoder", f"{shown(encoder.name)} ({encoder.kind}, width {encoder.width})")
    if lengths.known:
        overview.add_row("tokens", f"mean {lengths.mean:.1f}, median {lengths.median:g}, "
                                   f"p95 {lengths.p95:.0f}, max {lengths.max}")
        overview.add_row("truncated", f"{lengths.n_truncated:,} ({lengths.share_truncated:.1%}) longer than "
                                      f"{lengths.max_tokens} tokens (context {lengths.context_length})")
    else:
        overview.add_row("tokens", "unknown (precomputed vectors)")
    overview.add_row("mode", _mode_text(result))
    console.print(overview)

    stats = Table(title="Caption cosines", title_justify="left")
    for column in ("", "count", "mean", "std", "p50", "p90", "p99", "max"):
        # numbers never wrap or shorten (a 10-digit pair count read "3,199,920,0…"); the label wraps
        stats.add_column(column, justify="right" if column else "left", no_wrap=bool(column),
                         min_width=None if column else 10)
    for name, key in (("negatives (other images)", "pairwise"), ("same image", "within_group"),
                      ("hardest companion", "hardest_companion")):
        summary = getattr(result, key)
        if not summary:
            continue
        stats.add_row(name, f"{summary.count:,}", _fmt(summary.mean), _fmt(summary.std),
                      _fmt(summary.quantile("p50")), _fmt(summary.quantile("p90")), _fmt(summary.quantile("p99")),
                      _fmt(summary.max))
    console.print(stats)
    console.print(f"[dim]Hardest companion: each caption's most similar caption of another image, "
                  f"over N = {dataset.n_captions:,} captions (it grows with N).[/dim]")

    first_table = None
    for kind in ("buckets", "relative_buckets"):
        entries = [batch for batch in result.batches if getattr(batch, kind)]
        if entries:
            terminal.print_unclipped(console, _bucket_table(entries, kind))
            first_table = first_table or entries[0]
    if first_table:
        from rich.markup import escape

        top = escape((first_table.buckets or first_table.relative_buckets).labels[-1])
        console.print(f"[dim]Per row {top}: in-batch negatives of one caption in the hardest bucket, on average; "
                      f"batches with a pair: share of random batches holding two captions of different images "
                      f"at cosine >= {first_table.near_duplicate.threshold:g} (near-duplicates).[/dim]")

    exact, near = result.exact_duplicates, result.near_duplicates
    console.print(f"[bold]Exact duplicates:[/bold] {counted(exact.n_pairs_cross_group, 'pair')} of identical "
                  f"captions across images, {exact.n_pairs_within_group:,} within one "
                  f"({counted(exact.n_sets, 'text')} {'occurs' if exact.n_sets == 1 else 'occur'} more than once)")
    console.print(f"[bold]Near-duplicates (cosine >= {near.threshold:g}):[/bold] "
                  f"{counted(near.n_pairs_cross_group, 'pair')} across images"
                  f"{_near_duplicate_precision(result, near)}; "
                  f"{counted(near.n_captions_hardest_above, 'caption')} "
                  f"{'has' if near.n_captions_hardest_above == 1 else 'have'} one")
    for entry in SECTIONS:
        entry.print_terminal(result, console)
    print_verdict(result, console)


def print_gamma(gamma: Gamma | None, console, *, profile: Profile) -> None:
    """The summary's gamma line; without a gamma section, why it was left out (when the profile says)."""
    left_out = profile.gamma_left_out
    if left_out:
        from rich.markup import escape

        left_out = escape(left_out)
    if gamma:
        console.print(_gamma_line(gamma, profile))
        if left_out:
            console.print(left_out)
    elif left_out:
        console.print(f"[bold]Suggested gamma:[/bold] none. {left_out}")


#: how each alert level (report/alerts.py: warning or notice) is marked; words, not only colour, so a
#: piped summary keeps them
LEVEL_MARKS = {"warning": ("WARNING", "bold red"), "notice": ("NOTICE", "bold yellow")}


def print_verdict(result: Profile, console) -> None:
    """The report's plain-word alerts (report/alerts.py is their one source), as the last thing printed."""
    from rich.padding import Padding
    from rich.text import Text

    from capgeo.report.alerts import alerts_for

    alerts = alerts_for(result)
    console.print()
    if not alerts:
        console.print(f"[bold]Verdict:[/bold] no alert fired for these captions under "
                      f"{shown(result.encoder.name)}.")
        return
    warnings = sum(alert.level == "warning" for alert in alerts)
    console.print(f"[bold]Verdict:[/bold] {counted(warnings, 'warning')}, {counted(len(alerts) - warnings, 'notice')} "
                  f"for training on these captions")
    for alert in alerts:
        word, style = LEVEL_MARKS[alert.level]
        console.print(Text.assemble((f"{word:<8}", style), (alert.title, "bold")))
        console.print(Padding(Text(visible(alert.message)), (0, 0, 0, 8)))


def _near_duplicate_precision(result: Profile, near) -> str:
    """How exact the near-duplicate pair count is, as the words after it: nothing when exact."""
    if near.count_method == "histogram":
        return f" (to +/- one bin of {near.bin_width:g})"
    if near.count_method == "sampled":
        bounds = result.pairwise.bounds
        spread = bounds.cdf_epsilon * bounds.population
        return f" (estimated from the sampled pairs: +/- {spread:,.0f} pairs, 95%)"
    return ""


def _gamma_line(gamma, result: Profile) -> str:
    """The headline gamma (extra batch sizes after it), where s came from, the paper's sweep and,
    where it applies, the encoder caution, whose full words are the verdict's first WARNING. One
    gamma: the margin view is `capgeo gamma`'s."""
    from rich.markup import escape

    from capgeo.report.summary import encoder_geometry, headline_gamma_text

    label = "Gamma" if gamma.sweep else "Suggested gamma"   # a measured gamma is no longer a suggestion
    line = (f"[bold]{label}:[/bold] {escape(headline_gamma_text(gamma))}, s = {gamma.logit_scale:g} "
            f"({escape(gamma.logit_scale_source)})")
    extra = [f"{entry.suggestion.gamma:.2f} at B={entry.batch_size}" for entry in gamma.batches[1:]]
    if extra:
        line += f"; {'the rule at ' if gamma.sweep else ''}other batch sizes: {', '.join(extra)}"
    if gamma.sweep:
        from capgeo.findings.gamma_sweep import beats_zero_text

        sweep = gamma.sweep
        line += (f". gamma > 0 beats gamma 0 beyond the seed spread: {escape(beats_zero_text(sweep))}; the rule's "
                 f"suggestion is {escape(sweep['rule_position'] or 'not among the gammas')}. The measured curve: "
                 "`capgeo report` or --json")
    line += f". Evidence: {gamma.paper_sweep_note}. Why, and the margin view: `capgeo gamma`."
    if gamma.encoder_caution:
        line += (f"\n[bold yellow]Caution:[/bold yellow] this gamma is for {shown(encoder_geometry(result))}, "
                 f"not the tower training fine-tunes: see the first WARNING below.")
    return line


def _bucket_table(entries: list[BatchStatistics], kind: str):
    """One row per batch size: shares of in-batch negatives per bucket and the hardest one."""
    from rich.table import Table

    first = getattr(entries[0], kind)
    if kind == "buckets":
        title = "In-batch negatives by cosine"
    else:
        edges = ", ".join(f"{label.split('-')[0].lstrip('<>=')} = {edge:.3f}"
                          for label, edge in zip(first.labels[1:], first.edges))
        title = f"In-batch negatives by the dataset's own pairwise quantiles ({edges})"
    top_edge = first.labels[-1]
    near = entries[0].near_duplicate.threshold
    table = Table(title=title, title_justify="left")
    terminal.add_whole_word_columns(table, ("B", *first.labels, f"per row {top_edge}", "hardest mean",
                                            f"batches with a pair >= {near:g}"), justify="right")
    for entry in entries:
        composition = getattr(entry, kind)
        table.add_row(str(entry.batch_size), *(f"{share:.1%}" for share in composition.shares),
                      f"{composition.expected_above_per_row[-1]:.2f}",
                      _fmt(entry.hardest_in_batch.mean), f"{entry.near_duplicate.share_batches:.1%}")
    return table
