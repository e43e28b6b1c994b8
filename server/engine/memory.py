"""Memory readings for switch reports: device memory where it can be read, process-tree RSS otherwise.

The frontend process must not create a CUDA context just to read memory (that alone costs hundreds of MB), so
CUDA memory comes from NVML; vLLM's engines run in child processes, so the CPU reading sums the whole tree.
"""

from __future__ import annotations

import logging

import psutil

__all__ = ["available_ram_mb", "memory_in_use_mb"]

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


def _process_tree_rss_mb() -> float:
    root = psutil.Process()
    total = root.memory_info().rss
    for child in root.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # a child may exit between listing and reading
            continue
    return float(total) / _MB


def memory_in_use_mb() -> float:
    """Device memory in use, or the RSS of this process and its children (the engine cores) on CPU."""
    used = _nvml_used_mb()
    return used if used is not None else _process_tree_rss_mb()


def available_ram_mb() -> float:
    """Host RAM still available (what the CPU ``keep`` policy spends)."""
    return float(psutil.virtual_memory().available) / _MB
