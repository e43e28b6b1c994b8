"""Replacing the manager's set of model slots in one step, for a live reload (see ``EngineManager.replace_models``).

The swap itself never awaits, so no request or switch sees half of it; engines that the new set no longer uses
are handed back detached from the books and released afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from server.engine.states import Slot, SlotState, transition
from server.engine.strategies.base import SwitchStrategy
from server.engine.switch import describe_error
from server.profiles.schema import ModelProfile

__all__ = ["PARKED", "release_slot", "swap_models"]

logger = logging.getLogger("turnout.engine")

#: States in which a slot holds an engine that serves nobody.
PARKED = frozenset({SlotState.RESIDENT, SlotState.SLEEPING, SlotState.STASHED})


def swap_models(
    slots: dict[str, Slot],
    inflight: dict[str, set[Any]],
    models: Mapping[str, ModelProfile],
    new_frontend: Collection[str],
    new_engine: Collection[str],
) -> list[Slot]:
    """Install ``models`` into ``slots`` and ``inflight`` in place; return the slots whose engines must go.

    Kept slots get their new profile (and lose a cached bundle when their frontend changed). A parked slot whose
    engine settings changed is replaced by a fresh one, so its next activation loads with the new settings.
    The caller guarantees that no switch runs and that ``models`` keeps the active model, whose leases are the
    only ones in flight.
    """
    released: list[Slot] = []
    new_slots: dict[str, Slot] = {}
    for name, profile in models.items():
        slot = slots.get(name)
        if slot is None:
            slot = Slot(name=name, profile=profile)
            inflight[name] = set()
        elif name in new_engine and slot.state in PARKED and slot.engine is not None:
            released.append(slot)
            slot = Slot(name=name, profile=profile)
        else:
            slot.profile = profile
            if name in new_frontend:
                slot.drop_bundle()  # the next activation builds it anew
        new_slots[name] = slot
    for name, slot in slots.items():
        if name not in models:
            del inflight[name]
            if slot.engine is not None:
                released.append(slot)
    slots.clear()
    slots.update(new_slots)
    return released


async def release_slot(slot: Slot, strategy: SwitchStrategy) -> None:
    """Free what ``slot`` holds and mark it stopped; a failed release is logged, never raised."""
    try:
        await strategy.release(slot)
    except Exception as exc:
        logger.error("releasing %s failed: %s", slot.name, describe_error(exc))
    transition(slot, SlotState.STOPPED)
