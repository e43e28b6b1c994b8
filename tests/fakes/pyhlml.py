"""A fake of ``pyhlml`` (``habana-pyhlml`` 1.24, Habana's NVML), the functions Turnout's Gaudi memory probe calls.

As the real module: ``hlmlInit`` before anything else, devices by index from ``hlmlDeviceGetCount``,
``hlmlDeviceGetModuleID`` per handle, ``hlmlDeviceGetMemoryInfo`` answering a ``c_hlml_memory`` with ``free``,
``total`` and ``used`` in bytes, ``hlmlShutdown`` last; a call before init raises ``HLMLError``.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

__all__ = ["FakeHlml", "HLMLError", "HlmlMemory"]


class HLMLError(Exception):
    """As ``pyhlml.hlml_error.HLMLError``."""


@dataclass(frozen=True)
class HlmlMemory:
    """As ``pyhlml``'s ``c_hlml_memory``: bytes."""

    free: int
    total: int
    used: int


@dataclass
class FakeHlml:
    """Gaudi devices by index: each a (module ID, memory reading)."""

    devices: list[tuple[int, HlmlMemory]] = field(default_factory=list)
    initialized: int = 0
    shutdowns: int = 0

    def module(self) -> types.ModuleType:
        fake = types.ModuleType("pyhlml")
        fake.hlmlInit = self._init  # type: ignore[attr-defined]
        fake.hlmlShutdown = self._shutdown  # type: ignore[attr-defined]
        fake.hlmlDeviceGetCount = lambda: self._ready() or len(self.devices)  # type: ignore[attr-defined]
        fake.hlmlDeviceGetHandleByIndex = self._handle  # type: ignore[attr-defined]
        fake.hlmlDeviceGetModuleID = lambda handle: self._ready() or self.devices[handle][0]  # type: ignore[attr-defined]
        fake.hlmlDeviceGetMemoryInfo = lambda handle: self._ready() or self.devices[handle][1]  # type: ignore[attr-defined]
        return fake

    def _init(self) -> None:
        self.initialized += 1

    def _shutdown(self) -> None:
        self._ready()
        self.shutdowns += 1

    def _ready(self) -> None:
        if self.initialized <= self.shutdowns:
            raise HLMLError("HLML_ERROR_UNINITIALIZED")

    def _handle(self, index: int) -> int:
        self._ready()
        if not 0 <= index < len(self.devices):
            raise HLMLError("HLML_ERROR_INVALID_ARGUMENT")
        return index
