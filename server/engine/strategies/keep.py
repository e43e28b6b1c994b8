"""``keep``: the model being left stays resident, so switching back only swaps the pointer.

Residency is bounded: by ``max_resident`` engines and, when a ``memory_allows`` check is given (the ``auto``
policy), by memory. Before a new engine loads, the least recently active residents are unloaded until both
bounds hold. With an in-place swap (``auto`` on CPU and CUDA) a full house does not evict and start anew: the
least recently active resident engine takes the target in place (``reconfigure``), when the pair allows it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from server.engine.report import ActivationMetrics
from server.engine.states import Slot, SlotState, transition
from server.engine.strategies.base import EngineLoader, unload_slot
from server.engine.strategies.reconfigure import InPlaceSwapper

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
        in_place: InPlaceSwapper | None = None,
    ) -> None:
        """Create the strategy.

        Args:
            loader: Starts and stops engines.
            max_resident: Most engines held at once, the active one included (None: no count limit).
            memory_allows: Says whether another engine fits next to those held; None means always.
            in_place: Swaps the model inside a resident engine when no other fits; ``loader`` must start
                engines with its worker extension.
        """
        self._loader = loader
        self._max_resident = max_resident
        self._memory_allows = memory_allows
        self._in_place = in_place

    async def deactivate(self, slot: Slot) -> SlotState:
        return SlotState.RESIDENT

    async def activate(self, slot: Slot, slots: Sequence[Slot]) -> ActivationMetrics | None:
        if slot.engine is not None:
            return None
        if self._in_place is not None and self._full(slot, slots):
            reused = await self._reconfigure_a_resident(slot, slots, self._in_place)
            if reused is not None:
                return reused
        await self._evict_for_one_more(slot, slots)
        slot.attach(await self._loader.load(slot.name, slot.profile))
        return ActivationMetrics(method="restart") if self._in_place is not None else None

    async def release(self, slot: Slot) -> None:
        await unload_slot(slot, self._loader)

    async def close(self) -> None:
        pass  # every engine belongs to a slot, and the slots are released first

    def _residents(self, incoming: Slot, slots: Sequence[Slot]) -> list[Slot]:
        """Resident engines other than ``incoming``'s, least recently active first."""
        return sorted(
            (s for s in slots if s is not incoming and s.state is SlotState.RESIDENT and s.engine is not None),
            key=lambda s: s.last_active,
        )

    def _full(self, incoming: Slot, slots: Sequence[Slot]) -> bool:
        held = sum(1 for s in slots if s is not incoming and s.engine is not None)
        over_count = self._max_resident is not None and held + 1 > self._max_resident
        return over_count or (self._memory_allows is not None and not self._memory_allows())

    async def _reconfigure_a_resident(
        self, incoming: Slot, slots: Sequence[Slot], in_place: InPlaceSwapper
    ) -> ActivationMetrics | None:
        """Load ``incoming`` into the least recently active resident engine that can take it in place."""
        for victim in self._residents(incoming, slots):
            reason = await in_place.incompatibility(victim.engine, incoming.name, incoming.profile)
            if reason is not None or victim.profile.quant_config != incoming.profile.quant_config:
                logger.info("keep: %s cannot take %s in place (%s)", victim.name, incoming.name, reason)
                continue
            logger.info("keep: no room for another engine; %s's engine takes %s in place", victim.name, incoming.name)
            engine = victim.detach()
            transition(victim, SlotState.STOPPED)
            # From here on the engine is the incoming slot's: a failure releases it with that slot.
            incoming.attach(engine)
            unloaded = await in_place.unload(engine)
            outcome = await in_place.load(engine, incoming.name, incoming.profile)
            result = outcome.result
            return ActivationMetrics(
                method=result.method,
                unload_ms=unloaded.unload_ms + result.unload_ms,
                load_ms=result.load_ms,
                kv_cache_ms=result.kv_cache_ms + result.scheduler_ms,
                frontend_ms=outcome.frontend_ms,
            )
        return None

    async def _evict_for_one_more(self, incoming: Slot, slots: Sequence[Slot]) -> None:
        residents = self._residents(incoming, slots)
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
