"""Small matrix products on one BLAS thread."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def one_blas_thread():
    """Run the products inside on one BLAS thread (threadpoolctl; as they are without it).

    numpy's OpenBLAS splits even one batch's 128 x 384 product over every core, and its threads
    wait spinning between calls: the gamma section's 200 in-batch products took 12.7 s (2.1 s of
    CPU) on this machine's two shared cores, and 1.2 s (0.16 s of CPU) on one thread. One thread
    also keeps the bits from following the core count: OpenBLAS's threaded kernels may round
    differently (they do on AMD EPYC), within float32 rounding (tests/test_inbatch.py)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(1, user_api="blas"):
        yield
