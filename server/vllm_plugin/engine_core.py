"""The engine-core side of the in-place model swap: utilities installed on vLLM's ``EngineCore`` by the plugin.

They run in the engine-core process, on its busy-loop thread (vLLM calls a utility between two engine steps), so
nothing steps the scheduler while they work. Each one pauses the scheduler first; when vLLM has a batch in
flight the pause completes later, and the utility returns a ``Future`` that vLLM answers once it resolves.

Unload: pause and abort what is left; from then on the engine core reports no model. The workers keep the
model until the load that follows knows its target: a target of the same shape takes the ``weights`` path
(``server/vllm_plugin/weights.py``: its weights copied into the kept model), any other has the workers drop
their model runner (weights, KV cache, input batch) and collect the garbage first, then load it in full
(``reconfigure``). The old scheduler stays in place, paused and empty, until a load replaces it: vLLM's busy
loop asks it for work between utility calls.

Load: the target's ``VllmConfig`` arrives as cloudpickled bytes (vLLM's utility channel carries msgpack) and
goes on to the workers as ``collective_rpc`` kwargs. The workers build a model runner from it and load the
weights; then the engine core re-runs its own start-up steps for the new model: KV cache sizing and
allocation, scheduler, structured-output manager, prefix-cache hashing, batch queue. Written against vLLM
0.32.0's ``EngineCore.__init__``; the plugin installs nothing on another version.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from server.vllm_plugin import kv_keep_core, weights, worker
from server.vllm_plugin.config_attrs import EXECUTOR_CONFIG_ATTRS
from server.vllm_plugin.kv_keep_core import KEEP_KV_UTILITY
from server.vllm_plugin.protocol import LOAD_UTILITY, LOADED_MODEL_UTILITY, UNLOAD_UTILITY

__all__ = ["install"]

logger = logging.getLogger("turnout.engine.reconfigure")

_LOADED_ATTR = "_turnout_model_loaded"
#: True while the workers still hold the model of an unload whose load has not come yet.
_KEPT_ATTR = "_turnout_model_kept"


def install(engine_core_cls: type) -> None:
    """Add the utilities to ``EngineCore`` (idempotent; names from :mod:`protocol`)."""
    setattr(engine_core_cls, UNLOAD_UTILITY, unload_model)
    setattr(engine_core_cls, LOAD_UTILITY, load_model)
    setattr(engine_core_cls, LOADED_MODEL_UTILITY, loaded_model)
    setattr(engine_core_cls, KEEP_KV_UTILITY, kv_keep_core.keep_once)


def loaded_model(core: Any) -> dict[str, Any]:
    """What the engine core holds now: the model and the KV cache it settled on; model None after an unload."""
    if not getattr(core, _LOADED_ATTR, True):
        return {"model": None, "served_model_name": None}
    config = core.vllm_config
    served = config.model_config.served_model_name
    return {
        "model": str(config.model_config.model),
        "served_model_name": served[0] if isinstance(served, list | tuple) else served,
        "max_model_len": int(config.model_config.max_model_len),
        "num_gpu_blocks": int(config.cache_config.num_gpu_blocks or 0),
        "block_size": int(config.cache_config.block_size),
    }


def unload_model(core: Any) -> dict[str, Any] | Future[dict[str, Any]]:
    """Pause and abort what is left; the model stays in the workers until the next load decides its fate."""

    def run() -> dict[str, Any]:
        started = time.perf_counter()
        kept = kv_keep_core.keep_once(core) if getattr(core, _LOADED_ATTR, True) else {}
        setattr(core, _LOADED_ATTR, False)  # first: a failure half-way leaves "unknown", never the old name
        setattr(core, _KEPT_ATTR, True)
        return {"unload_ms": (time.perf_counter() - started) * 1000.0, "gc_ms": 0.0, **kept}

    return _after_pause(core, run)


def load_model(core: Any, vllm_config_bytes: bytes) -> dict[str, Any] | Future[dict[str, Any]]:
    """Load the model of ``vllm_config_bytes`` into the running workers and rebuild the engine core around it.

    A target of the kept model's shape gets its weights copied in (``method: weights``); any other is loaded in
    full after the kept model is dropped (``method: reconfigure``), and ``unload_ms`` is what dropping it cost.
    """
    new_config = _decode_config(vllm_config_bytes)

    def run() -> dict[str, Any]:
        weights.prefetch(new_config)  # the disk reads overlap the unload and the runner's construction
        kv_kept = kv_keep_core.keep_once(core) if getattr(core, _LOADED_ATTR, True) else {}
        kept = bool(getattr(core, _KEPT_ATTR, False)) or bool(getattr(core, _LOADED_ATTR, True))
        reason = weights.incompatibility(core.vllm_config, new_config) if kept else "no model is kept"
        setattr(core, _LOADED_ATTR, False)
        setattr(core, _KEPT_ATTR, False)  # first: after a failure below, nothing kept is fit to reuse
        _abort_leftovers(core)
        started = time.perf_counter()
        steps: dict[str, float] = {}
        if reason is None:
            answers = core.collective_rpc(worker.load_weights_on_worker, kwargs={"vllm_config": new_config})
            steps = _slowest_steps(answers, ("runner_ms", "weights_ms"))
        elif kept:
            unload_model_now(core)
        unloaded = time.perf_counter()
        if reason is not None:
            core.collective_rpc(worker.load_on_worker, kwargs={"vllm_config": new_config})
        loaded = time.perf_counter()
        _rebind_config(core, new_config)
        kv_cache_config = core._initialize_kv_caches(new_config)
        kv_done = time.perf_counter()
        _rebuild_scheduler(core, new_config, kv_cache_config)
        setattr(core, _LOADED_ATTR, True)
        core.resume_scheduler()
        done = time.perf_counter()
        method = "weights" if reason is None else "reconfigure"
        unload_ms = 0.0 if reason is None else (unloaded - started) * 1000.0
        load_ms = (loaded - started) * 1000.0 - unload_ms
        logger.info(
            "in place to %s (%s%s): unload %.0f ms, load %.0f ms, kv cache %.0f ms, scheduler %.0f ms",
            new_config.model_config.model,
            method,
            "" if reason is None else f": {reason}",
            unload_ms,
            load_ms,
            (kv_done - loaded) * 1000.0,
            (done - kv_done) * 1000.0,
        )
        return {
            "method": method,
            "weights_refused": reason,
            "unload_ms": unload_ms,
            "load_ms": load_ms,
            "kv_cache_ms": (kv_done - loaded) * 1000.0,
            "scheduler_ms": (done - kv_done) * 1000.0,
            **steps,
            **kv_kept,
            "loaded": loaded_model(core),
        }

    return _after_pause(core, run)


def unload_model_now(core: Any) -> float:
    """Have the workers drop their model and collect the garbage; returns the longest worker's GC time (ms).

    For a caller already on the busy-loop thread with the scheduler paused.
    """
    setattr(core, _LOADED_ATTR, False)
    setattr(core, _KEPT_ATTR, False)
    # The load that follows takes the freed pages and a KV cache of its size, and trims the heap after.
    answers = core.collective_rpc(worker.unload_on_worker, kwargs={"load_follows": True})
    gc.collect()  # the engine core's own share: cached grammars, multimodal receiver cache entries
    return max((float(a.get("gc_ms", 0.0)) for a in answers), default=0.0)


# -- steps ----------------------------------------------------------------------------------------------------


def _slowest_steps(answers: list[dict[str, float]], keys: tuple[str, ...]) -> dict[str, float]:
    """Each step's time on the slowest worker: the switch waits for the last one."""
    return {key: max((float(a.get(key, 0.0)) for a in answers), default=0.0) for key in keys}


