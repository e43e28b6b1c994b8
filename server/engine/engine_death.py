"""What the manager does when an engine watch reports a death: the slot fails and its requests end at once.

The manager's :meth:`~server.engine.manager.EngineManager.engine_died` and ``failure_of`` are :class:`EngineDeaths`'s;
the slot changes through the device's intents. Restarting the engine (healing with the failure backoff) is
``healing.py``'s, which is told here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from server.engine.admission import Admission
from server.engine.device import SUPERVISED, Device
from server.engine.errors import EngineDied, EngineError
from server.engine.healing import Healer
from server.engine.lease import Lease
from server.engine.observer import Observers
from server.engine.supervision import engine_is_dead

__all__ = ["EngineDeaths", "end_leases"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")


async def end_leases(leases: Iterable[Lease[Any]], error: EngineError, model: str) -> None:
    """End every lease with ``error``: the flag first, then its abort hook (a stream then ends with the error)."""
    pending = list(leases)
    results = await asyncio.gather(*(lease.abort(error) for lease in pending), return_exceptions=True)
    for lease, result in zip(pending, results, strict=True):
        if isinstance(result, BaseException):
            logger.error("ending request %s of %s failed: %r", lease.request_id, model, result)


class EngineDeaths(Generic[B]):
    """Handles an engine watch's reports of one manager's engines, and tells why a request on a dead one failed."""

    def __init__(self, device: Device[B], observers: Observers, admission: Admission[B], healer: Healer) -> None:
        self._device = device
        self._observers = observers
        self._admission = admission
        self._healer = healer

    async def died(self, engine: Any, cause: str) -> None:
        """``engine`` died or hung: see :meth:`~server.engine.manager.EngineManager.engine_died`."""
        device = self._device
        name = device.holder_of(engine)
        if name is None or device.closed or device.slots[name].state not in SUPERVISED:
            logger.warning("engine died (%s), but no serving or parked slot holds it: left to its owner", cause)
            return
        was_active = device.active_model == name
        leases = device.leases(name)
        freed = device.engine_died(name, cause)
        self._observers.engine_died(name, cause)
        await end_leases(leases, EngineDied(name, cause), name)
        await device.free_engine(name, freed)
        self._admission.device_changed()  # auto mode: the device is free for the next waiter's model
        self._healer.died(name, was_active=was_active)  # manual mode restarts it (server/engine/healing.py)

    def failure_of(self, lease: Lease[B]) -> EngineError | None:
        """Why ``lease``'s request failed: see :meth:`~server.engine.manager.EngineManager.failure_of`."""
        if lease.aborted_by is not None:
            return lease.aborted_by
        slot = self._device.slots.get(lease.model)
        engine = slot.engine if slot is not None else None
        if engine is not None and engine_is_dead(engine):
            return EngineDied(lease.model, "engine died (its watch has not reported the cause yet)")
        return None
