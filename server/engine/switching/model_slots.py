"""The one owner of the serving state: the model slots, the leases in flight and the operation under way.

Only :class:`ModelSlots` changes a slot (``tests/engine/test_device.py`` holds that), and only through
:meth:`ModelSlots._move`, which names the states it expects to leave (compare-and-set, as llama-swap's
``swapState(expected, new)``: an unexpected state is an :class:`IllegalTransition` naming both), logs the move and
wakes the waiters. Its public methods are intents that run a whole step with its checks (bring a model up, park
it, end its requests, load or unload it, mark it dead, reload the models), so callers do not order its steps.

What it holds, each fact once:
    * the slots (profile, state, engine, bundle) of the configured models;
    * the leases in flight, per model (the scheduler reads their count from here);
    * the switch under way (at most one), or a reload, load or unload holding the device between switches;
    * the published snapshot (active model and bundle) and the KV-cache memory plan;
    * the models whose engines run with settings a reload has since changed;
    * whether the manager is closing.

Everything runs on one asyncio loop and changes happen between awaits, so no lock is needed: waiters watch a
broadcast event that every change replaces, and the scheduler subscribes to it (``change_signal.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, cast

import msgspec

from server.engine.residency import Weighing, in_eviction_order
from server.engine.runtime import ENGINE_STARTS
from server.engine.switching.change_signal import ChangeSignal, wait_set
from server.engine.types import (
    PARKED,
    ActivationMetrics,
    BroughtUp,
    Change,
    EngineDied,
    EngineError,
    EngineLost,
    EngineStart,
    IllegalTransition,
    Lease,
    LeaseEnded,
    LoadFailed,
    ManagerClosed,
    MemoryPlan,
    ModelProver,
    Published,
    ReloadFailed,
    ReloadRefused,
    ResidencyRefused,
    ResidentLoader,
    Slot,
    SlotState,
    SwitchBegan,
    SwitchEnded,
    SwitchReport,
    SwitchStrategy,
    SwitchView,
)
from server.profiles.schema import ModelProfile

__all__ = ["SUPERVISED", "UNLOADABLE", "BundleBuilder", "ModelSlots", "SwitchUnderWay", "describe_error"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")
#: Builds one model's frontend bundle: ``(name, profile, engine) -> bundle``. Supplied by the frontend layer.
BundleBuilder = Callable[[str, ModelProfile, Any], Awaitable[B]]

#: States whose engine's death the device handles. In ``loading`` and ``draining`` a switch owns the slot: the
#: death fails the switch's own step, and the switch rolls back as it does for any failure.
SUPERVISED = frozenset({SlotState.ACTIVE, SlotState.RESIDENT, SlotState.SLEEPING})
#: Every slot state: what an intent that may leave any state expects.
ANY_STATE = frozenset(SlotState)
#: States an unload frees without a drain: the engine is parked (a stashed slot's runner is the host's).
UNLOADABLE = frozenset({SlotState.RESIDENT, SlotState.SLEEPING})
#: Seconds a hold waits for a switch under way beyond the drain timeout (the switch's own drain, then its load).
HOLD_MARGIN_S = 60.0


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a failed slot (never a traceback)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class SwitchUnderWay(SwitchView):
    """The switch under way: what the scheduler reads, and the task that runs it."""

    task: asyncio.Task[SwitchReport]


class ModelSlots(Generic[B]):
    """Holds the slots, the leases in flight and the switch under way; the only code that changes them.

    Args:
        models: Model name to profile, in profile order.
        strategy: Brings engines up, parks and frees them (it reads the models through the :class:`SlotAccess` it
            is given).
        build_bundle: Builds a model's frontend bundle once its engine is up (None: no bundles, as the slot tests run).
        memory_plan: The KV-cache budget the models run under (None where Turnout does not budget).
        drain_timeout: The profile's drain timeout: a hold waits for a switch under way this long plus
            :data:`HOLD_MARGIN_S`.
    """

    def __init__(
        self,
        models: Mapping[str, ModelProfile],
        strategy: SwitchStrategy,
        build_bundle: BundleBuilder[B] | None = None,
        memory_plan: MemoryPlan | None = None,
        *,
        drain_timeout: float = 30.0,
        weighing: Weighing | None = None,
    ) -> None:
        if not models:
            raise ValueError("the model slots need at least one model")
        self._slots = {name: Slot(name, profile) for name, profile in models.items()}
        self._leases: dict[str, set[Lease[B]]] = {name: set() for name in models}
        self._strategy = strategy
        self._build_bundle = build_bundle
        self._memory_plan = memory_plan
        self._weighing = weighing or Weighing()
        self._published: Published[B] | None = None
        self._switch: SwitchUnderWay | None = None
        self._held = False  # a reload, load or unload holds the device between switches
        self._stale: set[str] = set()
        self._changes = ChangeSignal()
        self._closed = False
        self.hold_timeout = drain_timeout + HOLD_MARGIN_S

    # -- views (read-only) --------------------------------------------------------------------------------------

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
        """No switch runs and no reload, load or unload holds the device."""
        return self._switch is None and not self._held

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

    def priority(self, model: str) -> int:
        """``model``'s ``priority`` (0 for a name that is no model's)."""
        slot = self._slots.get(model)
        return slot.profile.priority if slot is not None else 0

    def holder_of(self, engine: Any) -> str | None:
        """The model whose slot holds ``engine`` now (by identity: an in-place swap moves one engine between slots)."""
        return next(
            (slot.name for slot in self._slots.values() if slot.engine is not None and slot.engine is engine), None
        )

    def is_warm(self, model: str) -> bool:
        """Whether ``model`` is parked with its engine (comes back without an engine start)."""
        slot = self._slots.get(model)
        return slot is not None and slot.state in PARKED

    def __iter__(self) -> Iterator[Slot]:
        return iter(list(self._slots.values()))

    # -- the change signal --------------------------------------------------------------------------------------

    def watch(self) -> asyncio.Event:
        """An event set at the next change (take it before reading, so no change in between is missed)."""
        return self._changes.watch()

    async def wait_change(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the next change; False when none came."""
        return await self._changes.wait(timeout)

    def subscribe(self, subscriber: Callable[[Change], None]) -> None:
        """Tell ``subscriber`` of every change from now on (the scheduler's one change path)."""
        self._changes.subscribe(subscriber)

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
        self._changes.notify(LeaseEnded(lease.model))
        return True

    async def end_requests(
        self, model: str, timeout: float, error: EngineError, why: str, *, grace: float = 0.0
    ) -> tuple[float, int]:
        """The one way requests end early: wait up to ``timeout`` seconds for ``model``'s requests, then abort what
        is left with ``error`` and give the aborted ones ``grace`` seconds to leave (so each ends with that error
        before the engine goes away). ``why`` ends the log line.

        Returns:
            The milliseconds it took and how many requests were aborted.
        """
        started = time.perf_counter()
        deadline = time.monotonic() + timeout
        while self.in_flight(model) and await self.wait_change(deadline - time.monotonic()):
            pass
        left = self.leases(model)
        if left:
            logger.warning("ending %d request(s) on %s %s", len(left), model, why)
            for lease in left:
                # Every one knows why at once: a request whose engine call fails now must not answer before its
                # abort task runs (a dead engine's request got vLLM's 500 in that one loop step, not engine_died).
                lease.aborted_by = error
            results = await asyncio.gather(*(lease.abort(error) for lease in left), return_exceptions=True)
            for lease, result in zip(left, results, strict=True):
                if isinstance(result, BaseException):
                    logger.error("ending request %s on %s failed: %s", lease.request_id, model, describe_error(result))
            grace_deadline = time.monotonic() + grace
            while self.in_flight(model) and await self.wait_change(grace_deadline - time.monotonic()):
                pass
        return (time.perf_counter() - started) * 1000.0, len(left)

    # -- the switch under way -----------------------------------------------------------------------------------

    def open_switch(self, target: str, task: asyncio.Task[SwitchReport], *, forced: bool) -> SwitchUnderWay:
        """Record the switch to ``target`` that ``task`` runs: from now on requests wait or are refused.
        ``forced``: the scheduler did not ask for it (start-up, admin, restart)."""
        if not self.free:
            raise IllegalTransition(f"a switch to {target!r} while the device is not free")
        self._switch = SwitchUnderWay(
            source=self.active_model, target=target, started_at=time.monotonic(), warm=self.is_warm(target), task=task
        )
        self._changes.notify(SwitchBegan(target, forced))
        return self._switch

    def close_switch(self, published: Published[B] | None, *, ok: bool) -> SwitchUnderWay:
        """The switch ended: publish its outcome in one assignment and free the device."""
        switch = self._switch
        if switch is None:
            raise IllegalTransition("close_switch without a switch")
        self._published, self._switch = (None if self._closed else published), None
        self._changes.notify(None if self._closed else SwitchEnded(switch, ok))
        return switch

    # -- one switch's steps (``switch.py`` orders them; each runs whole here) -------------------------------------

    async def drain_active(
        self, name: str, timeout: float, error: EngineError, why: str, grace: float
    ) -> tuple[float, int]:
        """The active ``name`` is being left: it drains (:meth:`end_requests`). Returns the drain's ms and aborts."""
        self._move(name, frozenset({SlotState.ACTIVE}), SlotState.DRAINING)
        return await self.end_requests(name, timeout, error, why, grace=grace)

    async def park(self, name: str) -> None:
        """Park the drained ``name`` as the strategy says. When parking fails and the engine is intact, ``name``
        serves on (active again) and the error is raised; when the engine went with it, ``name`` is stopped."""
        slot = self._slots[name]
        try:
            parked = await self._strategy.park(name, slot.engine)
        except EngineLost as exc:
            logger.error("%s; continuing", describe_error(exc))  # the engine is gone anyway: the switch goes on
            slot._detach()
            self._move(name, frozenset({SlotState.DRAINING}), SlotState.STOPPED)
            return
        except Exception:
            self._move(name, frozenset({SlotState.DRAINING}), SlotState.ACTIVE)
            raise
        if parked.engine is None:
            slot._detach()
        elif parked.engine is not slot.engine:
            slot._attach(parked.engine)
        slot._touch(time.monotonic())
        self._move(name, frozenset({SlotState.DRAINING}), parked.state)

    async def bring_up(self, name: str) -> BroughtUp:
        """Bring ``name`` up through the strategy (a fresh load, a wake-up, a restore); it is then ``loading``
        with the engine it holds, until :meth:`activated` or :meth:`fail`. Returns how it came up (a started
        engine's phases in its metrics, and its path: ``fork`` or ``plain``)."""
        self._start_loading(name)
        return await self._brought_up(name, self._slots[name].profile, self._slots[name].engine)

    async def restart_plain(self, name: str, profile: ModelProfile) -> BroughtUp:
        """The loading ``name``'s engine is freed and the strategy brings it up afresh with ``profile`` (a proof's
        plain start: the caller has new engine cores spawned, and ``profile`` keeps no KV blocks)."""
        await self._free(name, self._slots[name]._detach())
        return await self._brought_up(name, profile, None)

    async def _brought_up(self, name: str, profile: ModelProfile, held: Any) -> BroughtUp:
        slot = self._slots[name]
        brought = await self._strategy.bring_up(name, profile, held, self._slot_access(name))
        if brought.engine is not slot.engine:
            slot._attach(brought.engine)  # a bundle built for another engine is dropped
        start = self._took_start(slot, brought.engine)
        if start is None:
            return brought
        metrics = msgspec.structs.replace(brought.metrics or ActivationMetrics(), engine_start=start)
        return replace(brought, metrics=metrics, path=brought.path or start.path)

    async def publish(self, name: str) -> Published[B]:
        """``name``'s snapshot for the engine it holds, building its bundle only when it has none yet."""
        slot = self._slots[name]
        if slot.published is not None:
            return slot.published
        if self._build_bundle is None:
            raise IllegalTransition(f"{name}: these model slots build no bundles")
        return slot._hold_bundle(await self._build_bundle(name, slot.profile, slot.engine))

    def activated(self, name: str) -> None:
        """The loading ``name`` is up and will be published when the switch closes."""
        self._move(name, frozenset({SlotState.LOADING}), SlotState.ACTIVE)

    async def fail(self, name: str, reason: str) -> None:
        """Bringing ``name`` up failed: it is marked failed, and the engine it held is freed."""
        self._move(name, frozenset({SlotState.LOADING, SlotState.FAILED}), SlotState.FAILED, reason)
        await self._free(name, self._slots[name]._detach())

    async def unload_stale_parked(self) -> None:
        """Unload the parked engines whose settings a reload changed (after every switch, while it holds)."""
        for name in sorted(self._stale):
            slot = self._slots.get(name)
            if slot is None or slot.engine is None:
                self._stale.discard(name)
            elif slot.state in PARKED:
                logger.info("unloading %s: a reload changed its engine settings", name)
                self._stale.discard(name)
                await self._stop(name, PARKED)

    # -- between switches: hold, load, unload, reload -----------------------------------------------------------

    @asynccontextmanager
    async def held(self, what: str, refused: type[EngineError], timeout: float | None = None) -> AsyncIterator[None]:
        """Hold the device between switches (a reload, a load or an unload): no switch starts while it holds, and
        requests for the active model go on. Waits up to ``timeout`` (None: :attr:`hold_timeout`) for a switch
        under way to end.

        Raises:
            ``refused``: The device never became free, or another hold is on.
            ManagerClosed: The server is closing.
        """
        timeout = self.hold_timeout if timeout is None else timeout
        if self._held:
            raise refused(f"Another reload, load or unload is being applied; try the {what} again when it ends.")
        self._held = True
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
            self._held = False
            self._changes.notify()

    async def load(self, name: str, *, preload: bool = False, prove: ModelProver[B] | None = None) -> bool:
        """Make ``name`` resident without publishing it, its bundle built too (so activating it is a pointer
        swap); False when it holds an engine already. The caller holds the device (:meth:`held`).

        Raises:
            ResidencyRefused: The strategy holds one engine at a time, or has no room (a preload's refusal marks
                the slot failed with it; a load's leaves the slot as it was).
            LoadFailed: The engine did not start, or ``prove`` failed (the slot is marked failed with the reason).
        """
        slot = self._slots[name]
        if slot.state is SlotState.ACTIVE or slot.engine is not None or slot.state is SlotState.STASHED:
            return False
        strategy = self._strategy
        refusal = None
        if not strategy.capabilities.loads_without_activating:
            refusal = ResidencyRefused(
                f"The '{strategy.name}' strategy holds one engine at a time, so '{name}' cannot be loaded next "
                f"to the active model; switch to it instead (POST /v1/models/switch)."
            )
            if not preload:
                raise refusal  # the slot stays as it is, a failure's reason included
        self._start_loading(name)
        try:
            if refusal is not None:
                raise refusal
            engine = await cast(ResidentLoader, strategy).load_resident(name, slot.profile, self._slot_access(name))
            if engine is not slot.engine:
                slot._attach(engine)
            start = self._took_start(slot, engine)
            published = await self.publish(name)
            if prove is not None:  # a forked start beside the active model is proven before it is resident
                await prove(self, name, None if start is None else start.path, published)
        except ResidencyRefused as exc:
            if preload:  # the profile asks for what cannot be: shown like a failed load
                await self.fail(name, f"preload refused: {exc.message}")
            else:
                await self._stop(name, frozenset({SlotState.LOADING}))
            raise
        except Exception as exc:
            reason = describe_error(exc)
            logger.error("loading %s failed: %s", name, reason)
            await self.fail(name, reason)
            raise LoadFailed(name, reason) from exc
        slot._touch(time.monotonic())  # its idle time and LRU age start now
        self._move(name, frozenset({SlotState.LOADING}), SlotState.RESIDENT)
        logger.info("%s is loaded and resident", name)
        return True

    async def unload(
        self, name: str, *, drain_timeout: float, error: EngineError, grace: float, active_refusal: str | None = None
    ) -> bool:
        """Free ``name``'s engine (False: it held none); a failed slot is cleared to stopped. The active model
        stops serving first, with nothing after it: it drains (:meth:`end_requests` with ``error``), and no model
        is active afterwards, unless ``active_refusal`` says why not. The caller holds the device (:meth:`held`).

        Raises:
            ResidencyRefused: ``name`` is active and ``active_refusal`` is set, or a switch's strategy holds it.
        """
        state = self._slots[name].state
        if state is SlotState.STOPPED:
            return False
        if state is SlotState.FAILED or state in UNLOADABLE:
            await self._stop(name, frozenset({SlotState.FAILED, *UNLOADABLE}))
            return True
        if state is not SlotState.ACTIVE:
            raise ResidencyRefused(f"'{name}' is {state}; the strategy that holds it frees it at its next switch.")
        if active_refusal is not None:
            raise ResidencyRefused(active_refusal)
        if self._switch is not None or self.active_model != name:
            raise IllegalTransition(f"unpublishing {name!r} while {self.active_model!r} is published")
        self._published = None
        await self.drain_active(name, drain_timeout, error, "for its unload", grace)
        await self._stop(name, frozenset({SlotState.DRAINING}))
        return True

    async def reload(
        self,
        models: Mapping[str, ModelProfile],
        *,
        new_frontend: Collection[str],
        new_engine: Collection[str],
        memory_plan: MemoryPlan | None,
        timeout: float | None,
    ) -> tuple[bool, list[str]]:
        """Replace the configured models live, as one operation: hold the device, build the active model's new
        bundle off to the side, then swap everything in without an await in between (slots, leases, profiles,
        the active model's new snapshot, the memory plan), or change nothing; then free the
        engines the swap let go. Returns whether the active model was republished, and the models unloaded.

        Raises:
            ReloadRefused: No switch-free moment came in ``timeout``, or ``models`` lacks the active model.
            ReloadFailed: The active model's new bundle could not be built; nothing changed.
            ManagerClosed: The server is closing.
        """
        async with self.held("reload", ReloadRefused, timeout):
            active = self.active_model
            if active is not None and active not in models:
                raise ReloadRefused(f"The profile removes the active model '{active}'; switch to another model first.")
            bundle = None
            if active is not None and active in new_frontend and self._build_bundle is not None:
                try:
                    bundle = await self._build_bundle(active, models[active], self._slots[active].engine)
                except Exception as exc:
                    raise ReloadFailed(active, describe_error(exc)) from exc
            released = self._swap_in(models, new_frontend, new_engine, bundle, memory_plan or self._memory_plan)
            for name, engine in released:
                await self._free(name, engine)
        return bundle is not None, [name for name, _ in released]

    def _swap_in(
        self,
        models: Mapping[str, ModelProfile],
        new_frontend: Collection[str],
        new_engine: Collection[str],
        active_bundle: B | None,
        memory_plan: MemoryPlan | None,
    ) -> list[tuple[str, Any]]:
        """:meth:`reload`'s swap, in one step (no await); returns ``(name, engine)`` of the engines to free."""
        active = self.active_model
        released: list[tuple[str, Any]] = []
        slots: dict[str, Slot] = {}
        for name, profile in models.items():
            slot = self._slots.get(name)
            if slot is None:
                slot = Slot(name, profile)
                self._leases[name] = set()
            elif name in new_engine and slot.state in PARKED:
                released.append((name, slot._detach()))
                self._move(name, PARKED, SlotState.STOPPED)
                slot._set_profile(profile)
            else:
                slot._set_profile(profile)
                if name in new_frontend and name != active:
                    slot._drop_bundle()  # the next activation builds it anew
            slots[name] = slot
        for name, slot in self._slots.items():
            if name not in models:
                del self._leases[name]
                released.append((name, slot._detach()))
                self._move(name, ANY_STATE, SlotState.STOPPED)
        self._slots = slots
        if active is not None and active_bundle is not None:
            self._published = self._slots[active]._hold_bundle(active_bundle)
            logger.info("reload: published a new frontend bundle for %s", active)
        if active is not None and active in new_engine:
            self._stale.add(active)
        self._stale &= set(models)
        self._memory_plan = memory_plan
        self._changes.notify()
        return [(name, engine) for name, engine in released if engine is not None]

    # -- deaths and shutdown ------------------------------------------------------------------------------------

    async def mark_dead(self, engine: Any, cause: str) -> tuple[str, bool] | None:
        """``engine`` died or hung while its model served or was parked: the slot fails with ``cause`` and, when it
        was active, is published no more (no switch runs then: a switch holds its slots in ``draining`` or
        ``loading``); its requests end at once with :class:`EngineDied`; the engine is freed. Returns the model and
        whether it was active, or None when no serving or parked slot holds ``engine`` (left to its owner)."""
        name = self.holder_of(engine)
        if name is None or self._closed or self._slots[name].state not in SUPERVISED:
            return None
        was_active = self.active_model == name
        if was_active:
            self._published = None
        freed = self._slots[name]._detach()
        self._move(name, SUPERVISED, SlotState.FAILED, cause)
        await self.end_requests(name, 0.0, EngineDied(name, cause), "its engine died")
        await self._free(name, freed)
        return name, was_active

    def close(self) -> None:
        """Refuse everything from now on and publish nothing (shutdown, or a graceful drain's first step)."""
        self._closed = True
        self._published = None
        self._changes.notify()

    async def shutdown(self) -> None:
        """Close, stop a switch under way and free every engine."""
        self.close()
        switch = self._switch
        if switch is not None:
            switch.task.cancel()
            with suppress(BaseException):
                await switch.task
        for name in list(self._slots):
            await self._stop(name, ANY_STATE)
        await self._strategy.close()

    # -- helpers ------------------------------------------------------------------------------------------------

    def _slot_access(self, target: str) -> _SlotAccess[B]:
        return _SlotAccess(self, target)

    @staticmethod
    def _took_start(slot: Slot, engine: Any) -> EngineStart | None:
        """``engine``'s start phases, kept on ``slot`` as its last start, when ``engine`` was just started."""
        start = ENGINE_STARTS.take(engine)
        if start is not None:
            slot._started(start)
        return start

    def _start_loading(self, name: str) -> None:
        self._move(name, frozenset({SlotState.STOPPED, SlotState.FAILED, *PARKED}), SlotState.LOADING)

    async def _stop(self, name: str, expected: frozenset[SlotState], reason: str | None = None) -> None:
        """``name`` gives up what it holds and is stopped (``reason``: why, for the status); its engine is freed."""
        engine = self._slots[name]._detach()
        self._move(name, expected, SlotState.STOPPED, reason)
        await self._free(name, engine)

    async def _free(self, name: str, engine: Any) -> None:
        """Have the strategy free ``engine``, which ``name``'s slot gave up; failures are logged, never raised."""
        if engine is None:
            return
        try:
            await self._strategy.unload(name, engine)
        except Exception as exc:
            logger.error("unloading %s failed: %s", name, describe_error(exc))

    def _move(self, name: str, expected: frozenset[SlotState], new: SlotState, reason: str | None = None) -> None:
        """The one place a slot's state changes: compare-and-set, logged, and every waiter woken."""
        old = self._slots[name]._move(expected, new, reason)
        logger.info("slot %s: %s -> %s%s", name, old, new, f" ({reason})" if reason else "")
        self._changes.notify()


