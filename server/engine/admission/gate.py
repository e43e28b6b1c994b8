"""Admission, in both modes: the asyncio side of the pure :class:`Scheduler`.

Each waiting request is a future the scheduler's effects resolve: ``admit`` creates the request's lease on the
model published now (synchronously, through the device, so a later switch's drain sees it), ``refuse`` fails it
with the typed error. One loop timer wakes the scheduler for its next deadline. The scheduler's clock is
``time.monotonic()``, so status snapshots work outside the loop too. The manager owns one of these and reports
nothing tells it of a change: it subscribes to the device's change signal (switches, request ends, reloads, deaths)
and passes each change to the scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from server.engine.admission.scheduler import Scheduler
from server.engine.switching import ModelSlots
from server.engine.types import (
    AdmissionTimeout,
    Change,
    ConcurrencyLimit,
    CostBook,
    EngineDied,
    EngineError,
    Lease,
    LeaseEnded,
    ManagerClosed,
    ManagerObserver,
    ModelLoadFailed,
    ModelNotActive,
    ModelNotFound,
    ModelSwitching,
    NoActiveModel,
    QueueFull,
    Refusal,
    SchedulerPolicy,
    SlotState,
    SwitchBegan,
    SwitchEnded,
    Waiter,
)

__all__ = ["Admission"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")
Ticket = asyncio.Future[Lease[B]]

#: What a request that names no model is told when nothing serves.
NO_MODEL_ACTIVE = "No model is active; switch to one with POST /v1/models/switch."


class Admission(Generic[B]):
    """Queues, admits and refuses requests as the scheduler decides.

    Args:
        slots: The model slots: what an admitted request is pinned to, and the leases in flight.
        policy: The scheduler's mode and bounds.
        observer: Told how long each queued request waited.
        start_switch: Starts a switch ``(source, target)`` as a task and returns at once (auto mode).
        is_dead: Whether a model's engine died and it has not served since (the healer keeps that).
    """

    def __init__(
        self,
        slots: ModelSlots[B],
        policy: SchedulerPolicy,
        observer: ManagerObserver,
        start_switch: Callable[[str | None, str], None],
        is_dead: Callable[[str], bool],
        costs: CostBook | None = None,
    ) -> None:
        self.scheduler: Scheduler[Ticket[B]] = Scheduler(policy, self, slots, costs)
        self._slots = slots
        self._policy = policy
        self._observer = observer
        self._start_switch = start_switch
        self._is_dead = is_dead
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._change_pending = False
        slots.subscribe(self._on_change)

    # -- called by the manager ------------------------------------------------------------------------------

    async def wait(self, model: str | None, timeout: float) -> Lease[B]:
        """Admit a request for ``model`` (None: the active model, or the one the device is moving to); return its
        lease once admitted, or raise the refusal's error."""
        if model is not None and model not in self._slots.models:
            raise ModelNotFound(model, self._slots.models)
        if self._slots.closed:
            raise ManagerClosed()
        if model is None:
            switch = self._slots.switch
            model = switch.target if switch is not None else self._slots.active_model
            if model is None:
                raise NoActiveModel(NO_MODEL_ACTIVE)
        ticket: Ticket[B] = asyncio.get_running_loop().create_future()
        waiter = self.scheduler.submit(model, ticket, time.monotonic())
        self._rearm()
        try:
            # Auto mode bounds the wait by max_wait_s; ``timeout`` is the caller's own (usually longer) bound.
            return await asyncio.wait_for(asyncio.shield(ticket), timeout)
        except TimeoutError:
            self._give_up(waiter)
            raise AdmissionTimeout(model, timeout) from None
        except asyncio.CancelledError:
            self._give_up(waiter)
            raise

    def retry_in(self, model: str) -> float | None:
        """Seconds until ``model`` is tried again after a failed load, or None."""
        now = time.monotonic()
        until = self.scheduler.backoff_until(model, now)
        return None if until is None else round(until - now, 1)

    # -- the device's changes: the scheduler's one change path ------------------------------------------------

    def _on_change(self, change: Change) -> None:
        """Tell the scheduler what changed on the device: a request's end, a switch's start and end at once (a
        switch's end may start the next switch); any other change once the change in progress is over (a slot
        moves several times in one intent), except the device closing, which refuses every waiter at once."""
        now = time.monotonic()
        if self._slots.closed:
            self.scheduler.device_changed(now)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = self._timer_at = None
            return
        if isinstance(change, LeaseEnded):
            self.scheduler.finished(change.model, now)
        elif isinstance(change, SwitchBegan):
            if change.forced:  # start-up, the admin route or a restart: it ends a backoff
                self.scheduler.switch_forced(change.target, now)
            return
        elif isinstance(change, SwitchEnded):
            self.scheduler.switch_ended(change.switch, now, ok=change.ok)
        elif not self._change_pending:
            self._change_pending = True
            asyncio.get_running_loop().call_soon(self._device_changed)
            return
        self._rearm()

    def _device_changed(self) -> None:
        self._change_pending = False
        self.scheduler.device_changed(time.monotonic())
        if not self._slots.closed:
            self._rearm()

    # -- the scheduler's effects ----------------------------------------------------------------------------

    def start_switch(self, source: str | None, target: str) -> None:
        self._start_switch(source, target)

    def admit(self, waiter: Waiter[Ticket[B]]) -> None:
        ticket = waiter.ticket
        self._observe_wait(waiter, admitted=True)
        if ticket.done():  # the request gave up in the same instant: no lease, nothing to end
            return
        ticket.set_result(self._slots.lease(waiter.model))

    def refuse(self, waiter: Waiter[Ticket[B]], refusal: Refusal) -> None:
        self._observe_wait(waiter, admitted=False)
        if not waiter.ticket.done():
            waiter.ticket.set_exception(self._error(waiter, refusal))

    # -- helpers --------------------------------------------------------------------------------------------

    def _error(self, waiter: Waiter[Ticket[B]], refusal: Refusal) -> EngineError:
        model, retry_after = waiter.model, waiter.retry_after_s
        slots = self._slots
        if refusal is Refusal.SWITCH_FAILED:
            slot = slots.slots.get(model)
            if slot is None or slot.state is not SlotState.FAILED:
                refusal = Refusal.NO_ACTIVE if slots.active_model is None else Refusal.NOT_ACTIVE
            else:
                refusal = Refusal.LOAD_FAILED
        if self._is_dead(model) and refusal in (Refusal.NOT_ACTIVE, Refusal.NO_ACTIVE):
            # Its engine died and its restart has not begun, or gave up: say so, not "not active".
            slot = slots.slots.get(model)
            return EngineDied(model, (slot.reason if slot is not None else None) or "engine died")
        if refusal is Refusal.LOAD_FAILED:
            slot = slots.slots.get(model)
            reason = (slot.reason if slot is not None else None) or "unknown error"
            return ModelLoadFailed(model, reason, retry_after)
        if refusal is Refusal.CONCURRENCY_LIMIT:
            limit = slots.concurrency_limit(model) or 0
            return ConcurrencyLimit(model, limit, self.scheduler.queue_depth(model), retry_after)
        if refusal is Refusal.QUEUE_FULL:
            return QueueFull(model, self._policy.max_queue, retry_after)
        if refusal is Refusal.WAIT_TIMEOUT:
            return AdmissionTimeout(model, self._policy.max_wait_s, retry_after)
        if refusal is Refusal.REMOVED:
            return ModelNotFound(model, self._slots.models)
        if refusal is Refusal.NOT_ACTIVE and slots.active_model is not None:
            return ModelNotActive(model, slots.active_model)
        if refusal is Refusal.SWITCHING_AWAY and (switch := slots.switch) is not None:
            return ModelSwitching(model, switch.source, switch.target)
        if refusal in (Refusal.NO_ACTIVE, Refusal.NOT_ACTIVE, Refusal.SWITCHING_AWAY):
            return NoActiveModel(f"No model is active; '{model}' can be switched to.")
        return ManagerClosed()

    def _give_up(self, waiter: Waiter[Ticket[B]]) -> None:
        ticket = waiter.ticket
        if ticket.done() and not ticket.cancelled() and ticket.exception() is None:
            # Admitted in the same instant the caller gave up: the lease would leak.
            self._slots.release(ticket.result())
        else:
            ticket.cancel()
            self.scheduler.withdraw(waiter, time.monotonic())
            self._rearm()

    def _observe_wait(self, waiter: Waiter[Ticket[B]], *, admitted: bool) -> None:
        self._observer.request_waited(waiter.model, time.monotonic() - waiter.enqueued_at, admitted=admitted)

    def _rearm(self) -> None:
        """Keep one loop timer at the scheduler's next deadline."""
        wake = self.scheduler.next_wakeup()
        if wake == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = wake
        if wake is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, wake - time.monotonic()), self._tick)
        else:
            self._timer = None

    def _tick(self) -> None:
        self._timer = self._timer_at = None  # a timer that fires early re-arms itself for the same time
        self.scheduler.tick(time.monotonic())
        self._rearm()
