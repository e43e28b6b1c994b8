"""The worker side of the in-place model swap: vLLM's ``worker_extension_cls`` hook, plus two RPC entry points.

vLLM mixes :class:`ReconfigureWorkerExtension` into its worker class (``CPUWorker`` here, ``Worker`` on CUDA) when
an engine starts with ``worker_extension_cls`` set, so its methods run on the worker object with all of its state.
The device, the distributed groups and the worker process itself stay; only the model runner (model, KV cache,
input batch, sampler) is dropped and rebuilt from the target's ``VllmConfig``.

The engine core calls :func:`unload_on_worker` and :func:`load_on_worker` through ``collective_rpc`` with the
function itself (vLLM pickles it by reference): vLLM hands such a function the worker *wrapper*, whose own
``vllm_config`` is what ``initialize_from_config`` (the KV cache allocation) runs under, so it must follow the
target too.

Garbage collection: a model runner holds reference cycles, so only the collector frees it. A full pass over a
worker that imported torch and vLLM costs about 0.3 s, so after the first unload the surviving heap (imports,
distributed state; no model) is frozen and later passes walk only what the last model allocated. A ``weights``
swap keeps its model, so the model is frozen with the rest; the full unload that drops it unfreezes first. vLLM's
CUDA worker freezes its heap itself after warm-up, the model included; then the heap is unfrozen first.

A load (full or ``weights``) runs on every core the engine core may use (``load_cores.py``), and an unload that
a load follows leaves the freed heap pages to it (``IN_PLACE_ENGINE_ENV``): the load trims what is left over.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import sys
import time
from typing import Any

from server.vllm_plugin import weight_reuse
from server.vllm_plugin.config_attrs import WORKER_CONFIG_ATTRS
from server.vllm_plugin.load_cores import on_engine_cores
from server.vllm_plugin.start_heap import frozen_at_start

__all__ = ["ReconfigureWorkerExtension", "load_on_worker", "load_weights_on_worker", "unload_on_worker"]

logger = logging.getLogger("turnout.engine.reconfigure")


def unload_on_worker(wrapper: Any, load_follows: bool = False) -> dict[str, float]:
    """``collective_rpc`` entry: release the worker's model and KV cache (see ``turnout_unload_model``)."""
    answer: dict[str, float] = _extended_worker(wrapper).turnout_unload_model(load_follows)
    return answer


def load_on_worker(wrapper: Any, vllm_config: Any) -> dict[str, float]:
    """``collective_rpc`` entry: load the model of ``vllm_config`` into the worker."""
    if hasattr(wrapper, "worker"):
        wrapper.vllm_config = vllm_config  # KV cache allocation runs under the wrapper's config
    answer: dict[str, float] = _extended_worker(wrapper).turnout_load_model(vllm_config)
    return answer


def load_weights_on_worker(wrapper: Any, vllm_config: Any) -> dict[str, float]:
    """``collective_rpc`` entry: keep the worker's model and load the same-shape target's weights into it."""
    if hasattr(wrapper, "worker"):
        wrapper.vllm_config = vllm_config
    answer: dict[str, float] = _extended_worker(wrapper).turnout_load_weights(vllm_config)
    return answer


def _extended_worker(wrapper: Any) -> Any:
    worker = getattr(wrapper, "worker", wrapper)
    if not hasattr(worker, "turnout_unload_model"):
        raise RuntimeError(
            f"the engine's worker ({type(worker).__name__}) was started without Turnout's worker extension "
            "(worker_extension_cls); the reconfigure strategy starts its engines with it"
        )
    return worker


