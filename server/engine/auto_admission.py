"""Auto mode's admission: the asyncio side of the pure :class:`Scheduler`.

Each waiting request is a future the scheduler's effects resolve: ``admit`` creates the request's lease on the
model published now (synchronously, so a later switch's drain sees it), ``refuse`` fails it with the typed error.
One loop timer wakes the scheduler for its next deadline. The scheduler's clock is ``time.monotonic()``, so
status snapshots work outside the loop too. The manager owns one of these in auto mode and reports switch starts,
switch ends and request ends to it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from server.engine.errors import (
    AdmissionTimeout,
    EngineError,
    ManagerClosed,
    ModelLoadFailed,
    ModelNotFound,
    QueueFull,
)
from server.engine.lease import Lease, Published
from server.engine.observer import ManagerObserver
from server.engine.scheduler import Refusal, Scheduler, SchedulerPolicy, Waiter

__all__ = ["AutoAdmission"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")
Ticket = asyncio.Future[Lease[B]]


class AutoAdmission(Generic[B]):
    """Queues, admits and refuses auto-mode requests as the scheduler decides.

    Args:
        models: Every configured model.
        policy: The scheduler's bounds.
        published: Reads the manager's published snapshot (what an admitted request is pinned to).
        start_switch: Starts a switch ``(source, target)`` as a task and returns at once.
        track: Counts a new lease as in flight.
        release: Ends a lease (one that was admitted the instant its caller gave up).
        observer: Told how long each queued request waited.
        load_failure: The reason a model last failed to load (for the log, never for the client).
        warm: Whether a model is parked with its engine (its switch costs are estimated apart from cold starts).
    """

    def __init__(
        self,
        models: Iterable[str],
        policy: SchedulerPolicy,
        *,
        published: Callable[[], Published[B] | None],
        start_switch: Callable[[str | None, str], None],
        track: Callable[[Lease[B]], None],
        release: Callable[[Lease[B]], None],
        observer: ManagerObserver,
        load_failure: Callable[[str], str],
        warm: Callable[[str], bool],
    ) -> None:
        self.scheduler: Scheduler[Ticket[B]] = Scheduler(models, policy, self, warm=warm)
        self._policy = policy
        self._published = published
        self._start_switch = start_switch
        self._track = track
        self._release = release
        self._observer = observer
        self._load_failure = load_failure
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    # -- called by the manager ------------------------------------------------------------------------------

    async def wait(self, model: str, timeout: float) -> Lease[B]:
        """Queue a request for ``model``; return its lease once admitted, or raise the refusal's error."""
        ticket: Ticket[B] = asyncio.get_running_loop().create_future()
        waiter = self.scheduler.submit(model, ticket, time.monotonic())
        self._rearm()
        try:
            # The scheduler bounds the wait by max_wait_s; ``timeout`` is the caller's own (usually longer) bound.
            return await asyncio.wait_for(asyncio.shield(ticket), timeout)
        except TimeoutError:
            self._give_up(waiter)
            raise AdmissionTimeout(model, timeout) from None
        except asyncio.CancelledError:
            self._give_up(waiter)
            raise

    def finished(self, model: str) -> None:
        """A lease of ``model`` ended."""
        self.scheduler.finished(model, time.monotonic())
        self._rearm()

    def switch_started(self, source: str | None, target: str) -> None:
        """A switch the scheduler did not ask for began (start-up or the admin route: a forced retry)."""
        self.scheduler.switch_started(source, target, time.monotonic(), forced=True)

    def switch_ended(self, active: str | None, *, ok: bool) -> None:
        """The switch under way ended; ``active`` is published now."""
        self.scheduler.switch_ended(active, time.monotonic(), ok=ok)
        self._rearm()

    def retry_in(self, model: str) -> float | None:
        """Seconds until ``model`` is tried again after a failed load, or None."""
        now = time.monotonic()
        until = self.scheduler.backoff_until(model, now)
        return None if until is None else round(until - now, 1)

    def set_models(self, models: Iterable[str]) -> None:
        """A reload changed the configured models (see :meth:`Scheduler.set_models`)."""
        self.scheduler.set_models(models)
        self._rearm()

    def close(self) -> None:
        """Refuse every waiter and stop the timer."""
        self.scheduler.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None

    # -- the scheduler's effects ----------------------------------------------------------------------------

    def start_switch(self, source: str | None, target: str) -> None:
        self._start_switch(source, target)

    def admit(self, waiter: Waiter[Ticket[B]]) -> None:
        published = self._published()
        ticket = waiter.ticket
        assert published is not None and published.model == waiter.model, "admitted to a model not published"
        self._observe_wait(waiter, admitted=True)
        if ticket.done():  # the request gave up in the same instant: the scheduler counted it, so end it
            asyncio.get_running_loop().call_soon(self.finished, waiter.model)
            return
        lease: Lease[B] = Lease(published=published)
        self._track(lease)
        ticket.set_result(lease)

    def refuse(self, waiter: Waiter[Ticket[B]], refusal: Refusal) -> None:
        self._observe_wait(waiter, admitted=False)
        if not waiter.ticket.done():
            waiter.ticket.set_exception(self._error(waiter, refusal))

    # -- helpers --------------------------------------------------------------------------------------------

    def _error(self, waiter: Waiter[Ticket[B]], refusal: Refusal) -> EngineError:
        model, retry_after = waiter.model, waiter.retry_after_s
        if refusal is Refusal.LOAD_FAILED:
            return ModelLoadFailed(model, self._load_failure(model), retry_after)
        if refusal is Refusal.QUEUE_FULL:
            return QueueFull(model, self._policy.max_queue, retry_after)
        if refusal is Refusal.WAIT_TIMEOUT:
            return AdmissionTimeout(model, self._policy.max_wait_s, retry_after)
        if refusal is Refusal.REMOVED:
            return ModelNotFound(model, self.scheduler.models)
        return ManagerClosed()

    def _give_up(self, waiter: Waiter[Ticket[B]]) -> None:
        ticket = waiter.ticket
        if ticket.done() and not ticket.cancelled() and ticket.exception() is None:
            # Admitted in the same instant the caller gave up: the lease would leak.
            self._release(ticket.result())
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
