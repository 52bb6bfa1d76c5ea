"""The terminal renderer of `capgeo batches`: the ``capgeo.batches/1`` result (capgeo.training.plan's
BatchPlan) as the counts of the plan against a plain shuffle."""

from __future__ import annotations

from typing import TYPE_CHECKING

from capgeo import terminal
from capgeo.terminal import shown

if TYPE_CHECKING:
    from capgeo.training.plan import BatchPlan


def print_batches(result: BatchPlan, console=None) -> None:
    """Print a batches result (to ``console``, default the terminal's)."""
    console = console or terminal.console(highlight=False)
    spec = None if result.encoder is None else result.encoder["spec"]
    epochs = f" x {result.epochs} epochs" if result.epochs > 1 else ""
    console.print(f"Batches of {result.batch_size} for {result.n_captions:,} captions of "
                  f"{result.n_groups:,} images{epochs}, seed {result.seed}")
    console.print(f"Near-duplicates: cosine >= {result.threshold:g} under encoder {shown(spec)}")
    total = result.n_captions * result.epochs
    short = f", {result.n_short_batches:,} short of {result.batch_size}" if result.n_short_batches else ""
    console.print(f"  batches              {result.n_batches:,}{short}")
    console.print(f"  captions placed      {result.n_placed:,} of {total:,}")
    console.print(f"  not placed           {result.n_not_placed:,} ({result.share_not_placed:.2%}; "
                  f"{result.n_captions % result.batch_size:,} per epoch are past the last full batch)")
    console.print(f"  rearranged batches   {result.n_rearranged_batches:,}")
    avoided = result.conflicts_avoided
    console.print(f"  conflicts avoided    {avoided['same_image']:,} same image, {avoided['exact_copy']:,} exact copy, "
                  f"{avoided['near_duplicate']:,} near-duplicate")
    console.print("  (rearranged, avoided: against a plain shuffle of the same seed)")
