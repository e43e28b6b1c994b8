"""``stop``: unload the model being left; every activation starts a fresh engine."""

from __future__ import annotations

from collections.abc import Sequence

from server.engine.report import ActivationMetrics
from server.engine.states import Slot, SlotState
from server.engine.strategies.base import EngineLoader, unload_slot

__all__ = ["StopStrategy"]


class StopStrategy:
    """Holds at most one engine: the cheapest in memory, the slowest to switch."""

    name = "stop"

    def __init__(self, loader: EngineLoader) -> None:
        self._loader = loader

    async def deactivate(self, slot: Slot) -> SlotState:
        await self.release(slot)
        return SlotState.STOPPED

    async def activate(self, slot: Slot, slots: Sequence[Slot]) -> ActivationMetrics | None:
        if slot.engine is None:
            slot.attach(await self._loader.load(slot.name, slot.profile))
        return None

    async def release(self, slot: Slot) -> None:
        await unload_slot(slot, self._loader)

    async def close(self) -> None:
        pass  # every engine belongs to a slot, and the slots are released first
