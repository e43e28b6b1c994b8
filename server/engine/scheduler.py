"""The auto-mode scheduler: which model gets the device next, and when.

Pure and synchronous: no asyncio and no clock of its own. The manager feeds it events with the current time and
it acts only through :class:`SchedulerEffects` (start a switch, admit a waiter, refuse a waiter), so the tests and
the simulation benchmark drive it with a fake clock and fake effects.

Policy (the README's "Auto mode" section says the same for users):
    1. Each model has a bounded FIFO queue of waiting requests. A request for the active model is admitted at
       once while no switch is under way; any other request queues. A full queue refuses at once.
    2. Only the scheduler starts switches; a waiter never does.
    3. A switch that publishes a model admits that model's whole queue first, in order.
    4. The active model keeps the device while it has requests in flight, up to its quantum:
       ``clamp(RESIDENCY_PER_SWITCH_COST x estimated cost of the pending switch, min_residency_s,
       max_residency_s)``. The cost is a running estimate per (from, to) pair of measured switch times, kept
       apart for warm targets (parked with their engine) and cold ones (an engine start). The
       model yields earlier when the oldest waiter would otherwise miss ``max_wait_s`` (at 90% of it, less the
       switch's estimated cost). With nothing in flight
       it lingers for ``min(estimated cost, min_residency_s)`` in case more requests come (ski rental: idling
       as long as the switch would take costs at most twice the best choice), then yields; after a request
       ends it lingers at least ``IDLE_GAP_S`` (a client's next request is milliseconds away).
    5. Next comes the model whose oldest waiter is oldest (models that are backing off are skipped).
    6. No request waits longer than ``max_wait_s``: past it, it is refused (the API answers 503 + Retry-After).
    7. A model that failed to load backs off for ``failure_backoff_s x 2^(failures-1)``, capped. Meanwhile its
       requests are refused at once and it is never switched to, so the healthy model is neither drained nor
       unloaded. An admin switch (``switch_started(forced=True)``) retries at once.

Invariants:
    * At most one switch is under way, and only while ``switching`` is set.
    * A queued waiter ends exactly once: admitted, refused or withdrawn.
    * While no switch is under way, the active model's queue is empty.
"""

from __future__ import annotations

import enum
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from server.profiles.schema import Switching

__all__ = [
    "IDLE_GAP_S",
    "RESIDENCY_PER_SWITCH_COST",
    "Refusal",
    "Scheduler",
    "SchedulerEffects",
    "SchedulerPolicy",
    "Waiter",
]

logger = logging.getLogger("turnout.engine.scheduler")

T = TypeVar("T")

#: A model keeps the device for this many times the cost of the switch away from it (within the residency bounds),
#: so switching takes at most about 1/(1+4) = 20% of the device's time when the bounds allow.
RESIDENCY_PER_SWITCH_COST = 4.0
#: A busy model yields when its oldest waiter has used this share of ``max_wait_s`` less the switch's cost.
DEADLINE_SHARE = 0.9
#: An active model that has just finished its requests waits at least this long (within ``min_residency_s``) for
#: its next one before yielding, however cheap the switch: a client's next request needs a few milliseconds to
#: come back, and yielding in that gap made a cheap ``keep`` swap on nearly every alternation of mixed traffic.
IDLE_GAP_S = 0.1
#: Weight of the newest measurement in the running estimate of a switch's cost.
COST_SMOOTHING = 0.5


@dataclass(frozen=True, kw_only=True)
class SchedulerPolicy:
    """The scheduler's settings (``switching.*`` of the profile; see ``server/profiles/schema.py``)."""

    min_residency_s: float = 2.0
    max_residency_s: float = 60.0
    max_wait_s: float = 120.0
    max_queue: int = 256
    failure_backoff_s: float = 5.0
    max_failure_backoff_s: float = 300.0

    @classmethod
    def from_switching(cls, switching: Switching) -> SchedulerPolicy:
        """The policy of a profile's ``switching`` section."""
        return cls(
            min_residency_s=switching.min_residency_s,
            max_residency_s=switching.max_residency_s,
            max_wait_s=switching.max_wait_s,
            max_queue=switching.max_queue,
            failure_backoff_s=switching.failure_backoff_s,
            max_failure_backoff_s=switching.max_failure_backoff_s,
        )


