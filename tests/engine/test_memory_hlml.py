"""On Gaudi the switch report's memory comes from HLML (Habana's NVML), as CUDA's from NVML, not from host RSS.

No Gaudi here: tested against a fake of ``pyhlml`` (``tests/fakes/pyhlml.py``) that follows its functions.
"""

from __future__ import annotations

import sys

import pytest

from server.engine import memory
from tests.fakes.pyhlml import FakeHlml, HlmlMemory

MB = 1024 * 1024


@pytest.fixture
def hlml(monkeypatch: pytest.MonkeyPatch) -> FakeHlml:
    fake = FakeHlml([(3, HlmlMemory(free=90 * 1024 * MB, total=96 * 1024 * MB, used=6 * 1024 * MB))])
    fake.devices.append((5, HlmlMemory(free=1 * MB, total=96 * 1024 * MB, used=96 * 1024 * MB - MB)))
    monkeypatch.setitem(sys.modules, "pyhlml", fake.module())
    monkeypatch.setattr(memory, "nvml_memory", lambda: None)  # no NVIDIA device on a Gaudi machine
    monkeypatch.delenv("HABANA_VISIBLE_MODULES", raising=False)
    return fake


def test_memory_in_use_reads_the_first_gaudi_through_hlml(hlml: FakeHlml) -> None:
    assert memory.memory_in_use_mb() == 6 * 1024.0
    assert hlml.initialized == hlml.shutdowns == 1  # each probe releases HLML again


def test_the_visible_module_picks_the_engines_gaudi(hlml: FakeHlml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "5,3")
    assert memory.memory_in_use_mb() == 96 * 1024.0 - 1


def test_a_module_hlml_does_not_list_falls_back_to_rss(hlml: FakeHlml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "7")
    monkeypatch.setattr(memory, "engine_processes_rss_mb", lambda: 12.5)
    assert memory.memory_in_use_mb() == 12.5


def test_without_hlml_the_host_rss_is_the_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # import pyhlml raises ImportError
    monkeypatch.setattr(memory, "nvml_memory", lambda: None)
    monkeypatch.setattr(memory, "engine_processes_rss_mb", lambda: 12.5)
    assert memory.hlml_memory() is None and memory.memory_in_use_mb() == 12.5


def test_nvml_wins_where_it_reads_a_device(hlml: FakeHlml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "nvml_memory", lambda: (0, HlmlMemory(free=0, total=2 * MB, used=2 * MB)))
    assert memory.memory_in_use_mb() == 2.0 and hlml.initialized == 0
