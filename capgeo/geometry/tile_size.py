"""How large the pairwise pass's tiles are: sized from the device and N unless given.

A tile is ``block_size x block_size`` cosines. On a GPU the pass is bound by per-tile
overhead (Python calls, kernel launches, syncs) until tiles are large, so it takes the
largest tile that fits a stated share of the free device memory. On a CPU, tiles past
a few thousand rows leave the caches without speeding the matmul, so it keeps the
measured CPU default.
"""

from __future__ import annotations

from capgeo.defaults import ARITHMETIC_BLOCKS, CPU_BLOCK_SIZE

# measured on one H200 (issue 14): 16384 -> 46.8 s, 32768 -> 44.0 s at N = 1,000,000;
# larger tiles gain nothing and make the first progress update slow
MAX_DEVICE_BLOCK_SIZE = 32768
# GPU tiles are whole numbers of arithmetic blocks: a tile edge through a block would make the
# tiles on either side compute that block's product each
DEVICE_BLOCK_ALIGN = ARITHMETIC_BLOCKS["cuda"]
DEFAULT_MEMORY_SHARE = 0.5
# bytes the pass holds per tile cell: the tile, its transpose, a float scratch and the
# bin indices (4 bytes each), the mask of cells above the running top-k (1), plus torch's
# top-k and masking temporaries (~8)
BYTES_PER_CELL = 25


def choose_block_size(n: int, device, *, memory_share: float = DEFAULT_MEMORY_SHARE,
                      free_bytes: int | None = None) -> int:
    """Rows per tile for ``n`` captions on ``device`` (a torch.device).

    CPU (and mps, whose memory is shared): :data:`CPU_BLOCK_SIZE`. CUDA: the largest
    multiple of :data:`DEVICE_BLOCK_ALIGN` (the CUDA arithmetic block; at most 32768) whose
    tile buffers fit ``memory_share`` of the free device memory (``free_bytes`` overrides the query, for tests). Never more than ``n``.
    """
    if n < 1:
        raise ValueError(f"need at least one caption, got {n}")
    if getattr(device, "type", str(device)) != "cuda":
        return min(CPU_BLOCK_SIZE, n)
    if free_bytes is None:
        import torch

        free_bytes, _ = torch.cuda.mem_get_info(device)
    budget_cells = memory_share * free_bytes / BYTES_PER_CELL
    side = int(budget_cells ** 0.5) // DEVICE_BLOCK_ALIGN * DEVICE_BLOCK_ALIGN
    side = max(DEVICE_BLOCK_ALIGN, min(side, MAX_DEVICE_BLOCK_SIZE))
    return min(side, n)
