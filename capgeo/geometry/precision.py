"""Faster, stated-error matrix products for the pairwise pass: ``tf32`` and ``bf16``.

``fp32`` (the default) is the exact pass. The other two compute each tile's cosines
with reduced-precision inputs (TF32 tensor cores, or a bf16 copy of the vectors with
float32 accumulation), which big GPUs run several times faster. What changes:

* the histograms, mean, std, min and max come from the approximate cosines. Every
  approximate cosine is within ``cosine_error_bound`` of the float32 one (a worst-case
  bound from the input rounding, below), and the error actually seen on one full tile
  is measured and reported, with the share of cosines that changed histogram bin;
* the top-k companions stay exact. Every candidate whose approximate cosine comes within
  the bound of a caption's running k-th best is re-scored by :func:`rescored_cosines`
  (float32 products of the float32 vectors, added in a fixed order: the same float32
  value for a pair on every device, in every batch), and the lists keep the best by
  that value. Which candidates are re-scored depends on what a caption met before, so
  a pair's value must not depend on how it is re-scored: that is what makes a pass split
  over processes (Ray) give the same bits as the local one;
* pairs at or above a threshold are gathered with the threshold lowered by the bound
  and re-scored the same way, so the set is exact too.

The bound: with inputs x~ = x + dx, y~ = y + dy and float32 accumulation over d terms,
``|x~.y~ - x.y| <= |dx||y| + |x||dy| + |dx||dy| + d * 2**-24 * (1 + |dx|)^2`` for unit
x, y. For bf16 the rounding dx of every vector is known, so the largest |dx| is used;
TF32 rounding happens inside the GPU, so |dx| <= 2**-10 |x| (truncation) is assumed.
"""

from __future__ import annotations

import contextlib
import math

from capgeo.defaults import PRECISIONS
TF32_RELATIVE_ROUNDING = 2.0 ** -10
FLOAT32_UNIT = 2.0 ** -24
# bf16 keeps 8 significant bits: rounding to nearest moves a value by up to 2**-8 of itself
BF16_OUTPUT_ROUNDING = 2.0 ** -8
MEASURED_ROWS = 4096
# float32 elements per re-scoring step (64 MiB): bounds its memory whatever the pair count
RESCORE_ELEMENTS = 1 << 24


def check_precision(precision: str) -> str:
    from capgeo.errors import CapgeoError

    if precision not in PRECISIONS:
        raise CapgeoError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


