"""The worker's start-up heap, frozen before any model exists, so that no swap's garbage collection walks it.

A swap drops the old model runner, which holds reference cycles: only the collector frees it. A pass over
everything a worker imported (torch, vLLM) costs about 0.3 s here, so each pass after the first walks only what
is not frozen. The first swap used to pay that full pass, because nothing was frozen yet: 1.3 times a warm
swap on the 1 GiB benchmark models. Frozen when vLLM loads the plugins in its worker process (its imports
done; the worker, its model runner and model not built yet), the start-up heap never holds a model, and the
first swap's pass is as cheap as a warm one's.

Only in the worker processes of engines that swap in place (``IN_PLACE_ENGINE_MARKER`` in their environment,
vLLM's ``VllmWorker-<rank>`` process name): vLLM's own server in the same environment, the API process and the
engine core (which freezes its own heap after start-up, the model included) are left as they are.
"""

from __future__ import annotations

import gc
import multiprocessing
import os

from server.vllm_plugin.protocol import IN_PLACE_ENGINE_MARKER

__all__ = ["WORKER_PROCESS_PREFIX", "freeze_if_in_place_worker", "frozen_at_start", "in_worker_process"]

#: vLLM's multiprocessing executor names each worker process so (``multiproc_executor.py``).
WORKER_PROCESS_PREFIX = "VllmWorker-"
_frozen = False


def freeze_if_in_place_worker() -> bool:
    """Freeze the heap when this is the worker process of an engine that swaps in place; True if it did."""
    global _frozen
    if os.environ.get(IN_PLACE_ENGINE_MARKER) != "1" or not in_worker_process():
        return False
    # No collection first: what start-up left in cycles is small, and a full pass would delay the start.
    gc.freeze()
    _frozen = True
    return True


def in_worker_process() -> bool:
    """Whether this is one of vLLM's worker processes (by the name vLLM gives them; a worker forked from its engine
    core has imported what the core did)."""
    return multiprocessing.current_process().name.startswith(WORKER_PROCESS_PREFIX)


def frozen_at_start() -> bool:
    """Whether this process froze its heap at start, before any model existed."""
    return _frozen
