"""A model load in the worker runs on every core the engine may use, not only on the one its forward passes get.

vLLM's CPU worker binds itself and its OpenMP threads to its share of the cores at start-up
(``VLLM_CPU_OMP_THREADS_BIND``; on a 2-core machine: core 0 alone, the other is left to the engine core and the
API server). That share is right for serving, but a swap loads a model while the engine serves nothing: with
one thread, the CPU GEMM packing (``create_onednn_mm``) and the copies from the page cache took twice as long as
on both cores (profiled on the 1 GiB benchmark models: packing 56% of a same-shape swap, copies 25%).

:func:`on_engine_cores` widens the calling thread (the worker's main thread, where vLLM's OpenMP master runs)
to the engine core's CPUs and raises the OpenMP thread count for the duration of the load, then puts both back.
A thread OpenMP adds takes its mask from the master when it is created, so it may run on any of those cores;
while the worker serves with its bound count afterwards, the added thread stays idle in OpenMP's pool.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

__all__ = ["on_engine_cores"]

logger = logging.getLogger("turnout.engine.reconfigure")


@contextlib.contextmanager
def on_engine_cores() -> Iterator[int]:
    """While active, this thread may run on the parent process's CPUs with one OpenMP thread per CPU.

    Yields the OpenMP thread count in effect. A no-op (yielding the bound count) where the worker is not
    bound more narrowly than its parent (CUDA, or a CPU worker given every core), or off Linux.
    """
    import torch

    threads = torch.get_num_threads()
    if not hasattr(os, "sched_getaffinity"):
        yield threads
        return
    bound = os.sched_getaffinity(0)
    try:
        allowed = os.sched_getaffinity(os.getppid())
    except OSError:  # the parent is gone: the engine is on its way down anyway
        allowed = bound
    if allowed <= bound:
        yield threads
        return
    os.sched_setaffinity(0, allowed)
    # vLLM's CPU worker replaces torch.set_num_threads with a warning after binding its threads; the
    # binding is what this restores on exit, so the underlying setter is safe here.
    torch._C.set_num_threads(len(allowed))
    try:
        yield len(allowed)
    finally:
        torch._C.set_num_threads(threads)
        os.sched_setaffinity(0, bound)
