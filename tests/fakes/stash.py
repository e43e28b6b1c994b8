"""A fake of vLLM-Gaudi's ``MultiModelAsyncLLM``, following its documented contract.

``initialize(first)`` loads one model; ``switch_model(name, drain_timeout)`` reconfigures the single engine in
place and returns a metrics dict with ``reconfigure_s``, memory readings and ``stash_memory_after_mb``;
``engine`` is the one ``AsyncLLM``; ``shutdown()`` stops it. As in vLLM-Gaudi's code, ``switch_model`` returns
early (``switched: False``) when the name matches ``current_model``, and a failed switch raises and leaves
``current_model`` as it was, whatever its engine then holds.
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
        self.fail_switch: set[str] = set()
        self.shut_down = False

    async def initialize(self, first: str) -> None:
        self.current_model = first
        self.engine.name = first

    async def switch_model(self, model: str, drain_timeout: int = 60) -> dict[str, Any]:
        self.switch_calls.append((model, drain_timeout))
        if model == self.current_model:
            return {"switched": False, "reconfigure_s": 0.0}
        if model in self.fail_switch:
            self.fail_switch.discard(model)
            self.engine.name = "<half-reconfigured>"  # its own rollback may not restore the old runner
            raise RuntimeError(f"Failed to switch model from {self.current_model} to {model}: injected")
        self.current_model = model
        self.engine.name = model
        return {"reconfigure_s": 0.25, "memory_before_mb": 900.0, "stash_memory_after_mb": 512.0}

    def shutdown(self) -> None:
        self.shut_down = True
        self.engine.alive = False
