"""`capgeo gamma` on the terminal: the gamma section of a typed profile (docs/gamma.md)."""

from __future__ import annotations

from capgeo import terminal
from capgeo.display import counted
from capgeo.terminal import shown


def print_gamma(profile, console=None) -> None:
    """The gamma result of a typed profile on ``console`` (default: the terminal's): the section's
    reference, then each batch size's suggestion and grid."""
    from rich.padding import Padding
    from rich.text import Text

    from capgeo.findings.gamma import MARGIN_VIEW_NOTE, describe_margins
    from capgeo.findings.gamma_sweep import describe_sweep

    console = console or terminal.console()
    section, dataset, encoder = profile.gamma, profile.dataset, profile.encoder
    reference = section.reference
    console.print(f"[bold]HN-CLIP gamma[/bold] for {shown(dataset.source)} "
                  f"({counted(dataset.n_captions or 0, 'caption')}, {counted(dataset.n_groups or 0, 'group')}), "
                  f"encoder {shown(encoder.spec)} "
                  f"({shown(encoder.name)})")
    if section.sweep:
        from capgeo.findings.gamma_sweep import measured_headline

        console.print(f"  [bold green]gamma {measured_headline(section.sweep)}[/bold green]; the rule's instant "
                      f"estimate below, the measured curve at the end")
    console.print(f"  logit scale s = {section.logit_scale:g}  (from {section.logit_scale_source})")
    console.print(f"  reference: gamma {reference.gamma}, s {reference.logit_scale:g}, B {reference.batch_size}"
                  f" on DOCCI-like geometry (mean pairwise {reference.mean_pairwise}, hardest companion "
                  f"{reference.mean_hardest_companion}; within-row spread {reference.within_row_spread:.4f})")
    console.print(f"  reference concentration: effective negatives {reference.effective_negatives:.1f} of "
                  f"{reference.batch_size - 1} ({reference.effective_share:.1%})")
    if section.encoder_caution:
        console.print(f"[bold yellow]Caution:[/bold yellow] {shown(section.encoder_caution)}")
    for index, entry in enumerate(section.batches):
        suggestion = entry.suggestion
        console.print()
        role = "headline" if index == 0 else "extra row"
        console.print(f"[bold]B = {entry.batch_size}[/bold] ({role}): within-row spread of caption cosine "
                      f"{entry.within_row_spread:.4f} (mean in-batch cosine {entry.mean_cosine:.3f}, "
                      f"{counted(entry.n_batches, 'batch', 'batches')})")
        low, high = suggestion.range
        console.print(f"  [bold green]suggested gamma {suggestion.gamma:.2f}[/bold green] (concentration view; "
                      f"range {low:.2f}-{high:.2f})")
        if suggestion.clip_note:
            console.print(f"  [yellow]clipped:[/yellow] {suggestion.clip_note}")
        console.print(Padding(Text(f"why: {entry.why}"), (0, 0, 0, 2)))  # wrapped at the width, indented
        console.print(Padding(Text(describe_margins(entry.margins, suggestion.gamma_exact)), (0, 0, 0, 2)))
        if index == 0:
            console.print(Padding(Text(MARGIN_VIEW_NOTE), (0, 0, 0, 2)))
        console.print(_grid_table(entry, section.hard_edge))
    console.print(f"Evidence: {section.paper_sweep_note}. The paper swept gamma in steps of 0.25, so differences "
                  f"below that are within its plateau.")
    if section.sweep:
        console.print()
        for line in describe_sweep(section.sweep):
            console.print(Padding(Text(line), (0, 0, 0, 2 if line.startswith(" ") else 0)))


def _grid_table(entry, hard_edge: float):
    from rich.table import Table

    image = entry.image
    # two-line headers and one space between columns keep all eleven columns whole at 80 columns; a
    # number that still does not fit wraps (fold) rather than being cut to "3.01…", which reads as 3.01
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0))
    for title in ("gamma", "s*gamma", "eff.\nneg.", "share", f"mass\n>={hard_edge:g}", "mass\ntop 10%",
                  "boost\nmed", "boost\nhard", "gap"):
        table.add_column(title, justify="right", overflow="fold")
    if image:
        table.add_column("loss", justify="right", overflow="fold")
        table.add_column(f"batches\n<{image.solved_loss:g}", justify="right", overflow="fold")
        table.add_row(*["plain"] + [""] * 8 + [f"{image.plain.mean_loss:.3g}",
                                               f"{image.plain.share_batches_below:.0%}"])
    for k, row in enumerate(entry.grid):
        cells = [f"{row.gamma:g}", f"{row.scaled_gamma:.1f}", f"{row.effective_negatives:.1f}",
                 f"{row.effective_share:.0%}", f"{row.hard_bucket_mass:.0%}", f"{row.top_decile_mass:.0%}",
                 f"{row.boost_median:.1f}", f"{row.boost_hardest:.1f}", f"{row.boost_gap:.2f}"]
        if image:
            boosted = image.boosted[k]
            cells += [f"{boosted.mean_loss:.3g}", f"{boosted.share_batches_below:.0%}"]
        table.add_row(*cells)
    return table
