"""The one owner of the device's state: the model slots, the leases in flight and the operation under way.

Only this module changes a slot (``tests/engine/test_device_owner.py`` holds that), through intent methods that
name the states they expect to leave (compare-and-set, as llama-swap's ``swapState(expected, new)``): an
unexpected state is an :class:`IllegalTransition` naming both. Every change is logged and wakes the waiters.

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
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from server.engine.change_signal import ChangeSignal, wait_set
from server.engine.errors import EngineError, ManagerClosed, ReloadRefused, ResidencyRefused
from server.engine.kv_budget import MemoryPlan
from server.engine.lease import Lease, Published
from server.engine.report import SwitchReport
from server.engine.scheduling_types import SwitchView
from server.engine.states import PARKED, IllegalTransition, Slot, SlotState
from server.engine.strategies.base import Parked, SwitchStrategy
from server.profiles.schema import ModelProfile

__all__ = ["SUPERVISED", "Device", "SwitchUnderWay", "describe_error"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")

_ANY = frozenset(SlotState)
#: States whose engine's death the device handles. In ``loading`` and ``draining`` a switch owns the slot: the
#: death fails the switch's own step, and the switch rolls back as it does for any failure.
SUPERVISED = frozenset({SlotState.ACTIVE, SlotState.RESIDENT, SlotState.SLEEPING})


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a failed slot (never a traceback)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class SwitchUnderWay(SwitchView):
    """The switch under way: what the scheduler reads, and the task that runs it."""

    task: asyncio.Task[SwitchReport]


class Device(Generic[B]):
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
        self._leases: dict[str, set[Lease[B]]] = {name: set() for name in models}
        self._strategy = strategy
        strategy.models_changed(models)  # the device says which models there are, now and at each reload
        self._memory_plan = memory_plan
        self._published: Published[B] | None = None
        self._switch: SwitchUnderWay | None = None
        self._reload_holds = False
        self._stale: set[str] = set()
        self._dead: set[str] = set()
        self._changes = ChangeSignal()
        self._closed = False

    # -- views (the scheduler's DeviceView among them) ----------------------------------------------------------

    @property
    def models(self) -> Mapping[str, ModelProfile]:
        """Every configured model, in profile order."""
        return {name: slot.profile for name, slot in self._slots.items()}

    @property
    def slots(self) -> Mapping[str, Slot]:
        """Every slot, in profile order (read-only: see :class:`Slot`)."""
        return dict(self._slots)

    @property
    def published(self) -> Published[B] | None:
        """The active model and its bundle, as one object."""
        return self._published

    @property
    def active_model(self) -> str | None:
        """The model that serves requests now, if any."""
        return self._published.model if self._published is not None else None

    @property
    def switch(self) -> SwitchUnderWay | None:
        """The switch under way, if any."""
        return self._switch

    @property
    def free(self) -> bool:
        """No switch runs and no reload holds the device."""
        return self._switch is None and not self._reload_holds

    @property
    def closed(self) -> bool:
        """Whether the manager is shutting down."""
        return self._closed

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The KV-cache budget the configured models run under."""
        return self._memory_plan

    @property
    def stale(self) -> list[str]:
        """Models whose engine runs with settings a reload has since changed (applied at their next load)."""
        return sorted(self._stale & set(self._slots))

    @property
    def dead(self) -> frozenset[str]:
        """Models whose engine died and that have not served since (their next activation is a restart)."""
        return frozenset(self._dead)

    def in_flight(self, model: str) -> int:
        """Requests admitted to ``model`` and not finished."""
        return len(self._leases.get(model, ()))

    def leases(self, model: str) -> list[Lease[B]]:
        """The leases in flight on ``model`` now (a copy)."""
        return list(self._leases.get(model, ()))

    def concurrency_limit(self, model: str) -> int | None:
        """The most requests ``model`` serves at once (its ``max_concurrent_requests``; None: no limit)."""
        slot = self._slots.get(model)
        return slot.profile.max_concurrent_requests if slot is not None else None

    def holder_of(self, engine: Any) -> str | None:
        """The model whose slot holds ``engine`` now (by identity: an in-place swap moves one engine between slots)."""
        return next(
            (slot.name for slot in self._slots.values() if slot.engine is not None and slot.engine is engine), None
        )

    def is_warm(self, model: str) -> bool:
        """Whether ``model`` is parked with its engine (comes back without an engine start)."""
        slot = self._slots.get(model)
        return slot is not None and slot.state in PARKED

    # -- change signal ----------------------------------------------------------------------------------------

    def watch(self) -> asyncio.Event:
        """An event set at the next change (take it before reading, so no change in between is missed)."""
        return self._changes.watch()

    async def wait_change(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the next change; False when none came."""
        return await self._changes.wait(timeout)

    def _changed(self) -> None:
        self._changes.notify()

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

    @asynccontextmanager
    async def held_for_reload(self, timeout: float) -> AsyncIterator[None]:
        """Hold the device between switches for a reload: no switch starts while it holds.

        Waits up to ``timeout`` for a switch under way to end (the scheduler starts none meanwhile).

        Raises:
            ReloadRefused: The device never became free, or another reload holds it.
            ManagerClosed: The server is closing.
        """
        async with self._held(timeout, "reload", ReloadRefused):
            yield

    @asynccontextmanager
    async def held_for_residency(self, timeout: float) -> AsyncIterator[None]:
        """Hold the device between switches to load or unload a model that is not switched to: as a reload
        holds it, so requests for the active model go on and no switch starts meanwhile.

        Raises:
            ResidencyRefused: The device never became free, or a reload, load or unload holds it.
            ManagerClosed: The server is closing.
        """
        async with self._held(timeout, "load or unload", ResidencyRefused):
            yield

    @asynccontextmanager
    async def _held(self, timeout: float, what: str, refused: type[EngineError]) -> AsyncIterator[None]:
        if self._reload_holds:
            raise refused(f"Another reload, load or unload is being applied; try the {what} again when it ends.")
        self._reload_holds = True
        try:
            deadline = asyncio.get_running_loop().time() + timeout
            while self._switch is not None:
                if self._closed:
                    raise ManagerClosed()
                changed = self.watch()
                if self._switch is None:
                    break
                if not await wait_set(changed, deadline - asyncio.get_running_loop().time()):
                    raise refused(
                        f"A switch to '{self._switch.target}' did not end within {timeout:g} s; {what} when it ends."
                    )
            if self._closed:
                raise ManagerClosed()
            yield
        finally:
            self._reload_holds = False
            self._changed()

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

    def stopped(self, name: str, expected: frozenset[SlotState] = _ANY) -> Any:
        """``name`` gives up what it holds and is stopped; returns its engine, for the caller to free."""
        engine = self._slots[name]._detach()
        self._move(name, expected, SlotState.STOPPED)
        return engine

    async def unload(self, name: str, expected: frozenset[SlotState] = _ANY) -> None:
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

    # -- reload -------------------------------------------------------------------------------------------------

    def replace_models(
        self,
        models: Mapping[str, ModelProfile],
        *,
        new_frontend: Collection[str],
        new_engine: Collection[str],
        active_bundle: B | None,
        memory_plan: MemoryPlan | None,
    ) -> list[tuple[str, Any]]:
        """Install ``models`` in one step (no await): slots, leases, profiles, the active model's new bundle and
        the memory plan change together. Returns ``(name, engine)`` of the engines that must be freed now.

        The caller holds the device (:meth:`held_for_reload`), so no switch runs; ``models`` keeps the active
        model, whose leases are the only ones in flight.
        """
        active = self.active_model
        if active is not None and active not in models:
            raise ReloadRefused(f"The profile removes the active model '{active}'; switch to another model first.")
        released: list[tuple[str, Any]] = []
        slots: dict[str, Slot] = {}
        for name, profile in models.items():
            slot = self._slots.get(name)
            if slot is None:
                slot = Slot(name, profile)
                self._leases[name] = set()
            elif name in new_engine and slot.state in PARKED:
                released.append((name, slot._detach()))
                slot._move(PARKED, SlotState.STOPPED)
                slot._set_profile(profile)
            else:
                slot._set_profile(profile)
                if name in new_frontend and name != active:
                    slot._drop_bundle()  # the next activation builds it anew
            slots[name] = slot
        for name, slot in self._slots.items():
            if name not in models:
                del self._leases[name]
                if slot.engine is not None:
                    released.append((name, slot._detach()))
                slot._move(_ANY, SlotState.STOPPED)
        self._slots = slots
        if active is not None and active_bundle is not None:
            self._published = self._slots[active]._hold_bundle(active_bundle)
            logger.info("reload: published a new frontend bundle for %s", active)
        if active is not None and active in new_engine:
            self._stale.add(active)
        self._stale &= set(models)
        self._dead &= set(models)
        self._memory_plan = memory_plan
        self._strategy.models_changed(models)
        self._changed()
        return [(name, engine) for name, engine in released if engine is not None]

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

    def __iter__(self) -> Iterator[Slot]:
        return iter(list(self._slots.values()))


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
        return sum(1 for slot in self._device if slot.name != self._target and slot.engine is not None)

    async def evict(self, name: str) -> None:
        await self._device.unload(name, frozenset({SlotState.RESIDENT}))

    def take_engine(self, name: str) -> Any:
        return self._device.stopped(name, frozenset({SlotState.RESIDENT}))
