"""Every model's vLLM engine config, built before any engine starts, and the memory figures vLLM will check.

``turnout serve`` calls :func:`build_engine_configs` first: vLLM's own ``create_engine_config`` resolves each
model's engine arguments (reading its ``config.json``), so a bad value fails at once, naming the model and the
key, instead of minutes later when a switch reaches that model. The resolved configs then give the KV-cache
budget its inputs (:func:`model_shape`), and :func:`read_device_memory` reads the memory with the same function
vLLM's CPU worker uses for its "Available memory on node N" check (NVML for the device on CUDA).

Like ``vllm_loader.py``, this module imports only vLLM's engine API (config, platform, utils), never its
entrypoints.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from server.engine.memory import nvml_memory
from server.engine.residency import kv_bytes_per_token
from server.engine.runtime.vllm_loader import build_engine_args
from server.engine.types import MemoryReading, ModelShape
from server.profiles.checkpoint_size import CheckpointUnreadable, checkpoint_weight_bytes
from server.profiles.schema import ModelProfile

__all__ = [
    "EngineConfigInvalid",
    "build_engine_configs",
    "model_shape",
    "read_device_memory",
    "weight_bytes",
]

logger = logging.getLogger("turnout.engine")


class EngineConfigInvalid(ValueError):
    """vLLM refused one or more models' engine arguments; ``problems`` has one line per model."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def build_engine_configs(models: Mapping[str, ModelProfile]) -> dict[str, Any]:
    """vLLM's ``VllmConfig`` for every model, built as ``AsyncLLM`` would build it, before any engine starts.

    Raises:
        EngineConfigInvalid: One problem per model that vLLM refused, naming the model and the key.
    """
    from vllm.usage.usage_lib import UsageContext

    configs: dict[str, Any] = {}
    problems: list[str] = []
    for name, model in models.items():
        try:
            args = build_engine_args(name, model)
            configs[name] = args.create_engine_config(UsageContext.OPENAI_API_SERVER)
        except Exception as exc:  # vLLM raises pydantic, value, type and OS errors alike for a bad argument
            problems.append(describe_config_error(name, model, exc))
    if problems:
        raise EngineConfigInvalid(problems)
    return configs


def describe_config_error(name: str, model: ModelProfile, exc: Exception) -> str:
    """``model 'x': engine argument max_model_len=-5: <vLLM's reason>``; vLLM's message when no key is known."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and hasattr(exc, "title"):  # pydantic's ValidationError: one entry per field
        reasons = [(str(error["loc"][0]) if error.get("loc") else "", str(error.get("msg", ""))) for error in errors()]
    else:
        reasons = [("", str(exc) or type(exc).__name__)]
    return f"model {name!r}: " + "; ".join(_one_problem(model, field, reason) for field, reason in reasons)


def _one_problem(model: ModelProfile, field: str, reason: str) -> str:
    reason = " ".join(reason.split())
    if not field:  # a cross-field check names no field: name the key when its name is in the message
        named = [key for key in model.engine_args if key in reason]
        field = named[0] if len(named) == 1 else ""
    if field in model.engine_args:
        return f"engine argument {field}={model.engine_args[field]!r}: {reason}"
    return f"{field}: {reason}" if field else reason


def model_shape(name: str, model: ModelProfile, config: Any) -> ModelShape:
    """What ``config`` (a ``VllmConfig``) says about the model's KV cache and weights."""
    from vllm.utils.torch_utils import get_dtype_size, kv_cache_dtype_str_to_dtype

    model_config, parallel = config.model_config, config.parallel_config
    cache_dtype = kv_cache_dtype_str_to_dtype(config.cache_config.cache_dtype, model_config)
    explicit_kv = model.engine_args.get("kv_cache_memory_bytes")
    explicit_fraction = model.engine_args.get("gpu_memory_utilization")
    return ModelShape(
        name=name,
        kv_bytes_per_token=kv_bytes_per_token(
            num_layers=model_config.get_num_layers(parallel),
            num_kv_heads=model_config.get_num_kv_heads(parallel),
            head_size=model_config.get_head_size(),
            dtype_bytes=get_dtype_size(cache_dtype),
            mla=bool(model_config.use_mla),
        ),
        max_model_len=int(model_config.max_model_len),
        max_num_seqs=int(config.scheduler_config.max_num_seqs),
        block_size=int(config.cache_config.block_size),
        weight_bytes=weight_bytes(model_config),
        explicit_kv_bytes=int(explicit_kv) if explicit_kv is not None else None,
        explicit_fraction=float(explicit_fraction) if explicit_fraction is not None else None,
    )


def weight_bytes(model_config: Any) -> int:
    """The weights' size in memory, from the checkpoint's safetensors headers (``checkpoint_size.py``), float
    tensors at the width vLLM casts them to (a quantized model's as stored); 0 when its folder is unknown."""
    folder = _model_folder(model_config)
    if folder is None:
        return 0
    cast = None if model_config.quantization is not None else str(model_config.dtype).removeprefix("torch.")
    try:
        return checkpoint_weight_bytes(folder, cast_to=cast)
    except (CheckpointUnreadable, OSError) as exc:  # vLLM will say what is wrong when it loads them
        logger.warning("cannot read the weights' size of %s: %s", model_config.model, exc)
        return 0


def _model_folder(model_config: Any) -> Path | None:
    path = Path(str(model_config.model))
    if path.is_dir():
        return path
    try:  # a hub id: the server runs offline, so only the local cache counts
        from huggingface_hub import snapshot_download

        folder = snapshot_download(str(model_config.model), revision=model_config.revision, local_files_only=True)
    except Exception:  # not cached (vLLM will say so when it loads): count no weights
        return None
    return Path(folder)


def read_device_memory(device: str) -> MemoryReading | None:
    """The memory vLLM checks when an engine starts on ``device``; None where Turnout does not budget (HPU).

    On CPU this is vLLM's own ``get_memory_node_info`` for the NUMA node of the first allowed CPU (cgroup limits
    included), exactly what the worker's "Available memory on node N" check reads. On CUDA it is NVML's reading
    of device 0, so that this process creates no CUDA context.
    """
    if device == "cpu":
        from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

        node = get_allowed_cpu_list()[0].numa_node
        info = get_memory_node_info(node)
        return MemoryReading(
            device="cpu",
            where=f"NUMA node {node}",
            total_bytes=int(info.total_memory),
            available_bytes=int(info.available_memory),
        )
    if device == "cuda":
        return _nvml_reading()
    return None


def _nvml_reading() -> MemoryReading | None:
    reading = nvml_memory()
    if reading is None:  # vLLM's own default applies, and the log says why
        logger.warning("cannot read CUDA device memory through NVML; KV caches are not budgeted")
        return None
    index, info = reading
    return MemoryReading(
        device="cuda", where=f"cuda:{index}", total_bytes=int(info.total), available_bytes=int(info.free)
    )
