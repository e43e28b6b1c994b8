"""Memory readings for switch reports: device memory where it can be read, the engine processes' RSS otherwise.

The frontend process must not create a CUDA context just to read memory (that alone costs hundreds of MB), so
CUDA memory comes from NVML, and Gaudi memory from HLML (Habana's NVML: ``pyhlml``, from ``habana-pyhlml``, part of
the Gaudi software stack) in the same way. vLLM's engines run in child processes (engine core, then its workers),
so the CPU reading sums the RSS of every descendant of this process: the engines, without Turnout's own process.
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
    "hlml_memory",
    "memory_in_use_mb",
    "nvml_memory",
    "visible_cuda_index",
    "visible_hpu_module",
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


def visible_hpu_module(environ: Mapping[str, str] | None = None) -> int | None:
    """The module ID of the Gaudi vLLM's engines use: the first of ``HABANA_VISIBLE_MODULES`` (None: not set)."""
    env = os.environ if environ is None else environ
    first = env.get("HABANA_VISIBLE_MODULES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else None


def hlml_memory() -> Any | None:
    """HLML's memory reading (``free``, ``total``, ``used`` bytes) of the engines' Gaudi, or None without HLML or a
    Gaudi. The device is the one whose module ID ``HABANA_VISIBLE_MODULES`` names first, else HLML's first."""
    try:
        import pyhlml  # habana-pyhlml: ships with the Gaudi software stack; absent on CPU and CUDA

        pyhlml.hlmlInit()
        try:
            handles = [pyhlml.hlmlDeviceGetHandleByIndex(index) for index in range(pyhlml.hlmlDeviceGetCount())]
            module = visible_hpu_module()
            if module is not None:
                handles = [handle for handle in handles if pyhlml.hlmlDeviceGetModuleID(handle) == module]
            return pyhlml.hlmlDeviceGetMemoryInfo(handles[0]) if handles else None
        finally:
            pyhlml.hlmlShutdown()
    except Exception:
        return None


def _device_used_mb() -> float | None:
    """Used memory of the engines' CUDA device (NVML) or Gaudi (HLML); None: neither can be read."""
    reading = nvml_memory()
    if reading is not None:
        return float(reading[1].used) / _MB
    gaudi = hlml_memory()
    return None if gaudi is None else float(gaudi.used) / _MB


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
    """Device memory in use (NVML, HLML), or the RSS of the engine processes (this process's descendants) on CPU."""
    used = _device_used_mb()
    return used if used is not None else engine_processes_rss_mb()


def available_device_fraction() -> float | None:
    """Free share of the engines' CUDA device memory (NVML), or None where NVML cannot read one."""
    reading = nvml_memory()
    return None if reading is None else float(reading[1].free) / float(reading[1].total)


def available_ram_mb() -> float:
    """Host RAM still available (what the CPU ``keep`` policy spends)."""
    return float(psutil.virtual_memory().available) / _MB
