"""What a strategy may ask of the device while it brings a model up: its resident engines, and evicting one or
taking its engine (``strategies/base.py``'s ``Room``). Every change goes through the device's intents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from server.engine.states import Slot, SlotState

if TYPE_CHECKING:
    from server.engine.device import Device

__all__ = ["DeviceRoom"]

B = TypeVar("B")


class DeviceRoom(Generic[B]):
    """What a strategy may ask of the device while it brings ``target`` up (``strategies/base.py``'s Room)."""

    def __init__(self, device: Device[B], target: str) -> None:
        self._device = device
        self._target = target

    def residents(self) -> Sequence[Slot]:
        slots = [
            slot
            for slot in self._device
            if slot.name != self._target
            and slot.state is SlotState.RESIDENT
            and slot.engine is not None
            and not slot.profile.pinned  # a pinned model is never evicted nor has its engine taken
        ]
        return sorted(slots, key=lambda slot: slot.last_active)

    def engines_held(self) -> int:
        return len(self.holders())

    def holders(self) -> Sequence[Slot]:
        return [slot for slot in self._device if slot.name != self._target and slot.engine is not None]

    async def evict(self, name: str) -> None:
        await self._device.unload(name, frozenset({SlotState.RESIDENT}))

    def take_engine(self, name: str) -> Any:
        return self._device.stopped(name, frozenset({SlotState.RESIDENT}))
