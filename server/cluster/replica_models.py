"""The models Ray's multiplexer holds on one replica, kept through the replica's engine manager.

Ray Serve's model multiplexing (``serve.multiplexed``, ``ray/serve/multiplex.py``) keeps an LRU of at most
``max_num_models_per_replica`` models per replica and routes a model's requests to the replicas that report it: a
request for a model the LRU holds gets the cached object without a load; a miss first evicts the least recently
used entry when the LRU is full (awaiting its ``__del__``), then calls the loader; a failed load caches nothing.
Ray has no call that drops an entry, so its LRU is the record of what Ray routes here, and ``held`` mirrors it,
least recently used first: a model joins when Ray's loader ran, moves to the end at each activation (Ray's hit),
and leaves when Ray evicted it.

The capacity is the manager's :attr:`~server.engine.EngineManager.models_held_at_once`: under ``keep`` with a
memory budget, the most models whose footprints fit in it together (``max_active`` caps it), as the engine's
residency policy counts them. A given set of that many may still not fit (a 4-unit model with two 1-unit ones in 5
units): the manager evicts idle residents by bytes, in the policy's order, to fit the model it brings in, and a
model Ray still holds may lose its engine so (or to the idle timer). Its requests still come here, and the next one
brings it back: the activation switches to it in manual mode, the scheduler in auto mode, evicting by bytes again if
need be; Ray's later eviction of it frees nothing. The report names such models (``held_unloaded``, with the
manager's reason). ``held`` is Ray's order, not the policy's: Ray alone decides which entry its LRU drops.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from server.engine import EngineError, EngineManager, ManagerSnapshot, ResidencyRefused, SlotState

__all__ = ["HeldModel", "ReplicaModels"]

logger = logging.getLogger("turnout.cluster")

#: Slot states without an engine: a model Ray holds in one of them loads again on its next request.
_UNLOADED = frozenset({SlotState.STOPPED, SlotState.FAILED})


class HeldModel:
    """What Ray's multiplexer caches for a model; its ``__del__`` (an instance attribute, so that garbage
    collection never calls it) is the eviction Ray awaits."""

    def __init__(self, models: ReplicaModels, name: str) -> None:
        self.name = name

        async def evict() -> None:
            await models.evicted(name)

        self.__del__ = evict


class ReplicaModels:
    """Ray's loader and eviction hook over one replica's manager, and the record of what Ray holds.

    Args:
        manager: Not initialized yet: the first load starts it with the requested model.
    """

    def __init__(self, manager: EngineManager[Any]) -> None:
        self._manager = manager
        #: Ray's ``max_num_models_per_replica`` for this replica.
        self.capacity = manager.models_held_at_once
        self._started = False
        self._held: list[str] = []
        self._loads = 0
        self._evictions = 0

    async def load(self, name: str) -> HeldModel:
        """Ray's loader (on a miss): make ``name`` active or resident through the manager."""
        manager = self._manager
        if not self._started:
            await manager.initialize(name)  # the first model starts the manager (and its residency timers)
            self._started = True
        elif self.capacity == 1 or manager.active_model is None or not manager.capabilities.serves_several:
            await manager.switch(name)  # sleep parks the model it leaves asleep: it stays held, as Ray counts it
        else:
            await self._load_beside(name)
        self._loads += 1
        self._held.append(name)
        return HeldModel(self, name)

    async def _load_beside(self, name: str) -> None:
        """``keep``: load ``name`` resident beside the active model, which serves on while the engine starts.

        The manager evicts idle residents by bytes to fit it. When even that is not enough because the active
        model holds the room (it is never evicted while it serves), manual mode switches now, as the activation
        that follows would: the active model is parked first, so the budget may then evict it. Auto mode leaves
        it to the scheduler, whose switch to ``name`` does the same when its requests come.
        """
        manager = self._manager
        try:
            await manager.load(name)
        except ResidencyRefused as refused:
            logger.info("%s cannot load beside the active model (%s): it loads as it becomes active", name, refused)
            if not manager.switching.auto:
                await manager.switch(name)

    async def evicted(self, name: str) -> None:
        """Ray's LRU let ``name`` go: free its engine (the active one too: the next load activates another; one
        the manager freed already stays stopped)."""
        self._evictions += 1
        with contextlib.suppress(ValueError):
            self._held.remove(name)
        try:
            await self._manager.unload(name, force=True)
        except EngineError as error:
            logger.warning("unloading %s, which Ray evicted, failed: %s", name, error.message)

    async def activate(self, name: str, hold: Callable[[str], Awaitable[object]]) -> None:
        """Make ``name`` the model requests go to: held by Ray's multiplexer (``hold``, the multiplexed loader),
        and active where the mode is manual (auto mode's scheduler switches by itself)."""
        await hold(name)
        if name in self._held:  # Ray's hit moved it to the end of its LRU: so does the record
            self._held.remove(name)
            self._held.append(name)
        manager = self._manager
        if not manager.switching.auto and manager.active_model != name:
            await manager.switch(name)  # brings back a held model whose engine the manager freed

    def report(self, snapshot: ManagerSnapshot) -> dict[str, Any]:
        """Ray's side for the replica's report: the capacity, what Ray holds (``held``), which of those have no
        engine now and why (``held_unloaded``), and Ray's loads and evictions."""
        unloaded = {slot.name: slot.reason for slot in snapshot.slots if SlotState(slot.state) in _UNLOADED}
        return {
            "capacity": self.capacity,
            "held": list(self._held),
            "held_unloaded": {name: unloaded[name] for name in self._held if name in unloaded},
            "loads": self._loads,
            "evictions": self._evictions,
        }
