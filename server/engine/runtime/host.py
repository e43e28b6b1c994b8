"""What this host has: its device, and whether another engine fits beside the resident ones (the ``auto`` policy).

Reads vLLM's platform detection and the memory readings; decides nothing about which engine goes (that is the
residency policy's, ``server/engine/residency/policy.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from server.engine.memory import available_device_fraction, available_ram_mb
from server.engine.residency import DEFAULT_RESERVE_FRACTION, VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from server.profiles.schema import ModelProfile

__all__ = ["detect_device", "device_allows_another_engine", "memory_check", "ram_allows_another_engine"]


def detect_device() -> str:
    """``hpu``, ``cuda`` or ``cpu``, as vLLM's platform detection sees this machine."""
    from vllm.platforms import current_platform

    device = str(getattr(current_platform, "device_type", "cpu") or "cpu")
    return device if device in ("hpu", "cuda") else "cpu"


def device_allows_another_engine(share: float) -> bool:
    """The CUDA ``auto`` policy: another engine fits while ``share`` of device 0 is free (NVML; False without)."""
    free = available_device_fraction()
    return free is not None and free >= share


def ram_allows_another_engine(reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> bool:
    """The CPU ``auto`` policy: keep engines resident while the KV budget's reserve of host RAM stays available."""
    import psutil

    total_mb = float(psutil.virtual_memory().total) / (1024 * 1024)
    return available_ram_mb() >= total_mb * reserve_fraction


def memory_check(device: str, models: Mapping[str, ModelProfile]) -> Callable[[], bool]:
    """The ``auto`` policy's "does another engine fit": host RAM on CPU, device memory on CUDA.

    On CUDA an engine claims ``gpu_memory_utilization`` of the device (vLLM's default unless a model sets it), so
    another fits while that share of the device is free for the most demanding model of the profile.
    """
    if device != "cuda":
        return ram_allows_another_engine
    share = max(
        float(m.engine_args.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)) for m in models.values()
    )
    return lambda: device_allows_another_engine(share)
