"""A fake of vLLM-Gaudi's ``MultiModelAsyncLLM``, following its main branch (091bbadd, 2026-08-21).

As ``vllm_gaudi/v1/engine/multi_model_async_llm.py`` and its unit tests
(``tests/unit_tests/test_multi_model_engine_unit.py``): built over a fixed set of aliases; ``initialize(first)``
loads one; ``switch_model(name, drain_timeout)`` raises ``ValueError`` ("not found") for an alias it was not
built with and ``RuntimeError`` before ``initialize`` or after ``shutdown``, returns early
(``switched: False`` and zero times) when the name matches ``current_model``, and otherwise answers
``switched``, ``drain_s``, ``reconfigure_s``, ``switch_s`` updated with what the engine core's
``gaudi_reconfigure_engine`` returns (``core_patch.py``: ``memory_before_mb``, ``memory_after_unload_mb``,
``freed_memory_mb``, ``stash_memory_after_mb``). A failed switch raises ``RuntimeError("Failed to switch model
from A to B: ...")`` and leaves ``current_model`` as it was, whatever its engine then holds. ``shutdown()`` stops
the engine and clears ``current_model``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.fakes.engines import FakeEngine

__all__ = ["FakeStashHost"]

#: What the fake's engine core reports for a switch (MB of Gaudi memory, summed over workers).
CORE_MEMORY = {
    "memory_before_mb": 9000.0,
    "memory_after_unload_mb": 1200.0,
    "freed_memory_mb": 7800.0,
    "stash_memory_after_mb": 512.0,
}


class FakeStashHost:
    """One engine whose model is swapped in place."""

    def __init__(self, aliases: Iterable[str] | None = None) -> None:
        self.engine = FakeEngine("host")
        self.aliases = None if aliases is None else frozenset(aliases)
        self.current_model: str | None = None
        self.switch_calls: list[tuple[str, int]] = []
        self.fail_switch: set[str] = set()
        self.shut_down = False
        self._initialized = False

    async def initialize(self, first: str) -> None:
        self._known(first)
        self.current_model = first
        self.engine.name = first
        self._initialized = True

    async def switch_model(self, model: str, drain_timeout: int = 60) -> dict[str, Any]:
        self.switch_calls.append((model, drain_timeout))
        if not self._initialized:
            raise RuntimeError("Engine not initialized. Call initialize() first.")
        self._known(model)
        if model == self.current_model:
            return {"switched": False, "drain_s": 0.0, "reconfigure_s": 0.0, "switch_s": 0.0}
        if model in self.fail_switch:
            self.fail_switch.discard(model)
            self.engine.name = "<half-reconfigured>"  # its own rollback may not restore the old runner
            raise RuntimeError(f"Failed to switch model from {self.current_model} to {model}: injected")
        self.current_model = model
        self.engine.name = model
        return {"switched": True, "drain_s": 0.0, "reconfigure_s": 0.25, "switch_s": 0.3, **CORE_MEMORY}

    def _known(self, model: str) -> None:
        if self.aliases is not None and model not in self.aliases:
            raise ValueError(f"Model '{model}' not found. Available: {sorted(self.aliases)}")

    def shutdown(self) -> None:
        self.shut_down = True
        self.engine.alive = False
        self.current_model = None
        self._initialized = False
