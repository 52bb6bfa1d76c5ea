"""Fixed-shape block products for the torch engine (cuda, mps, tf32 / bf16; on any device).

The numpy pass's :class:`capgeo.geometry.cpu_pass.BlockProducts` walks a tile's arithmetic
blocks; this is the same walk with torch's products. Every product is one call of one shape,
``A x d`` against ``A x d`` into a contiguous ``A x A`` buffer (A: the device kind's
:data:`capgeo.defaults.ARITHMETIC_BLOCKS`, the last block of the vectors zero-padded), then
copied into the tile: a GPU library picks its kernel from the shapes, strides and alignment of
a call, so only a call that never changes gives each cosine the same float whatever the tile.
"""

from __future__ import annotations

import contextlib
import threading

from capgeo.defaults import ARITHMETIC_BLOCKS
from capgeo.geometry.cpu_pass import BlockProducts


def arithmetic_block(device) -> int:
    """Rows of one arithmetic block on ``device`` (a torch.device or its name)."""
    kind = getattr(device, "type", str(device).split(":")[0])
    return ARITHMETIC_BLOCKS.get(kind, ARITHMETIC_BLOCKS["cuda"])


@contextlib.contextmanager
def block_threads(device):
    """On the CPU, torch on one thread, and a pool of as many threads as torch had for the whole
    blocks of a tile (torch releases the GIL in a product); elsewhere nothing. Yields the pool
    (None for one thread or a GPU).

    Each block is small (256 x 256 on the CPU): an operation of that size split over torch's
    threads waits for them to wake, which on shared cores cost ~8 ms an operation (measured under
    load on the 2-core machine) against ~5 us on one thread. And one thread for every product
    keeps the kernel, so the floats, the same whatever the thread setting."""
    if getattr(device, "type", str(device)) != "cpu":
        yield None
        return
    import torch

    from concurrent.futures import ThreadPoolExecutor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if threads <= 1:
            yield None
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                yield pool
    finally:
        torch.set_num_threads(threads)


class TorchBlockProducts(BlockProducts):
    """Cosines of torch ``matrix`` rows (against ``other`` rows), each from one A x A product.

    ``multiply(rows, columns, out)``: the product of two A-row blocks into ``out`` (A x A
    float32, contiguous); by default float32 ``torch.mm``. ``on_block(row_block, column_block,
    product)``: called with every upper block (row block <= column block when symmetric) a tile
    reads, each time it reads it, with the block's whole A x A product (padding cells zero); from
    the threads of ``pool`` (:func:`block_threads`) too, so it must be thread-safe.
    """

    def __init__(self, matrix, other=None, size: int | None = None, multiply=None, on_block=None, pool=None):
        import torch

        super().__init__(matrix, other, arithmetic_block(matrix.device) if size is None else size, pool=pool)
        self.torch = torch
        self.multiply = multiply or (lambda rows, columns, out: torch.mm(rows, columns.T, out=out))
        self.on_block = on_block
        self._local = threading.local()  # each pool thread's product buffer
        self._kept_buffer = self._new_buffer()
        self._lower_mask = torch.ones_like(self._kept_buffer, dtype=torch.bool).tril(-1) if self.symmetric else None

    def _new_buffer(self):
        return self.torch.empty((self.size, self.size), dtype=self.torch.float32, device=self.rows.device)

    def _zeros(self, rows: int, like):
        return self.torch.zeros((rows, like.shape[1]), dtype=like.dtype, device=like.device)

    def product_into(self, row_block: int, column_block: int, out) -> None:
        """The A x A product into ``out``, which must be contiguous (a buffer of this class)."""
        self.multiply(self.block(self.rows, row_block), self.block(self.columns, column_block), out)
        if self.symmetric and row_block == column_block:
            # the pair (j, i) reads the float of (i, j): a caption meets one cosine from either side
            out.copy_(self.torch.where(self._lower_mask, out.T, out))

    def whole_block_into(self, row_block: int, column_block: int, out) -> None:
        with self.torch.inference_mode():  # (a pool thread does not inherit the caller's mode)
            buffer = getattr(self._local, "buffer", None)
            if buffer is None:
                buffer = self._local.buffer = self._new_buffer()
            self.product_into(row_block, column_block, buffer)
            if self.on_block is not None:
                self.on_block(row_block, column_block, buffer)
            out.copy_(buffer)

    def product(self, row_block: int, column_block: int):
        flip = self.symmetric and row_block > column_block
        key = (column_block, row_block) if flip else (row_block, column_block)
        if self._kept is None or self._kept[0] != key:
            self.product_into(*key, self._kept_buffer)
            self._kept = (key, self._kept_buffer)
        if flip:
            return self._kept_buffer.T
        if self.on_block is not None:
            self.on_block(*key, self._kept_buffer)
        return self._kept_buffer
