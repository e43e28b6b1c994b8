"""The engine manager: the engine's public API. It admits requests, runs switches and applies reloads.

The state it acts on has one owner, :class:`ModelSlots` (slots, leases in flight, the switch under way). Around
it, one role each, by package: the switch's steps, its task and ending, the switch history and engine deaths
(``switching/``), admission in both modes (``admission/gate.py`` over the pure ``admission/scheduler.py``, which
hears of every change through the model slots' change signal), the residency entry points
(``residency_controls.py``, asking the residency policy), healing (``supervision/``), the status snapshot
(``manager_status.py``) and the observers (``types/observer.py``). This module wires them and keeps the public API; the
switch's join-or-refuse rule is here.

Invariants (checked by the randomized tests in ``tests/engine/test_concurrency.py``):
    * A request is served only by the model and bundle it was admitted to (its :class:`Lease` pins them).
    * Every admitted request ends, completed or with a typed :class:`EngineError`; none is silently dropped.
    * At most one switch or reload holds the device; every wait is bounded, and every state change wakes the
      waiters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any, Generic, TypeVar

from server.engine.admission import Admission
from server.engine.manager_status import manager_snapshot
from server.engine.memory import memory_in_use_mb
from server.engine.residency import Weighing
from server.engine.residency_controls import Residency
from server.engine.runtime import FingerprintStore, ModelTasks, StateDir, TaskReader, state_dir
from server.engine.strategies import models_held_at_once
from server.engine.supervision import Healer
from server.engine.switching import BundleBuilder, EngineDeaths, ModelProof, ModelSlots, SwitchHistory, SwitchTasks
from server.engine.types import (
    Capabilities,
    CostBook,
    CostsDocument,
    EngineError,
    Lease,
    ManagerClosed,
    ManagerObserver,
    ManagerSnapshot,
    MemoryPlan,
    ModelNotFound,
    ModelProbe,
    ModelsReplaced,
    Observers,
    Published,
    ResidencyReport,
    SchedulerPolicy,
    SwitchConflict,
    SwitchReport,
    SwitchStrategy,
)
from server.profiles.schema import ModelProfile, Switching
from server.profiles.vllm_version import installed_vllm_version

__all__ = ["BundleBuilder", "EngineManager"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")

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
        model_tasks: Reads a model's vLLM tasks before it loads (``model_tasks.generation_tasks``); None: they
            are known only once it loaded (fakes).
        costs: What bringing each model up cost, measured by the switches (None: a fresh book in memory).
        probe: Runs the proof's fixed probe through a model's bundle (the frontend's, wired by the CLI); None:
            switches and loads prove nothing, whatever ``switching.verify`` says.
        state: The state folder the models' fingerprints are kept in (default: this user's).
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
        model_tasks: TaskReader | None = None,
        costs: CostBook | None = None,
        probe: ModelProbe | None = None,
        state: StateDir | None = None,
    ) -> None:
        self._switching = switching or Switching()
        self._costs = costs if costs is not None else CostBook()
        self._policy = SchedulerPolicy.from_switching(self._switching)  # the one policy: every mode check reads it
        self._slots: ModelSlots[B] = ModelSlots(
            models,
            strategy,
            build_bundle,
            memory_plan,
            drain_timeout=self._switching.drain_timeout,
            weighing=Weighing.of(self._switching, self._costs),
        )
        self._strategy = strategy
        self._tasks = ModelTasks(lambda: self._slots.models, model_tasks)
        self._admission_timeout = ADMISSION_TIMEOUT_S if admission_timeout is None else admission_timeout
        self._observers = Observers()
        self._history = SwitchHistory(self._observers)
        self._healer = Healer(
            self._switching,
            self._policy,
            restart=lambda name: self._switch_to(name, None, "restart"),
            taken_over=lambda: self._slots.closed or self.active_model is not None or self._slots.switch is not None,
        )
        self._admission: Admission[B] = Admission(
            self._slots,
            self._policy,
            self._observers,
            start_switch=self._start_auto_switch,
            is_dead=self._healer.is_dead,
            costs=self._costs,
        )
        self._proof: ModelProof[B] | None = None
        if probe is not None and self._switching.proves:
            fingerprints, version = FingerprintStore(state or state_dir()), installed_vllm_version()
            always, observe = self._switching.proves_plain_starts, self._observers.model_verified
            self._proof = ModelProof(probe, fingerprints, plain_starts=always, vllm_version=version, observe=observe)
        self._residency: Residency[B] = Residency(
            self._slots,
            self._admission,
            self._switching,
            self._policy,
            self._observers,
            abort_grace=abort_grace,
            proof=self._proof,
        )
        self._switches: SwitchTasks[B] = SwitchTasks(
            self._slots,
            strategy.name,
            self._history,
            self._observers,
            self._healer,
            memory_probe=memory_probe,
            abort_grace=abort_grace,
            costs=self._costs,
            proof=self._proof,
        )
        self._deaths: EngineDeaths[B] = EngineDeaths(self._slots, self._observers, self._healer)

    # -- read-only views ------------------------------------------------------------------------------------

    @property
    def models(self) -> Mapping[str, ModelProfile]:
        """Every configured model, in profile order."""
        return self._slots.models

    @property
    def active_model(self) -> str | None:
        """The model that serves requests now, if any."""
        return self._slots.active_model

    @property
    def published(self) -> Published[B] | None:
        """The active model and its bundle, as one object (what a request admitted now is pinned to)."""
        return self._slots.published

    @property
    def switching_to(self) -> str | None:
        """The target of the switch under way, if any."""
        switch = self._slots.switch
        return switch.target if switch is not None else None

    @property
    def strategy_name(self) -> str:
        """The strategy in use."""
        return self._strategy.name

    @property
    def capabilities(self) -> Capabilities:
        """What the strategy in use can do."""
        return self._strategy.capabilities

    @property
    def switching(self) -> Switching:
        """The profile's switching section the manager runs under (its mode, strategy and residency bounds)."""
        return self._switching

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The KV-cache budget the configured models run under (None where Turnout does not budget)."""
        return self._slots.memory_plan

    @property
    def models_held_at_once(self) -> int:
        """How many models the device holds at once: under a memory budget the most that fit in it together
        (``max_active`` caps it). The gateway's ``max_lora`` and Ray Serve's ``max_num_models_per_replica``."""
        return models_held_at_once(self._strategy.name, self._switching.max_active, len(self.models), self.memory_plan)

    async def tasks(self, name: str) -> frozenset[str] | None:
        """vLLM's generation tasks of model ``name`` (``generate``, ``transcription``), known without loading it;
        None when they cannot be known before it loads (or ``name`` is no model's)."""
        return await self._tasks.of(name)

    @property
    def costs(self) -> CostsDocument:
        """What bringing each model up cost, per path (``GET /admin/costs``)."""
        return self._costs.document()

    def add_observer(self, observer: ManagerObserver) -> None:
        """Tell ``observer`` about switch attempts, queue waits and aborted requests from now on."""
        self._observers.add(observer)

    def snapshot(self) -> ManagerSnapshot:
        """The manager's state for the status route."""
        return manager_snapshot(
            slots=self._slots,
            policy=self._policy,
            strategy=self._strategy.name,
            admission=self._admission,
            residency=self._residency,
            healer=self._healer,
            history=self._history,
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
        self._slots.close()  # the scheduler refuses every waiter as it hears of it
        await self._residency.close()
        self._healer.cancel()
        await self._slots.shutdown()

    async def drain(self, timeout: float) -> int:
        """The first step of a graceful shutdown (SIGTERM): admit nothing more, and give the requests in flight
        ``timeout`` seconds; then end the rest with :class:`ManagerClosed` (a stream ends with its error event).

        Returns how many requests were ended. :meth:`shutdown` still has to release the engines.
        """
        slots = self._slots
        # Nothing new is admitted, and queued requests get 503 server_shutting_down at once (the scheduler hears of
        # it); requests in flight keep the model their lease pins.
        slots.close()
        ended = await asyncio.gather(
            *(slots.end_requests(model, timeout, ManagerClosed(), "at shutdown") for model in slots.models)
        )
        return sum(aborted for _, aborted in ended)

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
        if self._slots.release(lease) and lease.aborted_by is not None:  # the scheduler hears of it from the slots
            self._observers.request_aborted(lease.model)

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
        slots = self._slots
        if target not in slots.models:
            raise ModelNotFound(target, slots.models)
        while True:
            if slots.closed:
                raise ManagerClosed()
            switch = slots.switch
            if switch is not None:
                if switch.target != target:
                    raise SwitchConflict(target, switch.target)
                return await asyncio.shield(switch.task)
            if slots.active_model == target:
                return SwitchReport(
                    previous_model=target,
                    current_model=target,
                    switched=False,
                    duration_ms=0.0,
                    strategy=self._strategy.name,
                )
            if slots.free:
                break
            await slots.wait_change(self._admission_timeout)  # a reload holds the device: it is brief
        timeout = self._switching.drain_timeout if drain_timeout is None else drain_timeout
        return await asyncio.shield(self._switches.begin(target, timeout, trigger).task)

    def _start_auto_switch(self, source: str | None, target: str) -> None:
        """The scheduler's decision: ``source`` (published now) gives the device to ``target``."""
        assert source == self.active_model, (source, self.active_model)
        self._switches.begin(target, self._switching.drain_timeout, "auto")

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
        await self._deaths.died(engine, cause)

    def failure_of(self, lease: Lease[B]) -> EngineError | None:
        """Why ``lease``'s request failed, when the manager knows: the error that ended it, or :class:`EngineDied`
        when its engine is dead (vLLM fails the requests a moment before the engine's watch reports)."""
        return self._deaths.failure_of(lease)

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
        """Replace the configured models live (``turnout reload``), as one operation of the device: the active
        model's new bundle is built first, then everything is swapped in at once, or nothing changes.

        The reload waits (within ``wait_timeout``, default the device's hold timeout) for a switch under way to
        end and holds the device meanwhile, so none starts; it then builds the active model's new bundle over its
        running engine when its frontend changed. Only when that worked is everything swapped in without an
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
            ReloadRefused, ReloadFailed, ManagerClosed: see :meth:`ModelSlots.reload`.
        """
        republished, unloaded = await self._slots.reload(
            models,
            new_frontend=new_frontend,
            new_engine=new_engine,
            memory_plan=memory_plan,
            timeout=wait_timeout,
        )
        self._residency.models_changed()
        self._healer.keep_only(models)
        if self._proof is not None:
            self._proof.forget_fallbacks()
        return ModelsReplaced(republished=republished, unloaded=unloaded, engine_pending=self._slots.stale)
