"""Residency controls: load and unload a model without switching to it, preload at start, unload when idle.

Each operation holds the model slots between switches (:meth:`ModelSlots.held`, as a reload does): requests for the
active model go on, and no switch starts meanwhile. The slots' :meth:`~ModelSlots.load` and :meth:`~ModelSlots.unload`
intents do the work; this module decides when (preload, the idle timer) and what the policy allows (manual mode's
refusal to unload the active model without ``force``).

The idle timer is one asyncio task that sleeps until the next deadline or the next change of the model slots. A
model's last use is when a request for it was last admitted or ended (the scheduler's ``last_busy_at``) or when
it was parked or loaded, whichever is later; health, status and metrics never go through admission, so they
never count. The residency policy says when each is due (``residency/policy.py``): pinned models have no
deadline, and in manual mode neither has the active model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from typing import Generic, TypeVar

from server.engine.admission import Admission
from server.engine.residency import Resident
from server.engine.residency import policy as residency_policy
from server.engine.switching import UNLOADABLE, ModelProof, ModelSlots
from server.engine.types import (
    EngineError,
    ManagerClosed,
    ManagerObserver,
    ModelNotFound,
    RequestAbortedByUnload,
    ResidencyRefused,
    ResidencyReport,
    SchedulerPolicy,
    SlotState,
)
from server.profiles.schema import Switching

__all__ = ["Residency"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")

#: Longest sleep of the idle timer without a change of the device (a bound on a missed wake-up, not a poll).
_IDLE_CHECK_S = 30.0


class Residency(Generic[B]):
    """The manager's load, unload, preload and idle-unload operations.

    Args:
        slots: The model slots (the one owner of their state).
        admission: Its scheduler knows each model's last use and queues.
        switching: The profile's switching section (drain timeout, the default ``idle_unload_s``).
        policy: The mode, through :class:`SchedulerPolicy` (built once, by the manager).
        observer: Told about idle unloads.
        abort_grace: Seconds aborted requests get to leave before an unloaded engine goes away.
        proof: Proves each loaded engine before it is resident, as a switch proves the model it publishes (None:
            nothing is proven).
    """

    def __init__(
        self,
        slots: ModelSlots[B],
        admission: Admission[B],
        switching: Switching,
        policy: SchedulerPolicy,
        observer: ManagerObserver,
        *,
        abort_grace: float,
        proof: ModelProof[B] | None = None,
    ) -> None:
        self._slots = slots
        self._admission = admission
        self._switching = switching
        self._policy = policy
        self._observer = observer
        self._abort_grace = abort_grace
        self._prove = None if proof is None else proof.prove
        self._tasks: list[asyncio.Task[None]] = []
        self._idle_task: asyncio.Task[None] | None = None
        self._retry_at: dict[str, float] = {}  # an idle unload that did not happen waits this long to retry

    # -- lifecycle ------------------------------------------------------------------------------------------

    def started(self) -> None:
        """The default model serves: preload the models marked so, and run the idle timer where one is set."""
        preloads = [name for name, profile in self._slots.models.items() if profile.preload]
        if preloads:
            self._tasks.append(asyncio.get_running_loop().create_task(self._preload(preloads)))
        self.models_changed()

    def models_changed(self) -> None:
        """The configured models may have changed (a reload): start the idle timer if a model now has one."""
        if self._idle_task is None and any(self._ttl(name) is not None for name in self._slots.models):
            self._idle_task = asyncio.get_running_loop().create_task(self._idle_loop())
            self._tasks.append(self._idle_task)

    async def close(self) -> None:
        """Stop the preloads and the idle timer (shutdown)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(BaseException):
                await task
        self._tasks.clear()
        self._idle_task = None

    # -- operations -----------------------------------------------------------------------------------------

    async def load(self, name: str, *, preload: bool = False) -> ResidencyReport:
        """Make ``name`` resident without activating it (a no-op when it holds an engine already).

        Raises:
            ModelNotFound: ``name`` is not configured.
            ResidencyRefused: The strategy holds one engine at a time, or has no room within its limits.
            LoadFailed: The engine did not start, or its proof failed (the slot is marked failed with the reason).
            ManagerClosed: The server is closing.
        """
        self._check(name)
        started = time.perf_counter()
        async with self._slots.held("load or unload", ResidencyRefused):
            changed = await self._slots.load(name, preload=preload, prove=self._prove)
        return self._report(name, "load", changed, started)

    async def unload(self, name: str, *, force: bool = False, drain_timeout: float | None = None) -> ResidencyReport:
        """Free ``name``'s engine; a failed slot is cleared to stopped.

        The active model is unloaded only in auto mode or with ``force``: it is drained as a switch drains it
        (then its requests are aborted with a retryable error), and no model is active afterwards.

        Raises:
            ModelNotFound: ``name`` is not configured.
            ResidencyRefused: ``name`` is active in manual mode without ``force``, or stashed.
            ManagerClosed: The server is closing.
        """
        self._check(name)
        started = time.perf_counter()
        timeout = self._switching.drain_timeout if drain_timeout is None else drain_timeout
        async with self._slots.held("load or unload", ResidencyRefused):
            changed = await self._unload_held(name, force=force, drain_timeout=timeout)
        return self._report(name, "unload", changed, started)

    def unloads_in(self, name: str, now: float) -> float | None:
        """Seconds until the idle timer unloads ``name`` (None: it is not counting down)."""
        deadline = self._deadline(name)
        return None if deadline is None else round(max(0.0, deadline - now), 1)

    async def _unload_held(self, name: str, *, force: bool, drain_timeout: float) -> bool:
        refusal = None
        if not self._policy.auto and not force:
            refusal = (
                f"'{name}' is the active model; unload it with force (its requests get retryable errors and no "
                "model is active until the next switch), or switch to another model first."
            )
        return await self._slots.unload(
            name,
            drain_timeout=drain_timeout,
            error=RequestAbortedByUnload(name),
            grace=self._abort_grace,
            active_refusal=refusal,
        )

    # -- preload and the idle timer -------------------------------------------------------------------------

    async def _preload(self, names: list[str]) -> None:
        for name in names:
            try:
                report = await self.load(name, preload=True)
            except ManagerClosed:
                return
            except EngineError as exc:
                logger.error("preloading %s failed: %s", name, exc.message)
                continue
            if report.changed:
                logger.info("preloaded %s in %.0f ms", name, report.duration_ms)

    async def _idle_loop(self) -> None:
        slots = self._slots
        while not slots.closed:
            now = time.monotonic()
            for name in list(slots.models):
                if self._due(name, now) and slots.free:
                    await self._idle_unload(name)
            deadlines = [d for name in slots.models if (d := self._deadline(name)) is not None]
            wait = min([max(0.05, d - time.monotonic()) for d in deadlines], default=_IDLE_CHECK_S)
            await slots.wait_change(min(wait, _IDLE_CHECK_S))

    async def _idle_unload(self, name: str) -> None:
        ttl = self._ttl(name)
        logger.info("%s served nothing for %s s: unloading it", name, f"{ttl:g}" if ttl is not None else "?")
        try:
            async with self._slots.held("load or unload", ResidencyRefused):
                if not self._due(name, time.monotonic()):  # a request may have come while the hold began
                    return
                changed = await self._unload_held(name, force=True, drain_timeout=self._switching.drain_timeout)
        except EngineError as exc:
            logger.warning("idle unload of %s did not happen: %s", name, exc.message)
            self._retry_at[name] = time.monotonic() + _IDLE_CHECK_S
            return
        if changed:
            self._observer.model_idle_unloaded(name)

    def _ttl(self, name: str) -> float | None:
        profile = self._slots.models[name]
        return residency_policy.idle_limit(profile.idle_unload_s, self._switching.idle_unload_s, pinned=profile.pinned)

    def _idle_resident(self, name: str) -> Resident | None:
        """``name`` as the residency policy sees it for the idle timer, or None when its slot holds nothing the
        timer counts (stopped, failed, loading, draining, stashed)."""
        slots, scheduler = self._slots, self._admission.scheduler
        slot = slots.slots.get(name)
        if slot is None:
            return None
        if slot.state in UNLOADABLE:
            since, busy = slot.last_active, False
        elif slot.state is SlotState.ACTIVE:
            since = scheduler.active_since
            busy = slots.switch is not None or slots.in_flight(name) > 0 or scheduler.queue_depth(name) > 0
        else:
            return None
        return Resident(
            name=name,
            last_used=max(since, scheduler.last_busy_at(name)),
            pinned=slot.profile.pinned,
            busy=busy,
            active=slot.state is SlotState.ACTIVE,
            idle_unload_s=self._ttl(name),
        )

    def _deadline(self, name: str) -> float | None:
        """When the idle timer unloads ``name`` (monotonic), or None (the residency policy's idle deadline)."""
        resident = self._idle_resident(name)
        if resident is None:
            return None
        return residency_policy.idle_deadline(
            resident, unload_active=self._policy.auto, not_before=self._retry_at.get(name, 0.0)
        )

    def _due(self, name: str, now: float) -> bool:
        """Whether the idle timer unloads ``name`` at ``now``."""
        resident = self._idle_resident(name)
        return resident is not None and residency_policy.idle_due(
            resident, now, unload_active=self._policy.auto, not_before=self._retry_at.get(name, 0.0)
        )

    # -- helpers --------------------------------------------------------------------------------------------

    def _check(self, name: str) -> None:
        if name not in self._slots.models:
            raise ModelNotFound(name, self._slots.models)
        if self._slots.closed:
            raise ManagerClosed()

    def _report(self, name: str, action: str, changed: bool, started: float) -> ResidencyReport:
        return ResidencyReport(
            model=name,
            action=action,
            changed=changed,
            state=self._slots.slots[name].state.value,
            active_model=self._slots.active_model,
            duration_ms=round((time.perf_counter() - started) * 1000.0, 1),
        )
