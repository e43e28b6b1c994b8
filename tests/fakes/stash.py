"""A fake of vLLM-Gaudi's ``MultiModelAsyncLLM``, following its documented contract.

``initialize(first)`` loads one model; ``switch_model(name, drain_timeout)`` reconfigures the single engine in
place and returns a metrics dict with ``reconfigure_s``, memory readings and ``stash_memory_after_mb``;
``engine`` is the one ``AsyncLLM``; ``shutdown()`` stops it.
"""

from __future__ import annotations

from typing import Any

from tests.fakes.engines import FakeEngine

__all__ = ["FakeStashHost"]


class FakeStashHost:
    """One engine whose model is swapped in place."""

    def __init__(self) -> None:
        self.engine = FakeEngine("host")
        self.current_model: str | None = None
        self.switch_calls: list[tuple[str, int]] = []
        self.shut_down = False

    async def initialize(self, first: str) -> None:
        self.current_model = first
        self.engine.name = first

    async def switch_model(self, model: str, drain_timeout: int = 60) -> dict[str, Any]:
        self.switch_calls.append((model, drain_timeout))
        self.current_model = model
        self.engine.name = model
        return {"reconfigure_s": 0.25, "memory_before_mb": 900.0, "stash_memory_after_mb": 512.0}

    def shutdown(self) -> None:
        self.shut_down = True
        self.engine.alive = False
