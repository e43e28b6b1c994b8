"""``stash``: vLLM-Gaudi's in-process reconfigure (``MultiModelAsyncLLM.switch_model``).

One vLLM-Gaudi host engine serves every model: the engine core parks the old model runner in host memory and
restores or loads the target, skipping warm-up. Turnout drains and gates requests itself, so the host is asked to
switch with ``drain_timeout=0``.

Only verified against a fake that follows the contract documented for vLLM-Gaudi's ``MultiModelAsyncLLM``
(``initialize``, ``switch_model`` returning metrics, ``engine``, ``shutdown``): ``vllm_gaudi`` needs Gaudi.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from server.engine.report import ActivationMetrics
from server.engine.states import Slot, SlotState

__all__ = ["StashHost", "StashHostFactory", "StashStrategy"]


class StashHost(Protocol):
    """The part of vLLM-Gaudi's ``MultiModelAsyncLLM`` Turnout uses."""

    engine: Any

    async def switch_model(self, model: str, drain_timeout: int = 60) -> Mapping[str, Any] | None:
        """Reconfigure the engine core to ``model``; returns metrics such as ``reconfigure_s``."""

    def shutdown(self) -> None:
        """Stop the engine."""


#: Builds and initializes the host for the given first model.
StashHostFactory = Callable[[str], Awaitable[StashHost]]


class StashStrategy:
    """Delegates parking and activation to vLLM-Gaudi's reconfigure path."""

    name = "stash"

    def __init__(self, host_factory: StashHostFactory) -> None:
        self._host_factory = host_factory
        self._host: StashHost | None = None

    async def deactivate(self, slot: Slot) -> SlotState:
        # The runner is parked by the host when the next model activates; the shared engine object must not
        # stay reachable from the parked slot.
        slot.engine = None
        return SlotState.STASHED

    async def activate(self, slot: Slot, slots: Sequence[Slot]) -> ActivationMetrics | None:
        if self._host is None:
            self._host = await self._host_factory(slot.name)
            slot.engine = self._host.engine
            return None
        metrics = await self._host.switch_model(slot.name, drain_timeout=0) or {}
        slot.engine = self._host.engine
        return ActivationMetrics(
            reconfigure_ms=_ms(metrics.get("reconfigure_s")),
            stash_memory_after_mb=_number(metrics.get("stash_memory_after_mb")),
        )

    async def release(self, slot: Slot) -> None:
        slot.engine = None

    async def close(self) -> None:
        """Shut the shared host down (manager shutdown)."""
        host, self._host = self._host, None
        if host is not None:
            host.shutdown()


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _ms(seconds: object) -> float | None:
    value = _number(seconds)
    return None if value is None else value * 1000.0
