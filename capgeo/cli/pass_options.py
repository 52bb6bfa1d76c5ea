"""Options of the all-pairs pass shared by every command that runs it (profile, dupes, truncation)."""

from __future__ import annotations

import click

from capgeo.defaults import PRECISIONS


def block_size_option(command):
    return click.option(
        "--block-size", type=click.IntRange(min=1), default=None, metavar="ROWS",
        help="Rows per tile of the pairwise pass (memory ~ 24 bytes x ROWS^2). "
             "Default: sized from the device and N (2048 on CPU; on a GPU the largest tile, up to 32768, "
             "that fits half the free memory).")(command)


def precision_option(command):
    return click.option(
        "--precision", type=click.Choice(PRECISIONS), default=PRECISIONS[0], show_default=True,
        help="Matrix products of the pairwise pass. fp32: exact. tf32/bf16 (faster on big GPUs): companions "
             "stay exact (candidates near the k-th re-scored from the float32 vectors); the histograms' "
             "cosine error bound and measured error are printed and saved in the JSON.")(command)
