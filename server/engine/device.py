"""The one owner of the device's state: the model slots, the leases in flight and the operation under way.

Only :class:`Device` changes a slot (``tests/engine/test_device.py`` holds that), through intent methods that
name the states they expect to leave (compare-and-set, as llama-swap's ``swapState(expected, new)``): an
unexpected state is an :class:`IllegalTransition` naming both. Every change is logged and wakes the waiters.

Split by role: this module holds the slot intents, the leases and the switch under way; ``device_reload.py``
the hold between switches and a reload's swap-in (the device inherits both it and, below it, the read-only views
of ``device_views.py``); ``device_room.py`` what a strategy may ask of the device while it brings a model up.

What it holds, each fact once:
    * the slots (profile, state, engine, bundle) of the configured models;
    * the leases in flight, per model (the scheduler reads their count from here);
    * the switch under way (at most one), or a reload holding the device between switches;
    * the published snapshot (active model and bundle) and the KV-cache memory plan;
    * the models whose engines run with settings a reload has since changed.

Everything runs on one asyncio loop and changes happen between awaits, so no lock is needed: waiters watch a
broadcast event that every change replaces (``change_signal.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, TypeVar

from server.engine.change_signal import ChangeSignal
from server.engine.device_reload import DeviceReload
from server.engine.device_room import DeviceRoom
from server.engine.device_views import ANY_STATE, SwitchUnderWay
from server.engine.kv_budget import MemoryPlan
from server.engine.lease import Lease, Published
from server.engine.report import SwitchReport
from server.engine.states import PARKED, IllegalTransition, Slot, SlotState
from server.engine.strategies.base import Parked, SwitchStrategy
from server.profiles.schema import ModelProfile

__all__ = ["SUPERVISED", "Device", "SwitchUnderWay", "describe_error"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")

#: States whose engine's death the device handles. In ``loading`` and ``draining`` a switch owns the slot: the
#: death fails the switch's own step, and the switch rolls back as it does for any failure.
SUPERVISED = frozenset({SlotState.ACTIVE, SlotState.RESIDENT, SlotState.SLEEPING})


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a failed slot (never a traceback)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Device(DeviceReload[B]):
    """Holds the slots, the leases in flight and the switch under way; the only code that changes them.

    Args:
        models: Model name to profile, in profile order.
        strategy: Frees the engines that slots give up (eviction, failure, shutdown, reload); told the models.
        memory_plan: The KV-cache budget the models run under (None where Turnout does not budget).
    """

    def __init__(
        self, models: Mapping[str, ModelProfile], strategy: SwitchStrategy, memory_plan: MemoryPlan | None = None
    ) -> None:
        if not models:
            raise ValueError("the device needs at least one model")
        self._slots = {name: Slot(name, profile) for name, profile in models.items()}
        self._leases = {name: set() for name in models}
        self._strategy = strategy
        strategy.models_changed(models)  # the device says which models there are, now and at each reload
        self._memory_plan = memory_plan
        self._published = None
        self._switch = None
        self._reload_holds = False
        self._stale = set()
        self._dead = set()
        self._changes = ChangeSignal()
        self._closed = False

    # -- leases -------------------------------------------------------------------------------------------------

    def lease(self, model: str) -> Lease[B]:
        """A new lease on the published ``model``, counted in flight at once (a later drain sees it)."""
        published = self._published
        if published is None or published.model != model or self._switch is not None:
            raise IllegalTransition(f"a lease on {model!r} while {self.active_model!r} is published")
        lease: Lease[B] = Lease(published=published)
        self._leases[model].add(lease)
        return lease

    def release(self, lease: Lease[B]) -> bool:
        """End ``lease``; False when it had ended already (idempotent)."""
        leases = self._leases.get(lease.model)
        if leases is None or lease not in leases:
            return False
        leases.discard(lease)
        self._changed()
        return True

    # -- the operation under way --------------------------------------------------------------------------------

    def open_switch(self, target: str, task: asyncio.Task[SwitchReport]) -> SwitchUnderWay:
        """Record the switch to ``target`` that ``task`` runs: from now on requests wait or are refused."""
        if not self.free:
            raise IllegalTransition(f"a switch to {target!r} while the device is not free")
        self._switch = SwitchUnderWay(
            source=self.active_model,
            target=target,
            started_at=time.monotonic(),
            warm=self.is_warm(target),
            task=task,
        )
        self._changed()
        return self._switch

    def close_switch(self, published: Published[B] | None) -> SwitchUnderWay:
        """The switch ended: publish its outcome in one assignment and free the device."""
        switch = self._switch
        if switch is None:
            raise IllegalTransition("close_switch without a switch")
        self._published, self._switch = published, None
        self._changed()
        return switch

    def close(self) -> None:
        """Refuse everything from now on and publish nothing (shutdown)."""
        self._closed = True
        self._published = None
        self._changed()

    # -- slot intents (compare-and-set) -------------------------------------------------------------------------

    def start_loading(self, name: str) -> SlotState:
        """``name`` is being brought up (a fresh load, a wake-up, a restore); returns the state it left."""
        old = self._slots[name]._move(frozenset({SlotState.STOPPED, SlotState.FAILED, *PARKED}), SlotState.LOADING)
        self._log(name, old, SlotState.LOADING)
        return old

    def brought_up(self, name: str, engine: Any) -> None:
        """The loading ``name`` holds ``engine`` now (a bundle built for another engine is dropped)."""
        slot = self._expect(name, SlotState.LOADING)
        if engine is not slot.engine:
            slot._attach(engine)

    def hold_bundle(self, name: str, bundle: B) -> Published[B]:
        """Keep ``bundle``, built for the engine ``name`` holds, as what it publishes."""
        published: Published[B] = self._slots[name]._hold_bundle(bundle)
        return published

    def activated(self, name: str) -> None:
        """The loading ``name`` is up and will be published when the switch closes."""
        self._move(name, frozenset({SlotState.LOADING}), SlotState.ACTIVE)
        self._dead.discard(name)

    def loaded_resident(self, name: str) -> None:
        """The loading ``name`` is up and stays resident without being published (a load or a preload)."""
        self._slots[name]._touch(time.monotonic())  # its idle time and LRU age start now
        self._move(name, frozenset({SlotState.LOADING}), SlotState.RESIDENT)

    def unpublish(self, name: str) -> None:
        """The active ``name`` stops serving with nothing after it (an unload): it drains, and no model is active.

        The caller holds the device (:meth:`held_for_residency`), so no switch runs.
        """
        if self._switch is not None or self.active_model != name:
            raise IllegalTransition(f"unpublishing {name!r} while {self.active_model!r} is published")
        self._move(name, frozenset({SlotState.ACTIVE}), SlotState.DRAINING)
        self._published = None
        self._changed()

    def start_draining(self, name: str) -> None:
        """The active ``name`` is being left: its requests drain."""
        self._move(name, frozenset({SlotState.ACTIVE}), SlotState.DRAINING)

    def parked(self, name: str, parked: Parked) -> None:
        """The drained ``name`` is parked as the strategy says (its engine kept, or given up)."""
        slot = self._slots[name]
        if parked.engine is None:
            slot._detach()
        elif parked.engine is not slot.engine:
            slot._attach(parked.engine)
        slot._touch(time.monotonic())
        self._move(name, frozenset({SlotState.DRAINING}), parked.state)

    def stays_active(self, name: str) -> None:
        """Parking the drained ``name`` failed, but it holds its engine: it serves on."""
        self._move(name, frozenset({SlotState.DRAINING}), SlotState.ACTIVE)

    def engine_lost(self, name: str) -> None:
        """Parking the drained ``name`` took its engine with it: it is stopped."""
        self._slots[name]._detach()
        self._move(name, frozenset({SlotState.DRAINING}), SlotState.STOPPED)

    def failed(self, name: str, reason: str) -> Any:
        """Bringing ``name`` up failed: it is marked failed; returns the engine it held, for the caller to free."""
        engine = self._slots[name]._detach()
        self._move(name, frozenset({SlotState.LOADING, SlotState.FAILED}), SlotState.FAILED, reason)
        return engine

    def engine_died(self, name: str, cause: str) -> Any:
        """``name``'s engine died while it served or was parked: it fails with ``cause`` and, when it was active,
        is published no more (no switch runs then: a switch holds its slots in ``draining`` or ``loading``).
        Returns the dead engine, for the caller to free."""
        if self.active_model == name:
            self._published = None
        engine = self._slots[name]._detach()
        self._move(name, SUPERVISED, SlotState.FAILED, cause)
        self._dead.add(name)
        return engine

    def stopped(self, name: str, expected: frozenset[SlotState] = ANY_STATE) -> Any:
        """``name`` gives up what it holds and is stopped; returns its engine, for the caller to free."""
        engine = self._slots[name]._detach()
        self._move(name, expected, SlotState.STOPPED)
        return engine

    async def unload(self, name: str, expected: frozenset[SlotState] = ANY_STATE) -> None:
        """Stop ``name`` and free its engine through the strategy; a failed unload is logged, never raised."""
        engine = self.stopped(name, expected)
        await self.free_engine(name, engine)

    async def free_engine(self, name: str, engine: Any) -> None:
        """Have the strategy free ``engine``, which ``name``'s slot gave up; failures are logged, never raised."""
        if engine is None:
            return
        try:
            await self._strategy.unload(name, engine)
        except Exception as exc:
            logger.error("unloading %s failed: %s", name, describe_error(exc))

    def room_for(self, target: str) -> DeviceRoom[B]:
        """The :class:`~server.engine.strategies.base.Room` a strategy gets to bring ``target`` up."""
        return DeviceRoom(self, target)

    # -- after a switch -----------------------------------------------------------------------------------------

    async def unload_stale_parked(self) -> None:
        """Unload the parked engines whose settings a reload changed (called after every switch)."""
        for name in sorted(self._stale):
            slot = self._slots.get(name)
            if slot is None or slot.engine is None:
                self._stale.discard(name)
            elif slot.state in PARKED:
                logger.info("unloading %s: a reload changed its engine settings", name)
                self._stale.discard(name)
                await self.unload(name, PARKED)

    # -- helpers ------------------------------------------------------------------------------------------------

    def _expect(self, name: str, state: SlotState) -> Slot:
        slot = self._slots[name]
        if slot.state is not state:
            raise IllegalTransition(f"{name}: expected {state}, found {slot.state}")
        return slot

    def _move(self, name: str, expected: frozenset[SlotState], new: SlotState, reason: str | None = None) -> None:
        old = self._slots[name]._move(expected, new, reason)
        self._log(name, old, new, reason)

    def _log(self, name: str, old: SlotState, new: SlotState, reason: str | None = None) -> None:
        logger.info("slot %s: %s -> %s%s", name, old, new, f" ({reason})" if reason else "")
        self._changed()