@contextlib.contextmanager
def matmul_precision(precision: str):
    """TF32 on for ``tf32``, off otherwise (whatever the process had set), restored after."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


class ReducedProducts:
    """Tile products in ``tf32`` or ``bf16`` for a float32 unit ``matrix``, with their error bound."""

    def __init__(self, matrix, precision: str):
        import torch

        self.torch = torch
        self.precision = precision
        self.matrix = matrix
        width = matrix.shape[1]
        output_rounding = 0.0
        if precision == "bf16":
            self.inputs = matrix.to(torch.bfloat16)
            rounding = 0.0
            for start in range(0, matrix.shape[0], 65536):  # in chunks: no second float32 copy
                chunk = self.inputs[start:start + 65536].to(torch.float32) - matrix[start:start + 65536]
                rounding = max(rounding, float(torch.linalg.vector_norm(chunk, dim=1).max()))
            self._multiply = self._pick_bf16_product()
            self.product_kind = "bf16 inputs, float32 output"
            if self._multiply == self._bf16_output:  # (each access makes a new bound method: not `is`)
                output_rounding = BF16_OUTPUT_ROUNDING
                self.product_kind = "bf16 inputs and output"
        else:
            self.inputs = matrix
            rounding = TF32_RELATIVE_ROUNDING
            self._multiply = self._tf32_product
            self.product_kind = "tf32 inputs, float32 output"
        self.bound = (2 * rounding + rounding ** 2 + width * FLOAT32_UNIT * (1 + rounding) ** 2) * (1 + output_rounding) \
            + output_rounding
        # how far an approximate cosine may sit from its re-scored value: the bound, the
        # re-scored value's own error, and the float32 rounding of the thresholds compared
        # with it (``kth - margin``: half a float32 step near 1, 2**-25)
        self.margin = self.bound + rescore_error(width) + FLOAT32_UNIT

    def product(self, row_start, row_end, column_start, column_end, out):
        self._multiply(self.inputs[row_start:row_end], self.inputs[column_start:column_end], out)

    def multiply(self, rows, columns, out):
        """The reduced-precision product of rows of :attr:`inputs` against other rows, into ``out``."""
        self._multiply(rows, columns, out)

    def _tf32_product(self, rows, columns, out):
        self.torch.mm(rows, columns.T, out=out)

    def _bf16_into(self, rows, columns, out):
        self.torch.mm(rows, columns.T, out_dtype=self.torch.float32, out=out)

    def _bf16_copy(self, rows, columns, out):
        out.copy_(self.torch.mm(rows, columns.T, out_dtype=self.torch.float32))

    def _bf16_output(self, rows, columns, out):
        # no float32-output bf16 product here (CPU, older torch): bf16 results, rounding in the bound
        out.copy_(self.torch.mm(rows, columns.T))

    def _pick_bf16_product(self):
        torch = self.torch
        probe = self.inputs[:2]
        out = torch.empty((2, 2), dtype=torch.float32, device=probe.device)
        for candidate in (self._bf16_into, self._bf16_copy):
            try:
                candidate(probe, probe, out)
                return candidate
            except (RuntimeError, TypeError, NotImplementedError):
                continue
        return self._bf16_output

    def measure(self, bins: int) -> dict:
        """Error of one tile (up to 4096 x 4096 captions) against float32: max and share of bin changes."""
        from capgeo.geometry.distribution import bin_indices_torch

        torch = self.torch
        size = min(MEASURED_ROWS, self.matrix.shape[0])
        reduced = torch.empty((size, size), dtype=torch.float32, device=self.matrix.device)
        with matmul_precision(self.precision):
            self.product(0, size, 0, size, reduced)
        with matmul_precision("fp32"):
            exact = self.matrix[:size] @ self.matrix[:size].T
        upper = torch.ones((size, size), dtype=torch.bool, device=exact.device).triu(1)
        error = (reduced - exact).abs()[upper]
        moved = bin_indices_torch(reduced, bins)[upper] != bin_indices_torch(exact, bins)[upper]
        return {"measured_max_error": float(error.max()) if error.numel() else 0.0,
                "measured_pairs": int(error.numel()),
                "measured_share_of_bins_changed": float(moved.float().mean()) if moved.numel() else 0.0}


def rescored_cosines(matrix, rows, columns):
    """Float32 cosines of the pairs (``rows[i]``, ``columns[i]``) of unit ``matrix`` rows, the
    same bits on every device and in any batch: element-wise float32 products, added in a
    fixed pairwise order (:func:`_pairwise_totals`). A matrix product's value depends on its
    kernel and shape; this one does not. Its error is at most ``rescore_error(width)``.
    """
    import torch

    out = torch.empty(rows.numel(), dtype=torch.float32, device=matrix.device)
    step = max(1, RESCORE_ELEMENTS // max(matrix.shape[1], 1))
    for start in range(0, rows.numel(), step):
        end = min(start + step, rows.numel())
        # (index_select: a fresh copy, so mul_ is safe; ~15% faster than matrix[rows] on CPU)
        products = torch.index_select(matrix, 0, rows[start:end])
        out[start:end] = _pairwise_totals(products.mul_(torch.index_select(matrix, 0, columns[start:end])))
    return out


def rescore_error(width: int) -> float:
    """Worst-case error of :func:`rescored_cosines` for unit vectors of ``width``: one rounding
    per product and one per level of the pairwise sum, each at most 2**-24 of the sum of
    ``|x_i y_i|`` (<= 1)."""
    return (1 + math.ceil(math.log2(max(width, 1)))) * FLOAT32_UNIT * (1 + 1e-3)


def _pairwise_totals(values):
    """Row totals of a 2-D tensor by halving: element-wise additions only, so the order of
    the additions depends on the width alone (a reduction kernel's order does not)."""
    import torch

    while values.shape[1] > 1:
        if values.shape[1] % 2:  # adding a zero is exact
            values = torch.nn.functional.pad(values, (0, 1))
        values = values[:, 0::2] + values[:, 1::2]
    return values[:, 0]
