"""Memory readings for switch reports: device memory where it can be read, the engine processes' RSS otherwise.

The frontend process must not create a CUDA context just to read memory (that alone costs hundreds of MB), so
CUDA memory comes from NVML. vLLM's engines run in child processes (engine core, then its workers), so the CPU
reading sums the RSS of every descendant of this process: the engines, without Turnout's own process.
"""

from __future__ import annotations

import logging

import psutil

__all__ = ["available_device_fraction", "available_ram_mb", "engine_processes_rss_mb", "memory_in_use_mb"]

logger = logging.getLogger("turnout.engine")
_MB = 1024 * 1024


def _nvml_used_mb() -> float | None:
    try:
        import pynvml  # ships with CUDA vLLM; absent on CPU and Gaudi

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return float(pynvml.nvmlDeviceGetMemoryInfo(handle).used) / _MB
    except Exception:  # no NVML, no NVIDIA device: fall back to RSS
        return None


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
    """Free share of CUDA device 0's memory (NVML), or None where NVML cannot read one."""
    try:
        import pynvml

        pynvml.nvmlInit()
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
        return float(info.free) / float(info.total)
    except Exception:  # no NVML, no NVIDIA device
        return None


def available_ram_mb() -> float:
    """Host RAM still available (what the CPU ``keep`` policy spends)."""
    return float(psutil.virtual_memory().available) / _MB
