"""The scheduler: which requests run now, which wait, which model gets the device next, and when.

Pure and synchronous: no asyncio and no clock of its own. The admission feeds it the device's changes (its one
change path: the device's change signal) with the current time, it reads the models, who is active, which switch
runs, whether the device is closed and how many requests are in flight from the device's own view
(:class:`SlotsView`: it keeps no copy of them), and it acts only through :class:`SchedulerEffects` (start a
switch, admit a waiter, refuse a waiter), so the tests and the simulation benchmark drive it with a fake clock,
a fake device and fake effects.

Manual mode is one more policy of the same algorithm: a request for the active model is admitted, one for the
target of the switch under way waits for it, any other is refused at once (``NOT_ACTIVE``, ``SWITCHING_AWAY``,
``NO_ACTIVE``), and the scheduler never starts a switch: only the admin route does. Failed loads do not back
off; the target's waiters are refused with ``SWITCH_FAILED``.

Auto mode:

Policy (docs/switching.md's "Auto mode" section says the same for users):
    1. Each model has a bounded FIFO queue of waiting requests. A request for the active model is admitted at
       once while no switch is under way; any other request queues. A full queue refuses at once.
    2. Only the scheduler starts switches; a waiter never does.
    3. A switch that publishes a model admits that model's whole queue first, in order.
    4. The active model keeps the device while it has requests in flight, up to its quantum:
       ``clamp(RESIDENCY_PER_SWITCH_COST x estimated cost of the pending switch, min_residency_s,
       max_residency_s)``. The cost is a running estimate per (from, to) pair of measured switch times, kept
       apart for warm targets (parked with their engine) and cold ones (an engine start). The
       model yields earlier when any model's oldest waiter would otherwise miss ``max_wait_s`` (at 90% of it,
       less the switch's estimated cost). With nothing in flight
       it lingers for ``min(estimated cost, min_residency_s)`` in case more requests come (ski rental: idling
       as long as the switch would take costs at most twice the best choice), then yields; after a request
       ends it lingers at least ``IDLE_GAP_S`` (a client's next request is milliseconds away).
    5. Next comes a model whose oldest waiter is due (has waited ``DUE_SHARE`` of ``max_wait_s``, less the
       switch's estimated cost), the oldest first; with none due, the model with the lowest ``priority`` value,
       and among equals the one whose oldest waiter is oldest (models that are backing off are skipped). So a
       priority orders the device's time but never makes a request time out: a waiter that nears its bound goes
       first, and the active model yields in time for every waiter's bound (step 4), not only the next model's.
    6. No request waits longer than ``max_wait_s``: past it, it is refused (the API answers 503 + Retry-After).
    7. A model that failed to load backs off for ``failure_backoff_s x 2^(failures-1)``, capped. Meanwhile its
       requests are refused at once and it is never switched to, so the healthy model is neither drained nor
       unloaded. An admin switch (``switch_started(forced=True)``) retries at once.

Per-model concurrency (both modes): a model with ``max_concurrent_requests`` admits no more than that many at
once; past it, requests for the active model wait in its queue, in order (up to ``max_queue``, then
``CONCURRENCY_LIMIT``, a 429 with Retry-After, also while a switch drains it), and each request that ends lets
the next one in. A full queue of a model under its limit waits for the device: ``QUEUE_FULL``, a 503.

Invariants:
    * The scheduler starts a switch only while the device is free (no switch under way, no reload holding it).
    * A queued waiter ends exactly once: admitted, refused or withdrawn.
    * While no switch is under way, the active model's queue holds only requests past its concurrency limit.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from server.engine.types import CostBook, Refusal, SchedulerEffects, SchedulerPolicy, SlotsView, SwitchView, Waiter

__all__ = ["DUE_SHARE", "IDLE_GAP_S", "RESIDENCY_PER_SWITCH_COST", "Scheduler"]

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
#: A waiter that has waited this share of ``max_wait_s`` (less its switch's estimated cost) is due: its model comes
#: next whatever the priorities, so that a priority never makes a request time out. Half the bound leaves the other
#: half for one more model's quantum and the switch (the active model yields in time for every waiter's bound).
DUE_SHARE = 0.5
#: Weight of the newest measurement in the running estimate of a switch's cost.
COST_SMOOTHING = 0.5


@dataclass
class _Backoff:
    failures: int = 0
    retry_at: float = 0.0


@dataclass
class _Model(Generic[T]):
    queue: deque[Waiter[T]] = field(default_factory=deque)
    last_busy_at: float = -math.inf  # never busy yet: no gap to wait for
    backoff: _Backoff = field(default_factory=_Backoff)


class Scheduler(Generic[T]):
    """The admission and switching policy for one manager (see the module docstring).

    Args:
        models: Every configured model.
        policy: The mode, residency, wait and backoff bounds.
        effects: Carries out the decisions.
        slots: The model slots, read on every decision.
    """

    def __init__(
        self, policy: SchedulerPolicy, effects: SchedulerEffects[T], slots: SlotsView, costs: CostBook | None = None
    ) -> None:
        # Each model's demand (queue, last use, backoff), made at its first request; the model list is the device's.
        self._demand: dict[str, _Model[T]] = {}
        self._policy = policy
        self._effects = effects
        self._slots = slots
        self._active_since = 0.0
        self._now = 0.0  # the time of the newest event, for the views that take none
        self._costs: dict[tuple[str | None, str, bool], float] = {}
        self._book = costs

    # -- views ----------------------------------------------------------------------------------------------

    def queue_depth(self, model: str) -> int:
        """Requests waiting for ``model``."""
        state = self._demand.get(model)
        return len(state.queue) if state is not None else 0

    def last_busy_at(self, model: str) -> float:
        """When a request for ``model`` was last admitted or ended (-inf: never): its last use."""
        state = self._demand.get(model)
        return state.last_busy_at if state is not None else -math.inf

    @property
    def active_since(self) -> float:
        """When the model published now became active (the scheduler's clock)."""
        return self._active_since

    def backoff_until(self, model: str, now: float) -> float | None:
        """When ``model`` may be tried again, or None when it is not backing off."""
        state = self._demand.get(model)
        if state is None:
            return None
        backoff = state.backoff
        return backoff.retry_at if backoff.failures and backoff.retry_at > now else None

    def cost_estimate(self, source: str | None, target: str) -> float:
        """The running estimate of a switch's seconds.

        Kept per (source, target) and per whether ``target`` is warm now. Unmeasured pairs borrow the reverse
        pair's estimate, else the mean into ``target``, else the reload cost book's figure for ``target`` by that
        path (``warm``, else its in-place swap or cold start: measured by earlier runs too, as it is kept across
        restarts), else 0 (no evidence yet that switches are dear).
        """
        warm = self._slots.is_warm(target)
        for key in ((source, target, warm), (target, source, warm)):
            if key in self._costs:
                return self._costs[key]
        to_target = [cost for (_, to, was_warm), cost in self._costs.items() if to == target and was_warm == warm]
        if to_target:
            return sum(to_target) / len(to_target)
        booked = None
        if self._book is not None:
            booked = self._book.seconds(target, "warm") if warm else self._book.return_s(target)
        return booked if booked is not None else 0.0

    def quantum(self, source: str, target: str) -> float:
        """How long ``source`` keeps the device, with demand, before a switch to ``target``."""
        policy = self._policy
        wanted = RESIDENCY_PER_SWITCH_COST * self.cost_estimate(source, target)
        return min(max(wanted, policy.min_residency_s), policy.max_residency_s)

    def next_wakeup(self) -> float | None:
        """The next time :meth:`tick` has something to do (a wait bound or the end of a quantum)."""
        times = [m.queue[0].enqueued_at + self._policy.max_wait_s for m in self._demand.values() if m.queue]
        times = [when for when in times if when < math.inf]
        candidate = self._next_model(self._now)
        active = self._slots.active_model
        if self._policy.auto and self._slots.free and active is not None and candidate is not None:
            times.append(self._yield_at(active, candidate))
            if self._slots.in_flight(active) == 0:
                times.append(self._idle_until(active, candidate))
        return min(times, default=None)

    # -- events ---------------------------------------------------------------------------------------------

    def submit(self, model: str, ticket: T, now: float) -> Waiter[T]:
        """A request for ``model`` arrived: admit it, queue it or refuse it (through the effects)."""
        waiter = Waiter(model=model, enqueued_at=now, ticket=ticket)
        state = self._per_model(model)
        switch, active = self._slots.switch, self._slots.active_model
        if self._slots.closed:
            self._refuse(waiter, Refusal.CLOSED, 1)
        elif (retry_at := self.backoff_until(model, now)) is not None:
            self._refuse(waiter, Refusal.LOAD_FAILED, retry_at - now)
        elif switch is None and model == active and not self._at_limit(model):
            self._admit(waiter, now)
        elif switch is None and model == active:
            if len(state.queue) >= self._policy.max_queue:
                self._refuse(waiter, Refusal.CONCURRENCY_LIMIT, 1)
            else:
                state.queue.append(waiter)  # the next request of this model to end lets it in
        elif not self._policy.auto and (refusal := _manual_refusal(model, switch, active)) is not None:
            self._refuse(waiter, refusal, 1)
        elif len(state.queue) >= self._policy.max_queue:
            # A model that serves its limit (a switch drains it) is refused for its own load: 429, not 503.
            full = Refusal.CONCURRENCY_LIMIT if self._at_limit(model, queued_first=False) else Refusal.QUEUE_FULL
            self._refuse(waiter, full, self._expected_wait(model, now))
        else:
            state.queue.append(waiter)
            self._decide(now)
        return waiter

    def withdraw(self, waiter: Waiter[T], now: float) -> None:
        """A queued waiter gave up (its client went away). No effect is called for it."""
        queue = self._per_model(waiter.model).queue
        if waiter in queue:
            queue.remove(waiter)
            self._decide(now)

    def finished(self, model: str, now: float) -> None:
        """A request admitted to ``model`` ended."""
        state = self._demand.get(model)
        if state is None:
            return
        state.last_busy_at = now
        if self._slots.switch is None and model == self._slots.active_model:
            self._admit_queue(model, now)  # waiters past the concurrency limit, as far as it allows now
        self._decide(now)

    def tick(self, now: float) -> None:
        """Time passed: refuse waiters past their bound, end a used-up quantum."""
        for state in self._demand.values():
            while state.queue and state.queue[0].enqueued_at + self._policy.max_wait_s <= now:
                waiter = state.queue.popleft()
                self._refuse(waiter, Refusal.WAIT_TIMEOUT, self._expected_wait(waiter.model, now))
        self._decide(now)

    def switch_forced(self, target: str, now: float) -> None:
        """A switch the scheduler did not start began (start-up, or the admin route): it ends a backoff."""
        self._per_model(target).backoff.retry_at = now

    def switch_ended(self, ended: SwitchView, now: float, *, ok: bool) -> None:
        """``ended`` is over; the device publishes its outcome already (``active_model``; None: nothing serves)."""
        active = self._slots.active_model
        if active != ended.source or ok:
            self._active_since = now
        state = self._demand.get(ended.target)
        if state is not None and ok:
            measured = now - ended.started_at
            key = (ended.source, ended.target, ended.warm)
            known = self._costs.get(key)
            self._costs[key] = measured if known is None else COST_SMOOTHING * measured + (1 - COST_SMOOTHING) * known
            state.backoff = _Backoff()
        elif state is not None:
            self._failed(ended.target, now)
        if active is not None:
            self._admit_queue(active, now)
        if not self._policy.auto:
            # Manual mode: only the switch's target waits for a switch, so a queue left elsewhere holds requests
            # past the concurrency limit of a model that is not active any more.
            for name, other in self._demand.items():
                while name != active and other.queue:
                    self._refuse(other.queue.popleft(), Refusal.NOT_ACTIVE, 1)
        self._decide(now)

    def device_changed(self, now: float) -> None:
        """The device changed outside a switch (a reload let go of it or changed the models, an engine died, it
        closed): follow it, and decide again.

        A model a reload removed has its waiters refused (the device never removes the active model, nor reloads
        during a switch); once the device is closed, every waiter is refused, and everything from then on.
        """
        models = self._slots.models
        for name in [name for name in self._demand if name not in models]:
            state = self._demand.pop(name)
            while state.queue:
                self._refuse(state.queue.popleft(), Refusal.REMOVED, 1)
        self._costs = {pair: cost for pair, cost in self._costs.items() if pair[1] in models}
        if self._slots.closed:
            for state in self._demand.values():
                while state.queue:
                    self._refuse(state.queue.popleft(), Refusal.CLOSED, 1)
            return
        self._decide(now)

    # -- decisions ------------------------------------------------------------------------------------------

    def _decide(self, now: float) -> None:
        """Start the next switch when the policy says so; the one place that does."""
        self._now = now
        if not self._policy.auto or not self._slots.free or self._slots.closed:
            return
        candidate = self._next_model(now)
        if candidate is None:
            return
        active = self._slots.active_model
        if active is None:
            why = "no model is active"
        elif self._slots.in_flight(active) == 0 and now >= self._idle_until(active, candidate):
            why = f"'{active}' has nothing in flight"
        elif now >= self._yield_at(active, candidate):
            why = f"'{active}' used its time on the device"
        else:
            return
        logger.info(
            "scheduler: switching %s -> %s (%s; %d waiting)", active, candidate, why, self.queue_depth(candidate)
        )
        self._effects.start_switch(active, candidate)

    def _next_model(self, now: float) -> str | None:
        """The model, other than the active one, that gets the device next (the policy's step 5)."""
        active = self._slots.active_model
        heads = [state.queue[0] for name, state in self._demand.items() if name != active and state.queue]
        if not heads:
            return None
        due = [head for head in heads if now >= self._due_at(active, head)]
        if due:
            return min(due, key=lambda head: head.enqueued_at).model
        return min(heads, key=lambda head: (self._slots.priority(head.model), head.enqueued_at)).model

    def _due_at(self, active: str | None, head: Waiter[T]) -> float:
        """When ``head`` (a model's oldest waiter) is due: its model comes next whatever the priorities."""
        return head.enqueued_at + DUE_SHARE * self._policy.max_wait_s - self.cost_estimate(active, head.model)

    def _yield_at(self, active: str, candidate: str) -> float:
        """When ``active`` gives the device up to ``candidate`` even though it has demand: at the end of its
        quantum, or in time for the bound of any model's oldest waiter."""
        by_quantum = self._active_since + self.quantum(active, candidate)
        # Leave the switch its estimated time, and a tenth of the bound for the estimate to be wrong.
        share = DEADLINE_SHARE * self._policy.max_wait_s
        by_deadline = min(
            state.queue[0].enqueued_at + share - self.cost_estimate(active, name)
            for name, state in self._demand.items()
            if name != active and state.queue
        )
        return min(by_quantum, by_deadline)

    def _idle_until(self, active: str, candidate: str) -> float:
        """When ``active``, with nothing in flight, stops waiting for more requests."""
        cost, bound = self.cost_estimate(active, candidate), self._policy.min_residency_s
        after_activation = self._active_since + min(cost, bound)
        after_last_request = self.last_busy_at(active) + min(max(cost, IDLE_GAP_S), bound)
        return max(after_activation, after_last_request)

    def _expected_wait(self, model: str, now: float) -> float:
        """A guess at when ``model`` would serve, for ``Retry-After``."""
        active = self._slots.active_model
        if active is None or active == model:
            return self.cost_estimate(active, model)
        remaining = max(0.0, self._active_since + self.quantum(active, model) - now)
        return remaining + self.cost_estimate(active, model)

    # -- effects --------------------------------------------------------------------------------------------

    def _per_model(self, model: str) -> _Model[T]:
        return self._demand.setdefault(model, _Model())

    def _admit(self, waiter: Waiter[T], now: float) -> None:
        self._per_model(waiter.model).last_busy_at = now
        self._effects.admit(waiter)  # the device counts it in flight from here

    def _admit_queue(self, model: str, now: float) -> None:
        queue = self._per_model(model).queue
        while queue and not self._at_limit(model, queued_first=False):
            self._admit(queue.popleft(), now)

    def _at_limit(self, model: str, *, queued_first: bool = True) -> bool:
        """Whether a request for ``model`` must wait for one of its requests to end (``queued_first``: or for
        the requests already waiting past the limit, which go first)."""
        limit = self._slots.concurrency_limit(model)
        if limit is None:
            return False
        return self._slots.in_flight(model) >= limit or (queued_first and bool(self.queue_depth(model)))

    def _refuse(self, waiter: Waiter[T], refusal: Refusal, retry_after_s: float) -> None:
        waiter.retry_after_s = max(1, math.ceil(retry_after_s))
        self._effects.refuse(waiter, refusal)

    def _failed(self, model: str, now: float) -> None:
        """A switch to ``model`` failed: manual mode refuses its waiters, auto mode backs off."""
        if not self._policy.auto:
            queue = self._per_model(model).queue
            while queue:
                self._refuse(queue.popleft(), Refusal.SWITCH_FAILED, 1)
            return
        backoff = self._per_model(model).backoff
        backoff.failures += 1
        delay = self._policy.backoff_s(backoff.failures)
        backoff.retry_at = now + delay
        logger.warning(
            "scheduler: '%s' failed to load (%d in a row); not retried for %.0f s", model, backoff.failures, delay
        )
        queue = self._per_model(model).queue
        while queue:
            self._refuse(queue.popleft(), Refusal.LOAD_FAILED, delay)


def _manual_refusal(model: str, switch: SwitchView | None, active: str | None) -> Refusal | None:
    """Manual mode: why a request for ``model`` cannot wait (None: it waits for the switch to it)."""
    if switch is not None:
        return None if model == switch.target else Refusal.SWITCHING_AWAY
    return Refusal.NO_ACTIVE if active is None else Refusal.NOT_ACTIVE
