"""The ``VllmConfig`` parts that vLLM's constructors copy onto their objects, which a swap must copy again.

vLLM 0.32.0's executor and ``WorkerBase.__init__`` keep each of these as an attribute of their own; the worker's
``Worker.__init__`` adds three more. After an in-place load both sides point them at the target's config.
"""

from __future__ import annotations

__all__ = ["EXECUTOR_CONFIG_ATTRS", "WORKER_CONFIG_ATTRS"]

#: Copied by the executor's (and ``WorkerBase``'s) constructor.
EXECUTOR_CONFIG_ATTRS = (
    "model_config",
    "cache_config",
    "lora_config",
    "load_config",
    "parallel_config",
    "scheduler_config",
    "device_config",
    "speculative_config",
    "observability_config",
)

#: Copied by the worker's constructor: the executor's, plus those ``Worker.__init__`` adds.
WORKER_CONFIG_ATTRS = (*EXECUTOR_CONFIG_ATTRS, "kv_transfer_config", "compilation_config", "profiler_config")
