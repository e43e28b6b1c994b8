"""``keep``: the model being left stays resident, so switching back only swaps the pointer.

Residency is bounded: by ``max_resident`` engines and, when a ``memory_allows`` check is given (the CPU ``auto``
policy), by host RAM. Before a new engine loads, the least recently active residents are unloaded until both
bounds hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from server.engine.report import ActivationMetrics
from server.engine.states import Slot, SlotState, transition
from server.engine.strategies.base import EngineLoader, unload_slot

__all__ = ["KeepStrategy"]

logger = logging.getLogger("turnout.engine")


class KeepStrategy:
    """Engines stay loaded; activation of a resident model is a pointer swap."""

    name = "keep"

    def __init__(
        self,
        loader: EngineLoader,
        *,
        max_resident: int | None = None,
        memory_allows: Callable[[], bool] | None = None,
    ) -> None:
        """Create the strategy.

        Args:
            loader: Starts and stops engines.
            max_resident: Most engines held at once, the active one included (None: no count limit).
            memory_allows: Says whether another engine fits next to those held; None means always.
        """
        self._loader = loader
        self._max_resident = max_resident
        self._memory_allows = memory_allows

    async def deactivate(self, slot: Slot) -> SlotState:
        return SlotState.RESIDENT

    async def activate(self, slot: Slot, slots: Sequence[Slot]) -> ActivationMetrics | None:
        if slot.engine is None:
            await self._evict_for_one_more(slot, slots)
            slot.engine = await self._loader.load(slot.name, slot.profile)
        return None

    async def release(self, slot: Slot) -> None:
        await unload_slot(slot, self._loader)

    async def close(self) -> None:
        pass  # every engine belongs to a slot, and the slots are released first

    async def _evict_for_one_more(self, incoming: Slot, slots: Sequence[Slot]) -> None:
        residents = sorted(
            (s for s in slots if s is not incoming and s.state is SlotState.RESIDENT and s.engine is not None),
            key=lambda s: s.last_active,
        )
        held = sum(1 for s in slots if s is not incoming and s.engine is not None)
        for victim in residents:
            over_count = self._max_resident is not None and held + 1 > self._max_resident
            over_memory = self._memory_allows is not None and not self._memory_allows()
            if not (over_count or over_memory):
                break
            logger.info("keep: evicting resident %s to make room for %s", victim.name, incoming.name)
            await self.release(victim)
            transition(victim, SlotState.STOPPED)
            held -= 1
