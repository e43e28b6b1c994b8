"""The ``weights`` path of an in-place swap: a same-shape target's weights copied into the loaded model.

Users' most common multi-model case is several fine-tunes of one base architecture. There, building the model
again is pure overhead: when the target has the same architecture, shapes, dtype, quantization and parallel
layout, the worker keeps the model object (its modules and parameter storage) and loads the target's weights
into it with vLLM's own weight-update path (``vllm.model_executor.model_loader.reload``, the one RL weight sync
uses: per layer, the checkpoint tensors are loaded and processed, e.g. repacked for the CPU GEMM, then copied
into the original storage), with the memory it would first-touch reused instead (``weight_reuse.py``:
layer buffers, the old packed weights, the KV cache allocation). Everything else comes from the target's
``VllmConfig``: the model runner (input batch, sampler, max length, batch limits) is built anew from it
around the kept model, and the engine core
rebuilds the KV cache (in the old allocation when its size is unchanged, zeroed) and the scheduler as for
any load, so no block, prefix-cache entry, grammar or multi-modal cache entry of the old model survives.

:func:`incompatibility` decides, in the engine core, whether a target may take this path; anything it refuses
takes the full in-place load (``reconfigure``). A failure half-way through a weights load leaves a model with
mixed weights, so the worker drops it: the rollback that follows is a full load of the previous model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from server.vllm_plugin import weight_reuse

__all__ = ["forget_reload_state", "incompatibility", "load_weights", "prefetch"]

logger = logging.getLogger("turnout.engine.reconfigure")

#: ``hf_text_config`` keys that never shape the model: names, special-token ids (the tokenizer's business),
#: bookkeeping. The dtype is compared as the engine resolved it (``model_config.dtype``), not as written.
_NON_SHAPING_KEYS = frozenset(
    {
        "_name_or_path",
        "name_or_path",
        "_commit_hash",
        "transformers_version",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "torch_dtype",
        "dtype",
    }
)
#: Load formats whose loader can stream a checkpoint into a live model (``get_all_weights``).
_STREAMABLE_FORMATS = frozenset({"auto", "safetensors", "pt"})

_Read = Callable[[Any], object]
#: What must be equal for the kept model (its modules, parameters and attention layers) to be the target's.
_SAME: tuple[tuple[str, _Read], ...] = (
    ("architectures", lambda c: tuple(c.model_config.architectures or ())),
    ("dtype", lambda c: str(c.model_config.dtype)),
    ("quantization", lambda c: c.model_config.quantization),
    ("runner_type", lambda c: c.model_config.runner_type),
    ("model_impl", lambda c: str(c.model_config.model_impl)),
    ("tensor_parallel_size", lambda c: c.parallel_config.tensor_parallel_size),
    ("pipeline_parallel_size", lambda c: c.parallel_config.pipeline_parallel_size),
    ("data_parallel_size", lambda c: c.parallel_config.data_parallel_size),
    ("enable_expert_parallel", lambda c: bool(c.parallel_config.enable_expert_parallel)),
    # The attention layers read these when they are built.
    ("block_size", lambda c: c.cache_config.block_size),
    ("kv_cache_dtype", lambda c: str(c.cache_config.cache_dtype)),
)


def incompatibility(current: Any, target: Any) -> str | None:
    """Why the target's weights cannot go into the model built for ``current``, or None when they can.

    Args:
        current: The loaded model's ``VllmConfig``.
        target: The target's ``VllmConfig``.
    """
    from vllm.config import CompilationMode

    for config in (current, target):
        if config.model_config.quantization is not None:
            return "a quantized model (its processed weights have their own layout)"
        if config.lora_config is not None or config.speculative_config is not None:
            return "LoRA or speculative decoding is configured"
        if config.compilation_config.mode != CompilationMode.NONE:
            # Compiled code traced the old model's kernels (on CPU, its packed GEMM closures).
            return "a compiled model (enforce_eager is off)"
    if str(target.load_config.load_format) not in _STREAMABLE_FORMATS:
        return f"load format {target.load_config.load_format} cannot stream into a live model"
    for what, read in _SAME:
        if read(current) != read(target):
            return f"{what} differs ({read(current)} -> {read(target)})"
    differing = _shaping_config(current) ^ _shaping_config(target)
    if differing:
        return "model config differs in " + ", ".join(sorted({key for key, _ in differing})[:6])
    return None


def _shaping_config(config: Any) -> set[tuple[str, str]]:
    """The model config's shaping entries, as comparable (key, value) pairs."""
    values = config.model_config.hf_text_config.to_dict()
    return {(key, repr(value)) for key, value in values.items() if key not in _NON_SHAPING_KEYS}


def prefetch(vllm_config: Any) -> int:
    """Ask the kernel to read the target's weight files ahead, while the old model is dropped or the runner built.

    The reads then come from the page cache when the loader gets there (a no-op where the files are cached
    already, or for a model that is not a local folder). Returns the number of files asked for.
    """
    folder = Path(str(vllm_config.model_config.model))
    if not folder.is_dir() or not hasattr(os, "posix_fadvise"):
        return 0
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    for file in files:
        with contextlib.suppress(OSError):
            descriptor = os.open(file, os.O_RDONLY)
            try:
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(descriptor)
    return len(files)