class ReconfigureWorkerExtension:
    """Methods vLLM adds to its worker class. Every name carries the ``turnout_`` prefix: vLLM refuses an
    extension whose attributes collide with the worker's."""

    def turnout_unload_model(self, load_follows: bool = False) -> dict[str, float]:
        """Drop the model runner (model, KV cache, input batch) and free its memory.

        Args:
            load_follows: A load follows at once. The freed heap pages are then left to the new model's
                tensors (``IN_PLACE_ENGINE_ENV``; the load trims what is left over), and a KV cache of a fixed
                size stays allocated for a target that fixes the same size (``weight_reuse.keep_kv_cache``):
                zeroing it costs less than faulting a new one in.

        Returns:
            ``unload_ms`` and ``gc_ms`` (the collector's share), and ``memory_mb``: this worker's RSS on CPU,
            the device memory in use on CUDA.
        """
        started = time.perf_counter()
        worker: Any = self
        runner = getattr(worker, "model_runner", None)
        worker._turnout_kept_kv = None
        if runner is not None and load_follows:
            worker._turnout_kept_kv = weight_reuse.take_kv_cache(runner, worker.vllm_config)
        if runner is not None:
            from server.vllm_plugin.weights import forget_reload_state

            forget_reload_state(getattr(runner, "model", None))
            compiled = _uses_compilation(worker.vllm_config)
            # The attention layers registered for the forward context hold the KV cache tensors.
            worker.vllm_config.compilation_config.static_forward_context.clear()
            worker.model_runner = None
            del runner
            if compiled:
                _reset_compiled_code()
        worker.weight_transfer_engine = None
        for saved in ("_sleep_saved_buffers", "_sleep_saved_parameters", "_sleep_saved_draft_buffers"):
            if hasattr(worker, saved):
                setattr(worker, saved, {})
        gc_ms = worker._turnout_collect_garbage()
        if not load_follows:
            _return_memory(worker)
        return {
            "unload_ms": (time.perf_counter() - started) * 1000.0,
            "gc_ms": gc_ms,
            "memory_mb": _memory_in_use_mb(worker),
        }

    def turnout_load_model(self, vllm_config: Any) -> dict[str, float]:
        """Build a model runner from ``vllm_config`` and load its weights (the KV cache comes from the engine core).

        Returns:
            ``load_ms`` and ``memory_mb`` (as :meth:`turnout_unload_model`).
        """
        from vllm.config import set_current_vllm_config
        from vllm.utils.torch_utils import set_random_seed

        started = time.perf_counter()
        worker: Any = self
        if getattr(worker, "model_runner", None) is not None:
            worker.turnout_unload_model(load_follows=True)
        kept_kv, worker._turnout_kept_kv = getattr(worker, "_turnout_kept_kv", None), None
        worker._turnout_adopt_config(vllm_config)
        with set_current_vllm_config(vllm_config):
            set_random_seed(vllm_config.model_config.seed)
            worker.model_runner = worker._turnout_build_runner()
        weight_reuse.hand_kv_cache(kept_kv, worker.model_runner, vllm_config)
        del kept_kv  # another size: the old KV cache goes before the model is loaded
        with on_engine_cores():
            worker.load_model()
        _return_memory(worker)  # what the previous model left beyond this one's needs
        return {"load_ms": (time.perf_counter() - started) * 1000.0, "memory_mb": _memory_in_use_mb(worker)}

    def turnout_load_weights(self, vllm_config: Any) -> dict[str, float]:
        """Keep the model, rebuild the runner from ``vllm_config`` around it and load its weights (``weights``).

        Returns:
            ``load_ms``, ``runner_ms``, ``weights_ms`` and ``memory_mb`` (as :meth:`turnout_unload_model`).
        """
        from server.vllm_plugin.weights import load_weights

        started = time.perf_counter()
        worker: Any = self
        with on_engine_cores():
            answer = load_weights(worker, vllm_config, worker._turnout_adopt_config)
        # The old model's packed weights were freed layer by layer, into malloc's free lists: hand the free
        # pages back, or the engine's RSS would keep what the old and the new model held together.
        _return_memory(worker)
        return {
            **answer,
            "load_ms": (time.perf_counter() - started) * 1000.0,
            "memory_mb": _memory_in_use_mb(worker),
        }

    def turnout_damage_weights(self) -> str:
        """A fault drill (``--inject-fault weights:MODEL``): negate the final norm's weight, as a wrong in-place
        load could leave it. Returns the tensor's name."""
        import torch

        worker: Any = self
        params = list(worker.model_runner.get_model().named_parameters())
        name, param = next((name, p) for name, p in reversed(params) if name.endswith("norm.weight"))
        with torch.no_grad():
            param.neg_()
        return str(name)

    def _turnout_adopt_config(self, vllm_config: Any) -> None:
        worker: Any = self
        worker.vllm_config = vllm_config
        for name in WORKER_CONFIG_ATTRS:
            if hasattr(vllm_config, name):
                setattr(worker, name, getattr(vllm_config, name))
        worker.use_v2_model_runner = vllm_config.use_v2_model_runner
        if worker.device.type == "cpu":
            worker.parallel_config.disable_custom_all_reduce = True  # as CPUWorker.__init__ sets it
        elif hasattr(worker, "init_snapshot"):
            # CUDA sizes the KV cache from the memory it may claim; the target may ask for another fraction.
            from vllm.model_executor.model_loader import get_model_loader
            from vllm.v1.worker.utils import request_memory

            external = get_model_loader(worker.load_config).get_external_weight_memory(vllm_config)
            worker.requested_memory = request_memory(worker.init_snapshot, worker.cache_config, external)

    def _turnout_build_runner(self) -> Any:
        """The model runner the worker's ``init_device`` would build for the adopted config."""
        worker: Any = self
        if worker.device.type == "cpu":
            # CPUWorker builds its runner inline in init_device (no factory method to call).
            if worker.use_v2_model_runner:
                from vllm.v1.worker.cpu.model_runner import CPUModelRunner as CPUModelRunnerV2

                return CPUModelRunnerV2(worker.vllm_config, worker.device)
            from vllm.v1.worker.cpu_model_runner import CPUModelRunner

            return CPUModelRunner(worker.vllm_config, worker.device)
        make_runner = getattr(worker, "_make_model_runner", None)
        if make_runner is None:
            raise RuntimeError(
                f"in-place reconfigure supports vLLM's CPU and CUDA workers, not {type(worker).__name__}"
            )
        return make_runner()

    def _turnout_collect_garbage(self, model_kept: bool = False) -> float:
        """Free the dropped runner's reference cycles; returns the milliseconds spent.

        Args:
            model_kept: The worker keeps its model (a ``weights`` swap), which may then stay in the frozen heap.
        """
        worker: Any = self
        started = time.perf_counter()
        # What the frozen heap holds: None (not frozen by Turnout yet), "bare" (no model; so is the heap frozen
        # at start, start_heap.py) or "model". A heap frozen by someone else may hold the model: the engine core
        # freezes its start-up heap (with the uni executor the worker lives in that process), and vLLM's CUDA
        # warm-up freezes the heap, the new model included, after every load. Whenever a frozen model is to be
        # freed, everything is unfrozen first: one full pass (0.3 s on CPU).
        frozen = getattr(worker, "_turnout_frozen_heap", None) or ("bare" if frozen_at_start() else None)
        if frozen is None or worker.device.type == "cuda" or (frozen == "model" and not model_kept):
            gc.unfreeze()
        gc.collect()
        # What survives now is the worker (with the kept model, or without one): freeze it, so the next pass
        # skips it. (Checking gc.get_freeze_count() instead would walk the whole frozen heap: 0.1 s here.)
        gc.freeze()
        worker._turnout_frozen_heap = "model" if model_kept else "bare"
        return (time.perf_counter() - started) * 1000.0


def _uses_compilation(vllm_config: Any) -> bool:
    from vllm.config import CompilationMode

    return bool(vllm_config.compilation_config.mode != CompilationMode.NONE)


def _reset_compiled_code() -> None:
    """Compiled graphs and Dynamo's guards belong to the model that is gone."""
    import torch

    with contextlib.suppress(Exception):  # a reset that fails costs a recompile, never correctness
        torch._dynamo.reset()


def _return_memory(worker: Any) -> None:
    """Hand freed memory back: the CUDA caching allocator's blocks, glibc's free heap pages."""
    import torch

    if worker.device.type == "cuda":
        torch.cuda.empty_cache()
    elif sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _memory_in_use_mb(worker: Any) -> float:
    if worker.device.type == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info(worker.device)
        return float(total - free) / (1024 * 1024)
    import psutil

    return float(psutil.Process().memory_info().rss) / (1024 * 1024)
