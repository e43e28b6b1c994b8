"""The engine manager: the face the API sees. It admits requests, runs switches and applies reloads.

The state it acts on has one owner, the :class:`Device` (slots, leases in flight, the switch under way). Around
it: the switch itself (``switch.py``), admission in both modes (``admission.py`` over the pure ``scheduler.py``),
the switch history (``switch_history.py``), the observers (``observer.py``) and a reload's checks
(``reload.py``).

Invariants (checked by the randomized tests in ``tests/engine/test_concurrency.py``):
    * A request is served only by the model and bundle it was admitted to (its :class:`Lease` pins them).
    * Every admitted request ends, completed or with a typed :class:`EngineError`; none is silently dropped.
    * At most one switch or reload holds the device; every wait is bounded, and every state change wakes the
      waiters.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from contextlib import suppress
from typing import Any, Generic, TypeVar

from server.engine.admission import Admission
from server.engine.device import SUPERVISED, Device, SwitchUnderWay, describe_error
from server.engine.engine_death import end_leases
from server.engine.errors import (
    EngineDied,
    EngineError,
    ManagerClosed,
    ModelNotFound,
    ReloadFailed,
    ReloadRefused,
    SwitchConflict,
    SwitchFailed,
)
from server.engine.healing import Healer
from server.engine.kv_budget import MemoryPlan
from server.engine.lease import Lease, Published
from server.engine.memory import memory_in_use_mb
from server.engine.observer import ManagerObserver, Observers
from server.engine.report import (
    ManagerSnapshot,
    ModelsReplaced,
    ResidencyReport,
    SlotSnapshot,
    SwitchAttempt,
    SwitchReport,
)
from server.engine.residency import Residency
from server.engine.scheduling_types import SchedulerPolicy
from server.engine.strategies.base import SwitchStrategy
from server.engine.supervision import engine_is_dead, engine_pids
from server.engine.switch import SwitchRun
from server.engine.switch_history import SwitchHistory
from server.profiles.schema import ModelProfile, Switching

__all__ = ["BundleBuilder", "EngineManager"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")
#: Builds one model's frontend bundle: ``(name, profile, engine) -> bundle``. Supplied by the frontend layer.
BundleBuilder = Callable[[str, ModelProfile, Any], Awaitable[B]]

#: Most seconds a request waits for a switch before a 503, unless the caller says otherwise.
ADMISSION_TIMEOUT_S = 600.0


class EngineManager(Generic[B]):
    """Owns the engines of a profile's models and switches the active one.

    Args:
        models: Model name to profile, in profile order.
        strategy: What happens to the model being left.
        build_bundle: Builds a model's frontend bundle once its engine is up.
        switching: The profile's switching section: the mode (``manual``: requests for another model get 409;
            ``auto``: they wait in the scheduler's queues and the scheduler decides when to switch), the drain
            timeout and auto mode's residency, wait, queue and backoff bounds.
        admission_timeout: Most seconds a request waits for a switch before a 503 (None: 600).
        abort_grace: Seconds aborted requests get to leave before the old model is parked.
        memory_probe: Reads memory in MB for the switch report.
        memory_plan: The KV-cache budget decided at start-up, shown in the status.
    """

    def __init__(
        self,
        models: Mapping[str, ModelProfile],
        strategy: SwitchStrategy,
        build_bundle: BundleBuilder[B],
        *,
        switching: Switching | None = None,
        admission_timeout: float | None = None,
        abort_grace: float = 10.0,
        memory_probe: Callable[[], float] = memory_in_use_mb,
        memory_plan: MemoryPlan | None = None,
    ) -> None:
        self._switching = switching or Switching()
        self._device: Device[B] = Device(models, strategy, memory_plan)
        self._strategy = strategy
        self._build_bundle = build_bundle
        self._admission_timeout = ADMISSION_TIMEOUT_S if admission_timeout is None else admission_timeout
        self._abort_grace = abort_grace
        self._memory_probe = memory_probe
        self._observers = Observers()
        self._history = SwitchHistory(self._observers)
        self._healer = Healer(
            self._switching,
            restart=lambda name: self._switch_to(name, None, "restart"),
            taken_over=lambda: self._device.closed or self.active_model is not None or self._device.switch is not None,
        )
        self._admission: Admission[B] = Admission(
            self._device,
            SchedulerPolicy.from_switching(self._switching),
            self._observers,
            start_switch=self._start_auto_switch,
        )
        self._residency: Residency[B] = Residency(
            self._device,
            strategy,
            self._admission,
            self._switching,
            self._observers,
            self._published_for,
            abort_grace=abort_grace,
            hold_timeout=self._switching.drain_timeout + 60.0,
        )

    # -- read-only views ------------------------------------------------------------------------------------

    @property
    def models(self) -> Mapping[str, ModelProfile]:
        """Every configured model, in profile order."""
        return self._device.models

    @property
    def active_model(self) -> str | None:
        """The model that serves requests now, if any."""
        return self._device.active_model

    @property
    def published(self) -> Published[B] | None:
        """The active model and its bundle, as one object (what a request admitted now is pinned to)."""
        return self._device.published

    @property
    def switching_to(self) -> str | None:
        """The target of the switch under way, if any."""
        switch = self._device.switch
        return switch.target if switch is not None else None

    @property
    def strategy_name(self) -> str:
        """The strategy in use."""
        return self._strategy.name

    @property
    def switching(self) -> Switching:
        """The profile's switching section the manager runs under (its mode, strategy and residency bounds)."""
        return self._switching

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The KV-cache budget the configured models run under (None where Turnout does not budget)."""
        return self._device.memory_plan

    def add_observer(self, observer: ManagerObserver) -> None:
        """Tell ``observer`` about switch attempts, queue waits and aborted requests from now on."""
        self._observers.add(observer)

    def snapshot(self) -> ManagerSnapshot:
        """The manager's state for the status route."""
        device, auto, now = self._device, self._switching.mode == "auto", time.monotonic()
        return ManagerSnapshot(
            active_model=device.active_model,
            switching_to=self.switching_to,
            mode=self._switching.mode,
            strategy=self._strategy.name,
            in_flight=sum(device.in_flight(name) for name in device.models),
            slots=[
                SlotSnapshot(
                    name=slot.name,
                    model=slot.profile.model,
                    state=slot.state.value,
                    reason=slot.reason,
                    in_flight=device.in_flight(slot.name),
                    max_model_len=getattr(slot.published.bundle, "max_model_len", None) if slot.published else None,
                    queued=self._admission.scheduler.queue_depth(slot.name),
                    retry_in_s=self._admission.retry_in(slot.name) if auto else None,
                    pinned=slot.profile.pinned,
                    unloads_in_s=self._residency.unloads_in(slot.name, now),
                    restart=self._healer.plan(
                        slot.name,
                        dead=slot.name in device.dead,
                        restarting=self.switching_to == slot.name,
                        retry_in_s=self._admission.retry_in(slot.name) if auto else None,
                    ),
                    pids=engine_pids(slot.engine) if slot.engine is not None else [],
                )
                for slot in device
            ],
            last_switch=self._history.last_report,
            last_attempt=self._history.last_attempt,
            recent_switches=self._history.recent,
            memory=device.memory_plan,
        )

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def initialize(self, default: str) -> SwitchReport:
        """Load ``default`` and publish its bundle; raises :class:`SwitchFailed` when it cannot load.

        Then the models marked ``preload`` load in the background (readiness does not wait for them), and the
        idle timer starts where a model has ``idle_unload_s``.
        """
        report = await self._switch_to(default, None, "startup")
        self._residency.started()
        return report

    async def shutdown(self) -> None:
        """Refuse new requests, stop a running switch and release every engine."""
        device = self._device
        device.close()
        self._admission.close()
        await self._residency.close()
        self._healer.cancel()
        switch = device.switch
        if switch is not None:
            switch.task.cancel()
            with suppress(BaseException):
                await switch.task
        for slot in device:
            await device.unload(slot.name)
        await self._strategy.close()

    async def drain(self, timeout: float) -> int:
        """The first step of a graceful shutdown (SIGTERM): admit nothing more, and give the requests in flight
        ``timeout`` seconds; then end the rest with :class:`ManagerClosed` (a stream ends with its error event).

        Returns how many requests were ended. :meth:`shutdown` still has to release the engines.
        """
        device = self._device
        device.close()  # nothing new is admitted; requests in flight keep the model their lease pins
        self._admission.close()  # queued requests get 503 server_shutting_down at once
        deadline = asyncio.get_running_loop().time() + timeout
        while any(device.in_flight(name) for name in device.models):
            if not await device.wait_change(deadline - asyncio.get_running_loop().time()):
                break
        ended = 0
        for model in device.models:
            leases = device.leases(model)
            if leases:
                logger.warning("shutdown: ending %d request(s) on %s after the drain timeout", len(leases), model)
                ended += len(leases)
                await end_leases(leases, ManagerClosed(), model)
        return ended

    # -- admission ------------------------------------------------------------------------------------------

    async def acquire(self, model: str | None, *, wait_timeout: float | None = None) -> Lease[B]:
        """Admit one request for ``model`` (None: the active model) for its whole life, stream tail included;
        pair with :meth:`release`.

        Raises:
            ModelNotFound: ``model`` is not configured.
            ModelNotActive: manual mode, and another model is active.
            ModelSwitching: manual mode, and ``model`` is being switched away from.
            AdmissionTimeout: the wait ran out.
            QueueFull: auto mode, and ``model``'s queue is full.
            ModelLoadFailed: the switch this request waited for failed.
            NoActiveModel, ManagerClosed: nothing can serve.
        """
        timeout = self._admission_timeout if wait_timeout is None else wait_timeout
        return await self._admission.wait(model, timeout)

    def release(self, lease: Lease[B]) -> None:
        """End ``lease``: the request no longer counts as in flight. Idempotent."""
        if not self._device.release(lease):
            return
        if lease.aborted_by is not None:
            self._observers.request_aborted(lease.model)
        self._admission.finished(lease.model)

    # -- switching ------------------------------------------------------------------------------------------

    async def switch(self, target: str, drain_timeout: float | None = None) -> SwitchReport:
        """Make ``target`` the active model.

        A second call for the same target joins the switch under way; one for another target is refused.

        In auto mode this also ends a backoff of ``target`` after a failed load: the admin retries at once.

        Raises:
            ModelNotFound: ``target`` is not configured.
            SwitchConflict: a switch to another target is under way.
            SwitchFailed: ``target`` could not be activated (the previous model was restored if possible).
        """
        return await self._switch_to(target, drain_timeout, "admin")

    async def _switch_to(self, target: str, drain_timeout: float | None, trigger: str) -> SwitchReport:
        device = self._device
        if target not in device.models:
            raise ModelNotFound(target, device.models)
        while True:
            if device.closed:
                raise ManagerClosed()
            switch = device.switch
            if switch is not None:
                if switch.target != target:
                    raise SwitchConflict(target, switch.target)
                return await asyncio.shield(switch.task)
            if device.active_model == target:
                return SwitchReport(
                    previous_model=target,
                    current_model=target,
                    switched=False,
                    duration_ms=0.0,
                    strategy=self._strategy.name,
                )
            if device.free:
                break
            await device.wait_change(self._admission_timeout)  # a reload holds the device: it is brief
        timeout = self._switching.drain_timeout if drain_timeout is None else drain_timeout
        self._admission.switch_forced(target)
        return await asyncio.shield(self._begin_switch(target, timeout, trigger).task)

    def _start_auto_switch(self, source: str | None, target: str) -> None:
        """The scheduler's decision: ``source`` (published now) gives the device to ``target``."""
        assert source == self.active_model, (source, self.active_model)
        self._begin_switch(target, self._switching.drain_timeout, "auto")

    def _begin_switch(self, target: str, drain_timeout: float, trigger: str) -> SwitchUnderWay:
        run = SwitchRun(
            device=self._device,
            strategy=self._strategy,
            previous=self._device.published,
            target=target,
            publish=self._published_for,
            memory_probe=self._memory_probe,
            abort_grace=self._abort_grace,
        )
        task = asyncio.get_running_loop().create_task(self._run_switch(run, drain_timeout, trigger))
        task.add_done_callback(_retrieve_exception)  # a switch started by auto mode may have no awaiter left
        return self._device.open_switch(target, task)

    async def _run_switch(self, run: SwitchRun[B], drain_timeout: float, trigger: str) -> SwitchReport:
        started_at, started = time.time(), time.perf_counter()
        restart = run.target in self._device.dead  # the target's engine died: this switch brings it back
        if restart:
            self._healer.restart_began(run.target)
        error: str | None = "cancelled (the server is shutting down)"
        published = run.previous
        try:
            outcome = await run.execute(drain_timeout)
            published = outcome.published
            if outcome.report is not None:
                self._history.last_report = outcome.report
            error = _failure_reason(outcome.error)
            await self._device.unload_stale_parked()  # while the switch still holds the device
            if outcome.error is not None:
                raise outcome.error
            assert outcome.report is not None
            return outcome.report
        finally:
            if self._device.closed:
                published = None
            ended = self._device.close_switch(published)
            self._history.record(
                SwitchAttempt(
                    source=ended.source,
                    target=ended.target,
                    trigger=trigger,
                    strategy=self._strategy.name,
                    outcome="ok" if error is None else "failed",
                    error=error,
                    restored=self.active_model if error is not None else None,
                    started_at=round(started_at, 3),
                    duration_ms=round((time.perf_counter() - started) * 1000.0, 1),
                )
            )
            if restart:
                self._healer.restart_ended(ended.target, ok=error is None)
                self._observers.engine_restarted(ended.target, ok=error is None)
            if not self._device.closed:
                # May start the next switch at once (the scheduler decides), so it comes after the switch closed.
                self._admission.switch_ended(ended, ok=error is None)

    async def _published_for(self, name: str) -> Published[B]:
        """The slot's snapshot for its engine, building the bundle only when the engine has none yet."""
        slot = self._device.slots[name]
        if slot.published is not None:
            return slot.published
        return self._device.hold_bundle(name, await self._build_bundle(name, slot.profile, slot.engine))

    # -- residency ------------------------------------------------------------------------------------------

    async def load(self, name: str) -> ResidencyReport:
        """Make ``name`` resident without activating it, where the strategy holds several engines (``keep``).

        Raises:
            ModelNotFound, ResidencyRefused, LoadFailed, ManagerClosed: see :meth:`Residency.load`.
        """
        return await self._residency.load(name)

    async def unload(self, name: str, *, force: bool = False, drain_timeout: float | None = None) -> ResidencyReport:
        """Free ``name``'s engine; the active model only in auto mode or with ``force`` (then none is active).

        Raises:
            ModelNotFound, ResidencyRefused, ManagerClosed: see :meth:`Residency.unload`.
        """
        return await self._residency.unload(name, force=force, drain_timeout=drain_timeout)

    # -- supervision ------------------------------------------------------------------------------------------

    async def engine_died(self, engine: Any, cause: str) -> None:
        """An engine watch's report: ``engine`` died or hung (its processes are gone by now).

        Its slot fails with ``cause`` (``/admin/status`` shows it) and is unpublished when it was the active
        model; the requests leased to it end at once with :class:`EngineDied` (503, ``Retry-After``); the
        strategy frees what is left of the engine. Then it heals: in manual mode the active model restarts at
        once, then with the failure backoff, at most ``switching.max_restarts`` times; in auto mode the scheduler
        brings it back for its waiters or its next request (with its own backoff). Other resident engines are
        untouched. A slot that a switch is moving is the switch's to fail.
        """
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
        """Why ``lease``'s request failed, when the manager knows: the error that ended it, or :class:`EngineDied`
        when its engine is dead (vLLM fails the requests a moment before the engine's watch reports)."""
        if lease.aborted_by is not None:
            return lease.aborted_by
        slot = self._device.slots.get(lease.model)
        engine = slot.engine if slot is not None else None
        if engine is not None and engine_is_dead(engine):
            return EngineDied(lease.model, "engine died (its watch has not reported the cause yet)")
        return None

    # -- reload -------------------------------------------------------------------------------------------------

    async def replace_models(
        self,
        models: Mapping[str, ModelProfile],
        *,
        new_frontend: Collection[str] = (),
        new_engine: Collection[str] = (),
        memory_plan: MemoryPlan | None = None,
        wait_timeout: float | None = None,
    ) -> ModelsReplaced:
        """Replace the configured models live (``turnout reload``), as one operation of the device.

        The reload waits (within ``wait_timeout``, default the drain timeout plus a minute) for a switch under way
        to end and holds the device meanwhile, so none starts; it then builds the active model's new bundle over
        its running engine when its frontend changed. Only when that worked is everything swapped in without an
        await in between: the profiles, the slots of added and removed models, the active model's new published
        snapshot, the memory plan and the strategy's view of the models. Requests in flight keep the snapshot
        they were admitted to, so they finish on the old bundle. Then the parked engines of removed models, and
        of models whose engine settings changed, are released. The active model's engine settings apply at its
        next load: a switch that parks it unloads it, whatever the strategy.

        Args:
            models: The new models, in profile order; must include the active model.
            new_frontend: Models whose frontend settings changed (their bundle is rebuilt).
            new_engine: Models whose engine settings changed.
            memory_plan: The new models' KV-cache budget (None: keep the current one).
            wait_timeout: Most seconds to wait for a switch under way.

        Raises:
            ReloadRefused: No switch-free moment came in time, or ``models`` lacks the active model.
            ReloadFailed: The active model's new bundle could not be built; nothing changed.
            ManagerClosed: The server is closing.
        """
        device = self._device
        timeout = self._switching.drain_timeout + 60.0 if wait_timeout is None else wait_timeout
        async with device.held_for_reload(timeout):
            active = device.active_model
            if active is not None and active not in models:
                raise ReloadRefused(f"The profile removes the active model '{active}'; switch to another model first.")
            bundle = None
            if active is not None and active in new_frontend:
                try:
                    bundle = await self._build_bundle(active, models[active], device.slots[active].engine)
                except Exception as exc:
                    raise ReloadFailed(active, describe_error(exc)) from exc
            released = device.replace_models(
                models,
                new_frontend=new_frontend,
                new_engine=new_engine,
                active_bundle=bundle,
                memory_plan=memory_plan if memory_plan is not None else device.memory_plan,
            )
            self._admission.set_models(device.models)
            for name, engine in released:
                await device.free_engine(name, engine)
        self._admission.device_changed()
        self._residency.models_changed()
        return ModelsReplaced(
            republished=bundle is not None,
            unloaded=[name for name, _ in released],
            engine_pending=device.stale,
        )


def _failure_reason(error: Exception | None) -> str | None:
    """The reason a switch failed, for the admin status and the log (never for other clients)."""
    if error is None:
        return None
    return error.reason if isinstance(error, SwitchFailed) else str(error)


def _retrieve_exception(task: asyncio.Task[SwitchReport]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("switch task ended with %r", task.exception())