def load_weights(worker: Any, vllm_config: Any, adopt_config: Callable[[Any], None]) -> dict[str, float]:
    """Keep ``worker``'s model, build a model runner for ``vllm_config`` around it, load the target's weights.

    Args:
        worker: vLLM's worker with a loaded model runner (the engine core checked :func:`incompatibility`).
        vllm_config: The target's ``VllmConfig``.
        adopt_config: Points the worker at ``vllm_config`` (the extension's ``_turnout_adopt_config``).

    Returns:
        ``runner_ms`` (runner rebuilt around the model) and ``weights_ms`` (the weights loaded).

    Raises:
        Exception: Whatever loading the weights raised; the worker holds no model runner then.
    """
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.utils import clear_layer_kv_caches

    started = time.perf_counter()
    old_runner = worker.model_runner
    model = old_runner.get_model()
    # The layers registered at model construction (attention: keyed by name, holding the KV cache views) go
    # with the model; the target's runner and KV cache allocation look them up in the target's config.
    layers = dict(worker.vllm_config.compilation_config.static_forward_context)
    kept_kv = weight_reuse.take_kv_cache(old_runner, worker.vllm_config, vllm_config)  # for the new runner
    clear_layer_kv_caches(layers.values())  # the layers let go of the old KV cache; only its backing stays
    worker.vllm_config.compilation_config.static_forward_context.clear()
    worker.model_runner = None
    del old_runner
    worker._turnout_collect_garbage(model_kept=True)  # the old runner's cycles (input batch, sampler)
    adopt_config(vllm_config)
    vllm_config.compilation_config.static_forward_context.update(layers)
    with set_current_vllm_config(vllm_config):
        runner = worker._turnout_build_runner()
    runner.model = model
    weight_reuse.hand_kv_cache(kept_kv, runner, vllm_config)
    del kept_kv
    worker.model_runner = runner
    built = time.perf_counter()
    try:
        with set_current_vllm_config(vllm_config):
            _reload(model, vllm_config)
    except Exception:
        logger.exception("loading %s's weights into the kept model failed; dropping it", vllm_config.model_config.model)
        worker.turnout_unload_model()
        raise
    done = time.perf_counter()
    return {"runner_ms": (built - started) * 1000.0, "weights_ms": (done - built) * 1000.0}


def _reload(model: Any, vllm_config: Any) -> None:
    """vLLM's ``reload_weights`` from disk (checkpoint format), but a weight the checkpoint lacks is an error.

    ``reload_weights`` only logs the parameters it did not load and leaves them as they were: here that would
    be the old model's weights serving under the target's name.
    """
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    model_config = vllm_config.model_config
    loader: Any = get_model_loader(vllm_config.load_config)  # DefaultModelLoader for the streamable formats
    expected = {name for name, _ in model.named_parameters()}
    tied = _tied_modules(model)
    initialize_layerwise_reload(model)
    try:
        with weight_reuse.reusing_layer_buffers():
            loaded = model.load_weights(loader.get_all_weights(model_config, model))
    except Exception:
        _put_back_storage(model)
        raise
    finalize_layerwise_reload(model, model_config)  # type: ignore[no-untyped-call]
    missing = expected - set(loaded or ())
    if missing:
        raise RuntimeError(f"{model_config.model} lacks {len(missing)} weights, e.g. {sorted(missing)[:3]}")
    for module in tied:
        # vLLM processes a tied parameter for its first owner only, and on CPU the embedding method packs its
        # own copy of the weight for the GEMM: a tied LM head would keep computing logits from the old one.
        module.quant_method.process_weights_after_loading(module)


def forget_reload_state(model: Any) -> None:
    """Drop vLLM's reload bookkeeping for ``model``'s layers, so the model can be freed.

    vLLM keeps it in a ``WeakKeyDictionary`` keyed by layer, but after a reload its values (the meta tensors the
    reload registered, their weight loaders bound to the layer) refer to their own keys: the dictionary would
    keep every layer of a reloaded model, and so its weights, alive after the model is dropped.
    """
    import sys

    layerwise = sys.modules.get("vllm.model_executor.model_loader.reload.layerwise")
    if layerwise is None or model is None:
        return
    for module in model.modules():
        layerwise.LAYERWISE_INFO.pop(module, None)


def _put_back_storage(model: Any) -> None:
    """After a failed reload, give every layer its own tensors back instead of the meta ones the reload left.

    The model is dropped next, but some of its modules outlive it: vLLM caches rotary embeddings by their
    parameters (``get_rope``), so the next model built (the rollback's) would share one left on meta.
    """
    from vllm.model_executor.model_loader.reload import layerwise

    for module in model.modules():
        info = layerwise.LAYERWISE_INFO.get(module)
        if info is None or info.kernel_tensors is None:
            continue
        with contextlib.suppress(Exception):  # best effort, layer by layer: one failure must not stop the rest
            layerwise._place_kernel_tensors(module, info)
        info.reset()  # type: ignore[no-untyped-call]


def _tied_modules(model: Any) -> list[Any]:
    """Modules whose parameter another module owns first (a tied LM head), with an idempotent processing step."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    owners: dict[int, str] = {}
    tied: list[Any] = []
    for module_name, module in model.named_modules():
        for parameter in module.parameters(recurse=False):
            first = owners.setdefault(id(parameter), module_name)
            if first != module_name and isinstance(getattr(module, "quant_method", None), UnquantizedEmbeddingMethod):
                tied.append(module)
    return tied
