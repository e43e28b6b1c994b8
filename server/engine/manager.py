"""The engine manager: owns one slot per configured model and moves the device between them.

Invariants (checked by the randomized tests in ``tests/engine/test_concurrency.py``):
    * A request is served only by the model and bundle it was admitted to (its :class:`Lease` pins them).
    * Every admitted request ends, completed or with a typed :class:`EngineError`; none is silently dropped.
    * At most one switch runs; the gate never deadlocks: every wait is bounded, and every state change wakes the
      waiters.

Everything runs on one asyncio loop and state changes happen between awaits, so no lock is needed: waiters
watch a broadcast event that every change replaces (``change_signal.py``). Around this core: the switch itself
(``switch.py``), auto mode's queues (``auto_admission.py``), the switch history (``switch_history.py``), the
observers (``observer.py``) and a live reload's steps (``reload.py``, ``model_set.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from server.engine.auto_admission import AutoAdmission
from server.engine.change_signal import ChangeSignal, wait_set
from server.engine.errors import (
    AdmissionTimeout,
    ManagerClosed,
    ModelLoadFailed,
    ModelNotActive,
    ModelNotFound,
    ModelSwitching,
    NoActiveModel,
    ReloadRefused,
    SwitchConflict,
    SwitchFailed,
)
from server.engine.kv_budget import MemoryPlan
from server.engine.lease import Lease, Published
from server.engine.memory import memory_in_use_mb
from server.engine.model_set import PARKED, release_slot, swap_models
from server.engine.observer import ManagerObserver, Observers
from server.engine.reload import StaleEngines, check_reloadable, rebuild_active_bundle
from server.engine.report import ManagerSnapshot, ModelsReplaced, SlotSnapshot, SwitchAttempt, SwitchReport
from server.engine.scheduler import SchedulerPolicy
from server.engine.states import Slot, SlotState, transition
from server.engine.strategies.base import SwitchStrategy
from server.engine.switch import SwitchRun
from server.engine.switch_history import SwitchHistory
from server.profiles.schema import ModelProfile, SwitchMode

__all__ = ["BundleBuilder", "EngineManager"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")
#: Builds one model's frontend bundle: ``(name, profile, engine) -> bundle``. Supplied by the frontend layer.
BundleBuilder = Callable[[str, ModelProfile, Any], Awaitable[B]]


@dataclass(frozen=True)
class _InFlightSwitch:
    source: str | None
    target: str
    task: asyncio.Task[SwitchReport]


class EngineManager(Generic[B]):
    """Owns the engines of a profile's models and switches the active one.

    Args:
        models: Model name to profile, in profile order.
        strategy: What happens to the model being left.
        build_bundle: Builds a model's frontend bundle once its engine is up.
        mode: ``manual``: requests for another model get 409; ``auto``: they wait in the scheduler's queues and
            the scheduler decides when to switch (``server/engine/scheduler.py``).
        drain_timeout: Default seconds a switch waits for in-flight requests.
        admission_timeout: Most seconds a request waits for a switch before a 503.
        abort_grace: Seconds aborted requests get to leave before the old model is parked.
        memory_probe: Reads memory in MB for the switch report.
        scheduling: Auto mode's residency, wait, queue and backoff bounds.
        memory_plan: The KV-cache budget decided at start-up (and at each reload), shown in the status.
    """

    def __init__(
        self,
        models: Mapping[str, ModelProfile],
        strategy: SwitchStrategy,
        build_bundle: BundleBuilder[B],
        *,
        mode: SwitchMode = "manual",
        drain_timeout: float = 60.0,
        admission_timeout: float = 600.0,
        abort_grace: float = 10.0,
        memory_probe: Callable[[], float] = memory_in_use_mb,
        scheduling: SchedulerPolicy | None = None,
        memory_plan: MemoryPlan | None = None,
    ) -> None:
        if not models:
            raise ValueError("the manager needs at least one model")
        self._slots = {name: Slot(name=name, profile=profile) for name, profile in models.items()}
        self._strategy = strategy
        self._build_bundle = build_bundle
        self._mode = mode
        self._drain_timeout = drain_timeout
        self._admission_timeout = admission_timeout
        self._abort_grace = abort_grace
        self._memory_probe = memory_probe
        self._memory_plan = memory_plan
        self._published: Published[B] | None = None
        self._switch: _InFlightSwitch | None = None
        self._inflight: dict[str, set[Lease[B]]] = {name: set() for name in models}
        self._changes = ChangeSignal()
        self._closed = False
        self._observers = Observers()
        self._history = SwitchHistory(self._observers)
        self._auto: AutoAdmission[B] | None = None
        if mode == "auto":
            self._auto = AutoAdmission(
                models,
                scheduling or SchedulerPolicy(),
                published=lambda: self._published,
                start_switch=self._start_auto_switch,
                track=lambda lease: self._inflight[lease.model].add(lease),
                release=self.release,
                observer=self._observers,
                load_failure=lambda model: self._slots[model].reason or "unknown error",
                warm=lambda model: self._slots[model].state in PARKED,  # comes back without an engine start
            )
        self._stale_engines = StaleEngines()

    # -- read-only views ------------------------------------------------------------------------------------

    @property
    def models(self) -> Mapping[str, ModelProfile]:
        """Every configured model, in profile order."""
        return {name: slot.profile for name, slot in self._slots.items()}

    @property
    def active_model(self) -> str | None:
        """The model that serves requests now, if any."""
        return self._published.model if self._published else None

    @property
    def switching_to(self) -> str | None:
        """The target of the switch under way, if any."""
        return self._switch.target if self._switch else None

    @property
    def published(self) -> Published[B] | None:
        """The active model and its bundle, as one object (the active slot's own snapshot)."""
        return self._published

    @property
    def active_engine(self) -> Any:
        """The engine the active model runs on, or None (diagnostics and tests; requests use their bundle)."""
        return self._slots[self._published.model].engine if self._published is not None else None

    @property
    def strategy_name(self) -> str:
        """The strategy in use."""
        return self._strategy.name

    def add_observer(self, observer: ManagerObserver) -> None:
        """Tell ``observer`` about switch attempts, queue waits and aborted requests from now on."""
        self._observers.add(observer)

    def slot_state(self, model: str) -> SlotState:
        """The state of ``model``'s slot."""
        return self._slots[model].state

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The KV-cache budget the configured models run under (None where Turnout does not budget)."""
        return self._memory_plan

    @memory_plan.setter
    def memory_plan(self, plan: MemoryPlan | None) -> None:
        # A reload that changes the models brings their new budget with it.
        self._memory_plan = plan

    def snapshot(self) -> ManagerSnapshot:
        """The manager's state for the status route."""
        return ManagerSnapshot(
            active_model=self.active_model,
            switching_to=self.switching_to,
            mode=self._mode,
            strategy=self._strategy.name,
            in_flight=sum(len(leases) for leases in self._inflight.values()),
            slots=[
                SlotSnapshot(
                    name=slot.name,
                    model=slot.profile.model,
                    state=slot.state.value,
                    reason=slot.reason,
                    in_flight=len(self._inflight[slot.name]),
                    max_model_len=_max_model_len(slot),
                    queued=self._auto.scheduler.queue_depth(slot.name) if self._auto else 0,
                    retry_in_s=self._auto.retry_in(slot.name) if self._auto else None,
                )
                for slot in self._slots.values()
            ],
            last_switch=self._history.last_report,
            last_attempt=self._history.last_attempt,
            recent_switches=self._history.recent,
            memory=self._memory_plan,
        )

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def initialize(self, default: str) -> SwitchReport:
        """Load ``default`` and publish its bundle; raises :class:`SwitchFailed` when it cannot load."""
        return await self._switch_to(default, None, "startup")

    async def shutdown(self) -> None:
        """Refuse new requests, stop a running switch and release every engine."""
        self._closed = True
        if self._auto is not None:
            self._auto.close()
        self._notify()
        if self._switch is not None:
            self._switch.task.cancel()
            with suppress(BaseException):
                await self._switch.task
        self._published = None
        for slot in self._slots.values():
            try:
                await self._strategy.release(slot)
            except Exception:
                logger.exception("releasing %s failed during shutdown", slot.name)
            if slot.state is not SlotState.STOPPED:
                transition(slot, SlotState.STOPPED)
        await self._strategy.close()

    # -- admission ------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def admit(self, model: str | None, *, wait_timeout: float | None = None) -> AsyncIterator[Lease[B]]:
        """Admit one request for ``model`` (None: the active model) for its whole life, stream tail included.

        Waits, within ``wait_timeout``, while a switch to ``model`` is under way.

        Raises:
            ModelNotFound: ``model`` is not configured.
            ModelNotActive: manual mode, and another model is active.
            ModelSwitching: ``model`` is being switched away from.
            AdmissionTimeout: the wait ran out.
            ModelLoadFailed: the switch this request waited for failed.
            NoActiveModel, ManagerClosed: nothing can serve.
        """
        lease = await self.acquire(model, wait_timeout=wait_timeout)
        try:
            yield lease
        finally:
            self.release(lease)

    async def acquire(self, model: str | None, *, wait_timeout: float | None = None) -> Lease[B]:
        """Admit one request; pair with :meth:`release` (for leases that outlive a ``with`` block: streams)."""
        return await self._acquire(model, self._admission_timeout if wait_timeout is None else wait_timeout)

    def release(self, lease: Lease[B]) -> None:
        """End ``lease``: the request no longer counts as in flight. Idempotent."""
        leases = self._inflight[lease.model]
        if lease not in leases:
            return
        leases.discard(lease)
        if lease.aborted_by is not None:
            self._observers.request_aborted(lease.model)
        if self._auto is not None:
            self._auto.finished(lease.model)
        self._notify()

    async def _acquire(self, model: str | None, timeout: float) -> Lease[B]:
        if model is not None and model not in self._slots:
            raise ModelNotFound(model, self._slots)
        if self._auto is not None:
            return await self._acquire_auto(self._auto, model, timeout)
        # Manual mode: only the admin route switches; a request waits only for a switch to its own model.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        waited_for: asyncio.Task[SwitchReport] | None = None
        while True:
            if self._closed:
                raise ManagerClosed()
            if waited_for is not None and waited_for.done() and model is not None:
                self._raise_if_failed(model)
            changed = self._changes.watch()  # taken before the checks, so no change between them is missed
            switch, published = self._switch, self._published
            if switch is None:
                if published is not None and model in (None, published.model):
                    lease: Lease[B] = Lease(published=published)
                    self._inflight[published.model].add(lease)
                    return lease
                if published is None and model is None:
                    raise NoActiveModel("No model is active; switch to one with POST /v1/models/switch.")
                assert model is not None
                if published is None:
                    raise NoActiveModel(f"No model is active; '{model}' can be switched to.")
                raise ModelNotActive(model, published.model)
            if model is not None and model != switch.target:
                raise ModelSwitching(model, switch.source, switch.target)
            if model in (None, switch.target):
                waited_for = switch.task
            await self._wait(changed, deadline, model, timeout)

    async def _acquire_auto(self, auto: AutoAdmission[B], model: str | None, timeout: float) -> Lease[B]:
        """Auto mode: the scheduler queues, admits or refuses; no request starts a switch by itself."""
        if self._closed:
            raise ManagerClosed()
        if model is None:  # the active model, or the one the device is moving to
            if self._switch is not None:
                model = self._switch.target
            elif self._published is not None:
                model = self._published.model
            else:
                raise NoActiveModel("No model is active; switch to one with POST /v1/models/switch.")
        return await auto.wait(model, timeout)

    def _raise_if_failed(self, model: str) -> None:
        slot = self._slots[model]
        if slot.state is SlotState.FAILED:
            raise ModelLoadFailed(model, slot.reason or "unknown error")

    async def _wait(self, changed: asyncio.Event, deadline: float, model: str | None, timeout: float) -> None:
        if not await wait_set(changed, deadline - asyncio.get_running_loop().time()):
            raise AdmissionTimeout(model, timeout)

    def _notify(self) -> None:
        self._changes.notify()

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
        if target not in self._slots:
            raise ModelNotFound(target, self._slots)
        if self._closed:
            raise ManagerClosed()
        if self._switch is not None:
            if self._switch.target != target:
                raise SwitchConflict(target, self._switch.target)
            return await asyncio.shield(self._switch.task)
        if self._published is not None and self._published.model == target:
            return SwitchReport(
                previous_model=target,
                current_model=target,
                switched=False,
                duration_ms=0.0,
                strategy=self._strategy.name,
            )
        timeout = self._drain_timeout if drain_timeout is None else drain_timeout
        if self._auto is not None:
            self._auto.switch_started(self.active_model, target)
        return await asyncio.shield(self._begin_switch(target, timeout, trigger).task)

    def _start_auto_switch(self, source: str | None, target: str) -> None:
        """The scheduler's decision: ``source`` (published now) gives the device to ``target``."""
        assert source == self.active_model, (source, self.active_model)
        self._begin_switch(target, self._drain_timeout, "auto")

    def _begin_switch(self, target: str, drain_timeout: float, trigger: str) -> _InFlightSwitch:
        run = SwitchRun(
            slots=self._slots,
            strategy=self._strategy,
            previous=self._published,
            target=self._slots[target],
            inflight=self._inflight,
            publish=self._published_for,
            wait_change=self._changes.wait,
            memory_probe=self._memory_probe,
            abort_grace=self._abort_grace,
        )
        task = asyncio.get_running_loop().create_task(self._run_switch(run, drain_timeout, trigger))
        task.add_done_callback(_retrieve_exception)  # a switch started by auto mode may have no awaiter left
        self._switch = _InFlightSwitch(self.active_model, target, task)
        self._notify()
        return self._switch

    async def _run_switch(self, run: SwitchRun[B], drain_timeout: float, trigger: str) -> SwitchReport:
        started_at, started = time.time(), time.perf_counter()
        error: str | None = "cancelled (the server is shutting down)"
        try:
            outcome = await run.execute(drain_timeout)
            self._published = outcome.published
            if outcome.report is not None:
                self._history.last_report = outcome.report
            error = _failure_reason(outcome.error)
            await self._stale_engines.unload_parked(self._slots, self._strategy)
            if outcome.error is not None:
                raise outcome.error
            assert outcome.report is not None
            return outcome.report
        finally:
            self._switch = None
            self._history.record(
                SwitchAttempt(
                    source=run.previous.model if run.previous else None,
                    target=run.target.name,
                    trigger=trigger,
                    strategy=self._strategy.name,
                    outcome="ok" if error is None else "failed",
                    error=error,
                    restored=self.active_model if error is not None else None,
                    started_at=round(started_at, 3),
                    duration_ms=round((time.perf_counter() - started) * 1000.0, 1),
                )
            )
            if self._auto is not None and not self._closed:
                # May start the next switch at once (the scheduler decides), so it comes after ``_switch`` is cleared.
                self._auto.switch_ended(self.active_model, ok=error is None)
            self._notify()

    async def _published_for(self, slot: Slot) -> Published[B]:
        """The slot's snapshot for its engine, building the bundle only when the engine has none yet."""
        published = slot.published
        if published is None:
            published = slot.hold_bundle(await self._build_bundle(slot.name, slot.profile, slot.engine))
        return published

    # -- reload -------------------------------------------------------------------------------------------------

    async def replace_models(
        self,
        models: Mapping[str, ModelProfile],
        *,
        new_frontend: Collection[str] = (),
        new_engine: Collection[str] = (),
    ) -> ModelsReplaced:
        """Replace the configured models live (``turnout reload``): build the new state aside, then swap it in.

        When the active model's frontend changed, its new bundle is built over its running engine first. Only when
        that worked, and no switch started meanwhile, is everything swapped in without an await in between: the
        profiles, the slots of added and removed models, and the active model's new published snapshot. Requests
        in flight keep the snapshot they were admitted to, so they finish on the old bundle. Then the parked
        engines of removed models, and of models whose engine settings changed, are released. The active model's
        engine settings apply at its next load: a switch that parks it unloads it, whatever the strategy.

        Args:
            models: The new models, in profile order; must include the active model.
            new_frontend: Models whose frontend settings changed (their bundle is rebuilt).
            new_engine: Models whose engine settings changed.

        Raises:
            ReloadRefused: A switch is under way, the server is closing, or ``models`` lacks the active model.
            ReloadFailed: The active model's new bundle could not be built; nothing changed.
        """
        published = self._check_reloadable(models)
        bundle = await rebuild_active_bundle(published, models, new_frontend, self._slots, self._build_bundle)
        if bundle is not None and self._check_reloadable(models) is not published:
            raise ReloadRefused("The active model changed while its new frontend was built; nothing changed.")
        released = swap_models(self._slots, self._inflight, models, new_frontend, new_engine)
        self._stale_engines.keep_only(self._slots)
        if self._auto is not None:
            self._auto.set_models(self._slots)
        if published is not None and bundle is not None:
            self._published = self._slots[published.model].hold_bundle(bundle)
            logger.info("reload: published a new frontend bundle for %s", published.model)
        if published is not None and published.model in new_engine:
            self._stale_engines.mark(published.model)
        self._notify()
        for slot in released:
            await release_slot(slot, self._strategy)
        return ModelsReplaced(
            republished=bundle is not None,
            unloaded=[slot.name for slot in released],
            engine_pending=self._stale_engines.pending(self._slots),
        )

    def _check_reloadable(self, models: Mapping[str, ModelProfile]) -> Published[B] | None:
        return check_reloadable(models, closed=self._closed, switching_to=self.switching_to, published=self._published)


def _failure_reason(error: Exception | None) -> str | None:
    """The reason a switch failed, for the admin status and the log (never for other clients)."""
    if error is None:
        return None
    return error.reason if isinstance(error, SwitchFailed) else str(error)


def _max_model_len(slot: Slot) -> int | None:
    bundle = slot.published.bundle if slot.published is not None else None
    return getattr(bundle, "max_model_len", None)


def _retrieve_exception(task: asyncio.Task[SwitchReport]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("switch task ended with %r", task.exception())
