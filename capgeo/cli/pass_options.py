"""Options of the all-pairs pass shared by every command that runs it (profile, dupes, truncation)."""

from __future__ import annotations

import click

from capgeo.defaults import CPU_BLOCK_SIZE, PAIR_BLOCK_SIZE, PRECISIONS
from capgeo.geometry.tile_size import DEFAULT_MEMORY_SHARE, MAX_DEVICE_BLOCK_SIZE

#: the share of a GPU's free memory the tile may take, in words
_MEMORY_SHARE_WORDS = "half" if DEFAULT_MEMORY_SHARE == 0.5 else f"{DEFAULT_MEMORY_SHARE:.0%} of"


def block_size_option(command):
    return click.option(
        "--block-size", type=click.IntRange(min=1), default=PAIR_BLOCK_SIZE, metavar="ROWS",
        help="Rows per tile of the pairwise pass (memory ~ 24 bytes x ROWS^2). "
             f"Default: sized from the device and N ({CPU_BLOCK_SIZE} on CPU; on a GPU the largest tile, up to "
             f"{MAX_DEVICE_BLOCK_SIZE}, that fits {_MEMORY_SHARE_WORDS} the free memory).")(command)


def precision_option(command):
    return click.option(
        "--precision", type=click.Choice(PRECISIONS), default=PRECISIONS[0], show_default=True,
        help="Matrix products of the pairwise pass. fp32: exact. tf32/bf16 (faster on big GPUs): companions "
             "stay exact (candidates near the k-th re-scored from the float32 vectors); the histograms' "
             "cosine error bound and measured error are printed and saved in the JSON.")(command)
