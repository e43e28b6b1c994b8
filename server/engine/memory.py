"""Memory readings for switch reports: device memory where it can be read, the engine processes' RSS otherwise.

The frontend process must not create a CUDA context just to read memory (that alone costs hundreds of MB), so
CUDA memory comes from NVML. vLLM's engines run in child processes (engine core, then its workers), so the CPU
reading sums the RSS of every descendant of this process: the engines, without Turnout's own process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import psutil

__all__ = [
    "available_device_fraction",
    "available_ram_mb",
    "engine_processes_rss_mb",
    "memory_in_use_mb",
    "nvml_memory",
    "visible_cuda_index",
]

logger = logging.getLogger("turnout.engine")
_MB = 1024 * 1024


def visible_cuda_index(environ: Mapping[str, str] | None = None) -> int:
    """NVML's index of the device vLLM's engines use: the first of ``CUDA_VISIBLE_DEVICES`` (NVML ignores it)."""
    env = os.environ if environ is None else environ
    first = env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    return int(first) if first.isdigit() else 0


def nvml_memory() -> tuple[int, Any] | None:
    """``(index, nvmlMemory_t)`` of the engines' CUDA device, or None without NVML or an NVIDIA device."""
    try:
        import pynvml  # ships with CUDA vLLM; absent on CPU and Gaudi

        pynvml.nvmlInit()
        index = visible_cuda_index()
        return index, pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
    except Exception:
        return None


def _nvml_used_mb() -> float | None:
    reading = nvml_memory()
    return None if reading is None else float(reading[1].used) / _MB  # None: fall back to RSS


def engine_processes_rss_mb(root: psutil.Process | None = None) -> float:
    """RSS of every descendant of ``root`` (this process by default): the engine-core and worker processes."""
    total = 0
    for child in (root or psutil.Process()).children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # a child may exit between listing and reading
            continue
    return float(total) / _MB


def memory_in_use_mb() -> float:
    """Device memory in use, or the RSS of the engine processes (this process's descendants) on CPU."""
    used = _nvml_used_mb()
    return used if used is not None else engine_processes_rss_mb()


def available_device_fraction() -> float | None:
    """Free share of the engines' CUDA device memory (NVML), or None where NVML cannot read one."""
    reading = nvml_memory()
    return None if reading is None else float(reading[1].free) / float(reading[1].total)


def available_ram_mb() -> float:
    """Host RAM still available (what the CPU ``keep`` policy spends)."""
    return float(psutil.virtual_memory().available) / _MB
