"""What travels between Turnout's process and the engine core: the utility names and the results they return.

The utilities run in vLLM's engine-core process and answer through vLLM's own utility channel
(``EngineCoreClient.call_utility_async``), which carries msgpack: plain dicts of numbers and strings. The
:class:`UnloadResult` and :class:`LoadResult` Structs give those dicts a typed shape on Turnout's side.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "IN_PLACE_ENGINE_ENV",
    "IN_PLACE_ENGINE_MARKER",
    "LOADED_MODEL_UTILITY",
    "LOAD_UTILITY",
    "PLUGIN_GROUP",
    "PLUGIN_NAME",
    "UNLOAD_UTILITY",
    "WORKER_EXTENSION",
    "KeptKV",
    "LoadResult",
    "LoadedModel",
    "UnloadResult",
]

#: Engine-core utility: pause, abort what is left, have the workers release the model and the KV cache.
UNLOAD_UTILITY = "turnout_unload_model"
#: Engine-core utility: load the target's ``VllmConfig`` (cloudpickled bytes), rebuild KV cache and scheduler.
LOAD_UTILITY = "turnout_load_model"
#: Engine-core utility: which model the engine core holds now.
LOADED_MODEL_UTILITY = "turnout_loaded_model"
#: The plugin's entry point (``[project.entry-points."vllm.general_plugins"]`` in pyproject.toml).
PLUGIN_GROUP = "vllm.general_plugins"
PLUGIN_NAME = "turnout_reconfigure"
#: ``worker_extension_cls`` of every engine the reconfigure strategy starts.
WORKER_EXTENSION = "server.vllm_plugin.worker.ReconfigureWorkerExtension"
#: Set in the environment engines of the reconfigure strategy start with (their processes read it at start; glibc
#: reads its variables only at exec, so Turnout's engine launcher applies them to a core it forks with ``mallopt``).
#: ``IN_PLACE_ENGINE_MARKER`` tells the plugin in vLLM's worker process that this worker swaps in place
#: (``start_heap.py``). glibc's malloc settings: allocations up to 1 GiB come from the heap, and freed heap
#: pages stay mapped until the worker trims them after a load, so a swap's new tensors take the pages the old
#: ones just gave up instead of faulting fresh ones in (by default glibc maps and unmaps every allocation over
#: 32 MiB, and the CPU GEMM packing of the 1 GiB benchmark models spent about half its time in page faults:
#: 450 -> 190 ms/GiB on this machine).
IN_PLACE_ENGINE_MARKER = "TURNOUT_IN_PLACE_ENGINE"
IN_PLACE_ENGINE_ENV = {
    IN_PLACE_ENGINE_MARKER: "1",
    "MALLOC_MMAP_THRESHOLD_": str(2**30),
    "MALLOC_TRIM_THRESHOLD_": str(2**30),
}


class LoadedModel(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine core says it holds.

    Attributes:
        model: ``model_config.model`` (the path or hub id), or None when no model is loaded.
        served_model_name: The served name, or None when no model is loaded.
        max_model_len: The context length the engine core settled on (auto-fit may lower it).
        num_gpu_blocks: KV cache blocks the engine core allocated.
        block_size: KV cache block size.
    """

    model: str | None
    served_model_name: str | None
    max_model_len: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None


class UnloadResult(msgspec.Struct, frozen=True, kw_only=True):
    """Phase times of an in-place unload, in milliseconds.

    The workers keep the model until the load knows its target (a same-shape target reuses it), so this is
    the pause; dropping the model, when the target needs that, is the load's ``LoadResult.unload_ms``.

    Attributes:
        unload_ms: The unload inside the engine core.
        gc_ms: Of that, the longest time a worker spent in garbage collection.
        kept_blocks: Prefix-cache blocks kept in the pool (``switching.kv_keep_bytes``; 0 when off).
        kept_bytes: Bytes the workers wrote into the pool for them (blocks already kept cost nothing).
        keep_ms: Of ``unload_ms``, the keep.
    """

    unload_ms: float
    gc_ms: float = 0.0
    kept_blocks: float = 0.0
    kept_bytes: float = 0.0
    keep_ms: float = 0.0


class LoadResult(msgspec.Struct, frozen=True, kw_only=True):
    """Phase times of an in-place load, in milliseconds, and what the engine core holds afterwards.

    Attributes:
        load_ms: Workers building the model runner and loading the weights.
        kv_cache_ms: KV cache profiling and allocation (and warm-up, where the platform does one).
        scheduler_ms: Scheduler, structured-output manager and prefix-cache hashing.
        loaded: The model the engine core reports afterwards.
        method: ``weights`` (the same-shape target's weights copied into the kept model) or ``reconfigure``
            (the kept model dropped, the target built and loaded in full).
        weights_refused: Why the ``weights`` path could not run (None when it ran).
        unload_ms: Dropping the kept model before a ``reconfigure`` load (0 for ``weights``).
        runner_ms: Of ``load_ms`` on the ``weights`` path, the model runner rebuilt around the kept model.
        weights_ms: Of ``load_ms`` on the ``weights`` path, the target's weights loaded into it.
        kept_blocks: Prefix-cache blocks of the previous model kept first (a load with no unload before it).
        kept_bytes: Bytes written for them.
        keep_ms: The keep.
    """

    load_ms: float
    kv_cache_ms: float
    scheduler_ms: float
    loaded: LoadedModel
    method: str = "reconfigure"
    weights_refused: str | None = None
    unload_ms: float = 0.0
    runner_ms: float = 0.0
    weights_ms: float = 0.0
    kept_blocks: float = 0.0
    kept_bytes: float = 0.0
    keep_ms: float = 0.0


class KeptKV(msgspec.Struct, frozen=True, kw_only=True):
    """What a keep before a stop put in the pool (``switching.kv_keep_bytes``); the same figures as the keep
    fields of :class:`UnloadResult`.

    Attributes:
        kept_blocks: Prefix-cache blocks kept.
        kept_bytes: Bytes the workers wrote for them (blocks already kept cost nothing).
        keep_ms: The keep.
    """

    kept_blocks: float = 0.0
    kept_bytes: float = 0.0
    keep_ms: float = 0.0


def decode_result(value: Any, kind: type[msgspec.Struct]) -> Any:
    """Convert a utility's dict answer into ``kind``; a clear error when the engine core answered nonsense."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise RuntimeError(f"the engine core answered the reconfigure utility with {value!r}: {exc}") from exc