class Refusal(enum.StrEnum):
    """Why a waiter was refused."""

    QUEUE_FULL = "queue_full"
    WAIT_TIMEOUT = "wait_timeout"
    LOAD_FAILED = "load_failed"
    CLOSED = "closed"
    REMOVED = "removed"


@dataclass(eq=False)
class Waiter(Generic[T]):
    """One request waiting for (or admitted to) a model.

    Attributes:
        model: The model it asked for.
        enqueued_at: When it arrived.
        ticket: The caller's handle (the manager's future).
        retry_after_s: Set on refusal: seconds the client should wait before it retries.
    """

    model: str
    enqueued_at: float
    ticket: T
    retry_after_s: int = 0


class SchedulerEffects(Protocol[T]):
    """What the scheduler asks of its driver. Each call returns at once; none may call back into the scheduler."""

    def start_switch(self, source: str | None, target: str) -> None:
        """Begin switching the device to ``target``; report the end with :meth:`Scheduler.switch_ended`."""

    def admit(self, waiter: Waiter[T]) -> None:
        """Let ``waiter`` run on its model, which is published now; report its end with ``finished``."""

    def refuse(self, waiter: Waiter[T], refusal: Refusal) -> None:
        """Answer ``waiter`` with an error (``waiter.retry_after_s`` says when to retry)."""


@dataclass
class _Backoff:
    failures: int = 0
    retry_at: float = 0.0


@dataclass
class _Model(Generic[T]):
    queue: deque[Waiter[T]] = field(default_factory=deque)
    in_flight: int = 0
    last_busy_at: float = -math.inf  # never busy yet: no gap to wait for
    backoff: _Backoff = field(default_factory=_Backoff)