def _after_pause(core: Any, step: Callable[[], dict[str, Any]]) -> dict[str, Any] | Future[dict[str, Any]]:
    """Pause the scheduler (aborting what is left), then run ``step``; a Future when the pause completes later."""
    # clear_cache=False: the KV cache and the prefix cache are thrown away with the model anyway.
    pending = core.pause_scheduler(mode="abort", clear_cache=False)
    if pending is None:
        return step()
    answer: Future[dict[str, Any]] = Future()

    def paused(done: Future[Any]) -> None:
        try:
            done.result()
            answer.set_result(step())
        except Exception as exc:
            answer.set_exception(exc)

    pending.add_done_callback(paused)
    return answer


def _decode_config(payload: bytes) -> Any:
    import cloudpickle
    from vllm.config import VllmConfig

    if not isinstance(payload, bytes | bytearray) or not payload:
        raise TypeError(f"{LOAD_UTILITY} needs the target's VllmConfig as cloudpickled bytes")
    # The bytes come from Turnout's process over the engine's private IPC socket, the same channel that carries
    # every request; vLLM's own utility channel refuses pickled objects, hence the explicit bytes.
    config = cloudpickle.loads(bytes(payload))
    if not isinstance(config, VllmConfig):
        raise TypeError(f"{LOAD_UTILITY} expected a VllmConfig, got {type(config).__name__}")
    return config


