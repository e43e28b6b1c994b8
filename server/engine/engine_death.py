"""What the manager does when an engine watch reports a death: the slot fails and its requests end at once.

Kept apart from the manager's core as one small hook (:meth:`EngineManager.engine_died`), so that the device
owner of issue #15 can take it over whole. Restarting the engine (healing with the failure backoff) is not here:
an admin switch brings the model back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from server.engine.errors import EngineError
from server.engine.lease import Lease
from server.engine.states import Slot, SlotState

__all__ = ["SUPERVISED_STATES", "end_leases", "slot_holding"]

logger = logging.getLogger("turnout.engine")

#: States whose engine death the manager handles. In ``loading`` and ``draining`` a switch owns the slot: the
#: death fails the switch's own step, and the switch fails and rolls back as it does for any failure.
SUPERVISED_STATES = frozenset({SlotState.ACTIVE, SlotState.RESIDENT, SlotState.SLEEPING})


def slot_holding(slots: Mapping[str, Slot], engine: Any) -> Slot | None:
    """The slot that holds ``engine`` now (by identity: an in-place swap moves one engine between slots)."""
    return next((slot for slot in slots.values() if slot.engine is not None and slot.engine is engine), None)


async def end_leases(leases: Iterable[Lease[Any]], error: EngineError, model: str) -> None:
    """End every lease with ``error``: the flag first, then its abort hook (a stream then ends with the error)."""
    pending = list(leases)
    results = await asyncio.gather(*(lease.abort(error) for lease in pending), return_exceptions=True)
    for lease, result in zip(pending, results, strict=True):
        if isinstance(result, BaseException):
            logger.error("ending request %s of %s failed: %r", lease.request_id, model, result)