class Scheduler(Generic[T]):
    """Auto mode's admission and switching policy for one manager (see the module docstring).

    Args:
        models: Every configured model.
        policy: Residency, wait and backoff bounds.
        effects: Carries out the decisions.
        warm: Whether a model is parked warm (resident, asleep, stashed) rather than stopped. Switches to warm
            and to cold targets are estimated apart, so one engine start does not make later swaps look dear.
    """

    def __init__(
        self,
        models: Iterable[str],
        policy: SchedulerPolicy,
        effects: SchedulerEffects[T],
        *,
        warm: Callable[[str], bool] = lambda model: True,
    ) -> None:
        self._models: dict[str, _Model[T]] = {name: _Model() for name in models}
        self._policy = policy
        self._effects = effects
        self._active: str | None = None
        self._active_since = 0.0
        self._switching: tuple[str | None, str] | None = None
        self._switch_started_at = 0.0
        self._switch_warm = True
        self._warm = warm
        self._costs: dict[tuple[str | None, str, bool], float] = {}
        self._closed = False

    # -- views ----------------------------------------------------------------------------------------------

    @property
    def active(self) -> str | None:
        """The model that holds the device."""
        return self._active

    @property
    def switching(self) -> tuple[str | None, str] | None:
        """``(source, target)`` of the switch under way."""
        return self._switching

    def queue_depth(self, model: str) -> int:
        """Requests waiting for ``model``."""
        return len(self._models[model].queue)

    def in_flight(self, model: str) -> int:
        """Requests admitted to ``model`` and not finished."""
        return self._models[model].in_flight

    def backoff_until(self, model: str, now: float) -> float | None:
        """When ``model`` may be tried again, or None when it is not backing off."""
        backoff = self._models[model].backoff
        return backoff.retry_at if backoff.failures and backoff.retry_at > now else None

    def cost_estimate(self, source: str | None, target: str) -> float:
        """The running estimate of a switch's seconds.

        Kept per (source, target) and per whether ``target`` is warm now. Unmeasured pairs borrow the reverse
        pair's estimate, else the mean into ``target``, else 0 (no evidence yet that switches are dear).
        """
        warm = self._warm(target)
        for key in ((source, target, warm), (target, source, warm)):
            if key in self._costs:
                return self._costs[key]
        to_target = [cost for (_, to, was_warm), cost in self._costs.items() if to == target and was_warm == warm]
        return sum(to_target) / len(to_target) if to_target else 0.0

    def quantum(self, source: str, target: str) -> float:
        """How long ``source`` keeps the device, with demand, before a switch to ``target``."""
        policy = self._policy
        wanted = RESIDENCY_PER_SWITCH_COST * self.cost_estimate(source, target)
        return min(max(wanted, policy.min_residency_s), policy.max_residency_s)

    def next_wakeup(self) -> float | None:
        """The next time :meth:`tick` has something to do (a wait bound or the end of a quantum)."""
        times = [m.queue[0].enqueued_at + self._policy.max_wait_s for m in self._models.values() if m.queue]
        candidate = self._next_model()
        if self._switching is None and self._active is not None and candidate is not None:
            times.append(self._yield_at(self._active, candidate))
            if self._models[self._active].in_flight == 0:
                times.append(self._idle_until(self._active, candidate))
        return min(times, default=None)

    # -- events ---------------------------------------------------------------------------------------------

    def submit(self, model: str, ticket: T, now: float) -> Waiter[T]:
        """A request for ``model`` arrived: admit it, queue it or refuse it (through the effects)."""
        waiter = Waiter(model=model, enqueued_at=now, ticket=ticket)
        state = self._models[model]
        if self._closed:
            self._refuse(waiter, Refusal.CLOSED, 1)
        elif (retry_at := self.backoff_until(model, now)) is not None:
            self._refuse(waiter, Refusal.LOAD_FAILED, retry_at - now)
        elif self._switching is None and model == self._active:
            self._admit(waiter, now)
        elif len(state.queue) >= self._policy.max_queue:
            self._refuse(waiter, Refusal.QUEUE_FULL, self._expected_wait(model, now))
        else:
            state.queue.append(waiter)
            self._decide(now)
        return waiter

    def withdraw(self, waiter: Waiter[T], now: float) -> None:
        """A queued waiter gave up (its client went away). No effect is called for it."""
        queue = self._models[waiter.model].queue
        if waiter in queue:
            queue.remove(waiter)
            self._decide(now)

    def finished(self, model: str, now: float) -> None:
        """A request admitted to ``model`` ended."""
        state = self._models[model]
        state.in_flight = max(0, state.in_flight - 1)
        state.last_busy_at = now
        self._decide(now)

    def tick(self, now: float) -> None:
        """Time passed: refuse waiters past their bound, end a used-up quantum."""
        for state in self._models.values():
            while state.queue and state.queue[0].enqueued_at + self._policy.max_wait_s <= now:
                waiter = state.queue.popleft()
                self._refuse(waiter, Refusal.WAIT_TIMEOUT, self._expected_wait(waiter.model, now))
        self._decide(now)

    def switch_started(self, source: str | None, target: str, now: float, *, forced: bool = False) -> None:
        """A switch the scheduler did not start began (start-up, or the admin route; ``forced`` ends a backoff)."""
        if forced:
            self._models[target].backoff.retry_at = now
        self._begin(source, target, now)

    def switch_ended(self, active: str | None, now: float, *, ok: bool) -> None:
        """The switch under way ended; ``active`` is the model published now (None: nothing serves)."""
        assert self._switching is not None, "switch_ended without a switch"
        source, target = self._switching
        self._switching = None
        previous = self._active
        self._active = active
        if active != previous or ok:
            self._active_since = now
        state = self._models[target]
        if ok:
            measured = now - self._switch_started_at
            key = (source, target, self._switch_warm)
            known = self._costs.get(key)
            self._costs[key] = measured if known is None else COST_SMOOTHING * measured + (1 - COST_SMOOTHING) * known
            state.backoff = _Backoff()
        else:
            self._back_off(target, now)
        if active is not None:
            self._admit_queue(active, now)
        self._decide(now)

    @property
    def models(self) -> list[str]:
        """Every model the scheduler knows, in profile order."""
        return list(self._models)

    def set_models(self, models: Iterable[str]) -> None:
        """Follow a profile reload: added models start with empty queues; a removed model's waiters are refused.

        The manager never removes the active model or reloads during a switch, so neither names a removed model.
        """
        names = list(models)
        for name in names:
            self._models.setdefault(name, _Model())
        for name in [name for name in self._models if name not in names]:
            state = self._models.pop(name)
            while state.queue:
                self._refuse(state.queue.popleft(), Refusal.REMOVED, 1)
        self._costs = {pair: cost for pair, cost in self._costs.items() if pair[1] in self._models}

    def close(self) -> None:
        """Refuse every waiter; refuse everything from now on."""
        self._closed = True
        for state in self._models.values():
            while state.queue:
                self._refuse(state.queue.popleft(), Refusal.CLOSED, 1)

    # -- decisions ------------------------------------------------------------------------------------------

    def _decide(self, now: float) -> None:
        """Start the next switch when the policy says so; the one place that does."""
        if self._switching is not None or self._closed:
            return
        candidate = self._next_model()
        if candidate is None:
            return
        active = self._active
        if active is None:
            why = "no model is active"
        elif self._models[active].in_flight == 0 and now >= self._idle_until(active, candidate):
            why = f"'{active}' has nothing in flight"
        elif now >= self._yield_at(active, candidate):
            why = f"'{active}' used its time on the device"
        else:
            return
        logger.info(
            "scheduler: switching %s -> %s (%s; %d waiting)", active, candidate, why, self.queue_depth(candidate)
        )
        self._begin(active, candidate, now)
        self._effects.start_switch(active, candidate)

    def _begin(self, source: str | None, target: str, now: float) -> None:
        self._switching = (source, target)
        self._switch_started_at = now
        self._switch_warm = self._warm(target)

    def _next_model(self) -> str | None:
        """The model, other than the active one, whose oldest waiter is oldest."""
        oldest: Waiter[T] | None = None
        for name, state in self._models.items():
            if (
                name != self._active
                and state.queue
                and (oldest is None or state.queue[0].enqueued_at < oldest.enqueued_at)
            ):
                oldest = state.queue[0]
        return oldest.model if oldest is not None else None

    def _yield_at(self, active: str, candidate: str) -> float:
        """When ``active`` gives the device up to ``candidate`` even though it has demand."""
        by_quantum = self._active_since + self.quantum(active, candidate)
        oldest = self._models[candidate].queue[0].enqueued_at
        # Leave the switch its estimated time, and a tenth of the bound for the estimate to be wrong.
        by_deadline = oldest + DEADLINE_SHARE * self._policy.max_wait_s - self.cost_estimate(active, candidate)
        return min(by_quantum, by_deadline)

    def _idle_until(self, active: str, candidate: str) -> float:
        """When ``active``, with nothing in flight, stops waiting for more requests."""
        cost, bound = self.cost_estimate(active, candidate), self._policy.min_residency_s
        after_activation = self._active_since + min(cost, bound)
        after_last_request = self._models[active].last_busy_at + min(max(cost, IDLE_GAP_S), bound)
        return max(after_activation, after_last_request)

    def _expected_wait(self, model: str, now: float) -> float:
        """A guess at when ``model`` would serve, for ``Retry-After``."""
        active = self._active
        if active is None or active == model:
            return self.cost_estimate(active, model)
        remaining = max(0.0, self._active_since + self.quantum(active, model) - now)
        return remaining + self.cost_estimate(active, model)

    # -- effects --------------------------------------------------------------------------------------------

    def _admit(self, waiter: Waiter[T], now: float) -> None:
        state = self._models[waiter.model]
        state.in_flight += 1
        state.last_busy_at = now
        self._effects.admit(waiter)

    def _admit_queue(self, model: str, now: float) -> None:
        queue = self._models[model].queue
        while queue:
            self._admit(queue.popleft(), now)

    def _refuse(self, waiter: Waiter[T], refusal: Refusal, retry_after_s: float) -> None:
        waiter.retry_after_s = max(1, math.ceil(retry_after_s))
        self._effects.refuse(waiter, refusal)

    def _back_off(self, model: str, now: float) -> None:
        backoff = self._models[model].backoff
        backoff.failures += 1
        delay = min(self._policy.failure_backoff_s * 2 ** (backoff.failures - 1), self._policy.max_failure_backoff_s)
        backoff.retry_at = now + delay
        logger.warning(
            "scheduler: '%s' failed to load (%d in a row); not retried for %.0f s", model, backoff.failures, delay
        )
        queue = self._models[model].queue
        while queue:
            self._refuse(queue.popleft(), Refusal.LOAD_FAILED, delay)