def _abort_leftovers(core: Any) -> None:
    """Requests queued while paused would be lost with the old scheduler: end them as aborted."""
    from vllm.v1.request import RequestStatus

    aborted = core.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
    send = getattr(core, "_send_abort_outputs", None)
    if aborted and send is not None:
        send(aborted)


def _rebind_config(core: Any, config: Any) -> None:
    """Point the engine core and its executor at the new config, as their constructors did for the first."""
    core.vllm_config = config
    core.available_gpu_memory_for_kv_cache = -1
    core._pooler_config_logged = False
    executor = core.model_executor
    executor.vllm_config = config
    for name in EXECUTOR_CONFIG_ATTRS:
        setattr(executor, name, getattr(config, name))
    # A cached_property on the executor: the new model may support other tasks (generate, embed, ...).
    executor.__dict__.pop("supported_tasks", None)


def _rebuild_scheduler(core: Any, config: Any, kv_cache_config: Any) -> None:
    """Everything ``EngineCore.__init__`` builds after the KV cache, rebuilt for ``config``.

    Nothing of the old scheduler survives: its KV cache manager (block pool, prefix-cache hashes), its
    requests, the structured-output manager (grammars compiled for the old tokenizer) and the multi-modal
    receiver cache are all new, so no state of the old model can serve the new one.
    """
    from vllm.multimodal.cache import engine_receiver_cache_from_config
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes
    from vllm.v1.structured_output import StructuredOutputManager

    old_scheduler = core.scheduler
    include_finished_set = getattr(old_scheduler, "finished_req_ids_dict", None) is not None
    core.structured_output_manager.clear_backend()
    core.structured_output_manager = StructuredOutputManager(config)

    if len(kv_cache_config.kv_cache_groups) == 0 and config.scheduler_config.enable_chunked_prefill:
        logger.warning("disabling chunked prefill for a model without KV cache")
        config.scheduler_config.enable_chunked_prefill = False
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, config)
    scheduler_cls = config.scheduler_config.get_scheduler_cls()
    core.scheduler = scheduler_cls(
        vllm_config=config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=core.structured_output_manager,
        include_finished_set=include_finished_set,
        log_stats=core.log_stats,
        block_size=scheduler_block_size,
        hash_block_size=hash_block_size,
    )
    old_scheduler.shutdown()
    del old_scheduler
    core._initialize_effective_attention_block_size()
    core.use_spec_decode = config.speculative_config is not None
    core.check_for_draft_tokens = core.use_spec_decode or config.model_config.is_diffusion
    core.mm_receiver_cache = engine_receiver_cache_from_config(config)

    core.batch_queue_size = config.max_concurrent_batches
    core.batch_queue = deque(maxlen=core.batch_queue_size) if core.batch_queue_size > 1 else None
    core.step_fn = core.step if core.batch_queue is None else core.step_with_batch_queue
    core.async_scheduling = config.scheduler_config.async_scheduling
    core.is_mm_encoder_only = config.is_mm_encoder_only
    core.is_pooling_model = config.model_config.runner_type == "pooling"

    core.request_block_hasher = None
    if config.cache_config.enable_prefix_caching:
        hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        core.request_block_hasher = get_request_block_hasher(hash_block_size, hash_fn)
    # The old scheduler's block pool is a doubly linked list (reference cycles): only the collector frees it.
    # vLLM froze the start-up heap, so this pass only walks what was allocated since.
    gc.collect()
