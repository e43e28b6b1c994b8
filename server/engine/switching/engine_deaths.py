"""What the manager does when an engine watch reports a death, and why a request on a dead engine failed.

The manager's :meth:`~server.engine.manager.EngineManager.engine_died` and ``failure_of`` are :class:`EngineDeaths`'s;
the model slots run the death themselves (:meth:`ModelSlots.mark_dead`: the slot fails and its requests end at
once), and their change signal tells the scheduler. Restarting the engine (healing with the failure backoff) is
``healing.py``'s, which is told here.
"""

from __future__ import annotations

import logging
from typing import Any, Generic, TypeVar

from server.engine.supervision import Healer, engine_is_dead
from server.engine.switching.model_slots import ModelSlots
from server.engine.types import EngineDied, EngineError, Lease, Observers

__all__ = ["EngineDeaths"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")


class EngineDeaths(Generic[B]):
    """Handles an engine watch's reports of one manager's engines, and tells why a request on a dead one failed."""

    def __init__(self, slots: ModelSlots[B], observers: Observers, healer: Healer) -> None:
        self._slots = slots
        self._observers = observers
        self._healer = healer

    async def died(self, engine: Any, cause: str) -> None:
        """``engine`` died or hung: see :meth:`~server.engine.manager.EngineManager.engine_died`."""
        dead = await self._slots.mark_dead(engine, cause)
        if dead is None:
            logger.warning("engine died (%s), but no serving or parked slot holds it: left to its owner", cause)
            return
        name, was_active = dead
        self._observers.engine_died(name, cause)
        self._healer.died(name, was_active=was_active)  # manual mode restarts it (server/engine/supervision/healing.py)

    def failure_of(self, lease: Lease[B]) -> EngineError | None:
        """Why ``lease``'s request failed: see :meth:`~server.engine.manager.EngineManager.failure_of`."""
        if lease.aborted_by is not None:
            return lease.aborted_by
        slot = self._slots.slots.get(lease.model)
        engine = slot.engine if slot is not None else None
        if engine is not None and engine_is_dead(engine):
            return EngineDied(lease.model, "engine died (its watch has not reported the cause yet)")
        return None
