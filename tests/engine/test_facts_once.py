"""Facts that were kept twice and disagreed: now each lives once, and these tests hold the right value."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from server.engine import memory
from server.engine.residency.kv_budget import DEFAULT_RESERVE_FRACTION, VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from server.engine.runtime import vllm_configs
from server.engine.runtime.host import ram_allows_another_engine


def test_the_gpu_memory_utilization_default_is_vllms_own() -> None:
    from vllm.engine.arg_utils import EngineArgs

    assert VLLM_DEFAULT_GPU_MEMORY_UTILIZATION == EngineArgs.gpu_memory_utilization == 0.92


def test_the_ram_check_keeps_the_budgets_reserve() -> None:
    assert ram_allows_another_engine.__defaults__ == (DEFAULT_RESERVE_FRACTION,)


@pytest.mark.parametrize(("visible", "index"), [("3,1", 3), ("", 0), ("GPU-uuid", 0), (None, 0)])
def test_the_nvml_index_follows_cuda_visible_devices(visible: str | None, index: int) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert memory.visible_cuda_index(env) == index


def test_every_nvml_reading_asks_for_the_visible_device(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    info = types.SimpleNamespace(total=100, free=25, used=75)
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: asked.append(index) or index,
        nvmlDeviceGetMemoryInfo=lambda handle: info,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert memory.available_device_fraction() == 0.25
    assert memory.memory_in_use_mb() == 75 / 2**20
    reading: Any = vllm_configs.read_device_memory("cuda")
    assert (reading.where, reading.total_bytes, reading.available_bytes) == ("cuda:2", 100, 25)
    assert asked == [2, 2, 2]