class _SlotAccess(Generic[B]):
    """What a strategy may ask of the model slots while it brings ``target`` up (``types/strategy.py``'s
    ``SlotAccess``): the eviction choice (:meth:`residents`), and evicting a resident or taking its engine, through
    the slots' owner."""

    def __init__(self, slots: ModelSlots[B], target: str) -> None:
        self._owner = slots
        self._target = target

    @property
    def models(self) -> Mapping[str, ModelProfile]:
        return self._owner.models

    def residents(self) -> Sequence[Slot]:
        """The eviction choice: the residents a strategy may evict, in the residency policy's order."""
        owner = self._owner
        plan = owner.memory_plan
        return in_eviction_order(self.holders(), owner._weighing, plan.footprints() if plan is not None else None)

    def engines_held(self) -> int:
        return len(self.holders())

    def holders(self) -> Sequence[Slot]:
        """Every slot other than the target that holds an engine: what the memory budget counts as taken."""
        return [slot for slot in self._owner if slot.name != self._target and slot.engine is not None]

    async def evict(self, name: str, reason: str | None = None) -> None:
        await self._owner._stop(name, frozenset({SlotState.RESIDENT}), reason)

    def take_engine(self, name: str) -> Any:
        owner = self._owner
        engine = owner._slots[name]._detach()
        owner._move(name, frozenset({SlotState.RESIDENT}), SlotState.STOPPED)
        return engine
