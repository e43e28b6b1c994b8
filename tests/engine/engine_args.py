"""The engine args of the real-engine tests' tiny models: small, eager, float32 (the CPU build's LoRA and the
differential corpus need it), a fixed 64 MiB KV cache so that a start never sizes it from the host's memory."""

from __future__ import annotations

from typing import Any

__all__ = ["TINY_ENGINE_ARGS"]

TINY_ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 512,
    "max_num_seqs": 8,
    "kv_cache_memory_bytes": 64 << 20,
    "enforce_eager": True,
}
