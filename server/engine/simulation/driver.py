"""The simulation: the real scheduler (``admission/scheduler.py``) and the real residency policy
(``residency/policy.py``) driven on a fake clock by a recorded trace, with a device that takes the measured reload
costs to switch and serves each request for the time its tokens take.

The device here plays the model slots' part for the scheduler (:class:`SlotsView`) and carries out its decisions
(:class:`SchedulerEffects`): a switch first drains the model being left (its requests run to their end, within
``drain_timeout``), then brings the target up by the path it can take (``warm``: it holds an engine; ``in_place``:
the strategy swaps models inside one engine; else ``cold``) at that path's measured cost. Under a strategy that
holds several engines (``keep``), the device makes room for a target without an engine once the drain is over,
before the reload, as the real one does: it evicts what the policy says to fit ``max_active`` and the memory
budget, by the profile's ``switching.eviction`` rule; a resident with requests queued then counts as busy, as the
real device's. Requests are served side by side (an engine batches), each for ``prompt_tokens / prefill_tps +
output_tokens / decode_tps`` seconds. Not simulated: idle unloads, failed loads, the prefix cache.

It imports neither vLLM nor Ray, and runs thousands of requests in well under a second.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

import msgspec

from server.engine.admission import Scheduler
from server.engine.residency import Resident
from server.engine.residency import policy as residency_policy
from server.engine.simulation.figures import Outcome, Tally
from server.engine.simulation.trace import TraceRequest
from server.engine.types import CostBook, Refusal, ReloadPath, SchedulerPolicy, SwitchView, Waiter
from server.profiles import EvictionRule, Switching

__all__ = ["ASSUMED_COSTS", "OfflineOrder", "SimulatedModel", "Simulation", "simulate"]

#: A path's cost where the book has no measurement of the model (seconds): what the docs' own figures suggest for a
#: small model on CPU; give measured costs (``--costs``) for an answer that holds.
ASSUMED_COSTS: Final[Mapping[ReloadPath, float]] = {"cold": 10.0, "in_place": 2.0, "warm": 0.1}
_MAX_EVENTS: Final = 10_000_000

#: An offline eviction rule (``Simulation.offline_order``): ``(now, target, residents)`` to the evictable residents
#: in the order they go.
OfflineOrder = Callable[[float, str, Sequence[Resident]], Sequence[Resident]]


@dataclass(frozen=True, kw_only=True)
class SimulatedModel:
    """One model as the simulation sees it (from the profile and its plan)."""

    footprint_bytes: int = 0
    priority: int = 0
    pinned: bool = False
    max_concurrent_requests: int | None = None


@dataclass(frozen=True, kw_only=True)
class Simulation:
    """What one simulated run needs besides the trace.

    Attributes:
        models: The profile's models, the default (first active) one first.
        switching: The profile's switching section; the simulation runs it in ``auto`` mode.
        holds_several: The strategy keeps several engines resident (``keep``).
        in_place: The strategy swaps models inside one engine (``reconfigure``).
        budget_bytes: The memory budget (None: not budgeted).
        costs: The measured reload costs.
        prefill_tps, decode_tps: One request's prompt and generated tokens per second.
        start: The models holding an engine when the trace begins, the active one first (empty: the first model
            alone, as a server that just started; ``--live`` starts from the server's own).
        offline_order: Benchmarks only, never a profile's option: a rule that orders the residents that may go
            (``(now, target, every other resident)``, the evictable ones in the order they go) in place of the
            profile's, by count (``max_active``) alone: ``benchmarks/residency_policies.py``'s clairvoyant bound.
    """

    models: Mapping[str, SimulatedModel]
    switching: Switching
    holds_several: bool
    in_place: bool = False
    budget_bytes: int | None = None
    costs: CostBook = field(default_factory=CostBook)
    prefill_tps: float = 2000.0
    decode_tps: float = 30.0
    start: tuple[str, ...] = ()
    offline_order: OfflineOrder | None = None

    def with_eviction(self, rule: EvictionRule) -> Simulation:
        """The same run under another eviction rule."""
        return replace(self, switching=msgspec.structs.replace(self.switching, eviction=rule))

    def cost_s(self, model: str, path: ReloadPath) -> float:
        """``model``'s measured cost by ``path``, else :data:`ASSUMED_COSTS`'s."""
        measured = self.costs.seconds(model, path)
        return measured if measured is not None else ASSUMED_COSTS[path]

    def assumed(self) -> list[str]:
        """The models the book has no measurement of (their costs are assumed)."""
        return [name for name in self.models if self.costs.return_s(name) is None]


def simulate(setup: Simulation, trace: Sequence[TraceRequest]) -> Outcome:
    """Run ``trace`` through the scheduler and the residency policy on a fake clock; requests for a model the
    profile lacks are left out."""
    run = _Run(setup, [item for item in trace if item.model in setup.models])
    return run.play()


class _Run:
    """One simulated run: the device (the scheduler's slots view and effects), the clock and the events."""

    def __init__(self, setup: Simulation, trace: Sequence[TraceRequest]) -> None:
        self.setup = setup
        self.trace = trace
        names = list(setup.models)
        self.now = 0.0
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.ticks: set[float] = set()
        start = [name for name in setup.start if name in setup.models] or names[:1]
        self.active: str | None = start[0]
        self.residents: set[str] = set(start)
        self.last_used: dict[str, float] = dict.fromkeys(names, 0.0)
        self.uses: Counter[str] = Counter(dict.fromkeys(start, 1))
        self.leases: Counter[str] = Counter()
        self.ends: dict[str, float] = dict.fromkeys(names, 0.0)
        self.current: SwitchView | None = None
        self.tally = Tally(names)
        self.last_event = 0.0
        auto = msgspec.structs.replace(setup.switching, mode="auto")
        self.scheduler: Scheduler[int] = Scheduler(SchedulerPolicy.from_switching(auto), self, self, setup.costs)
        # The active model came up before the trace, as a server's start-up ends before its traffic comes: it owes
        # no residency when the first request arrives. (The scheduler's clock starts at 0.0, a moment long past on
        # a server's monotonic clock but the first request's time on this one.)
        settled = -setup.switching.max_residency_s
        self.scheduler.switch_ended(SwitchView(None, self.active, settled, True), settled, ok=True)

    # -- the scheduler's view of the device (SlotsView) ---------------------------------------------------------

    @property
    def models(self) -> Collection[str]:
        return self.setup.models.keys()

    @property
    def closed(self) -> bool:
        return False

    @property
    def active_model(self) -> str | None:
        return self.active

    @property
    def switch(self) -> SwitchView | None:
        return self.current

    @property
    def free(self) -> bool:
        return self.current is None

    def in_flight(self, model: str) -> int:
        return self.leases[model]

    def is_warm(self, model: str) -> bool:
        return model in self.residents

    def concurrency_limit(self, model: str) -> int | None:
        return self.setup.models[model].max_concurrent_requests

    def priority(self, model: str) -> int:
        return self.setup.models[model].priority

    # -- the scheduler's effects (SchedulerEffects) -------------------------------------------------------------

    def start_switch(self, source: str | None, target: str) -> None:
        self.current = SwitchView(source, target, self.now, target in self.residents)
        drained = self.now
        if source is not None and self.leases[source]:
            drained = min(self.ends[source], self.now + self.setup.switching.drain_timeout)
        path: ReloadPath = "warm" if target in self.residents else "in_place" if self.setup.in_place else "cold"
        # The device makes room once the drain is over, before it brings the target up (as ``keep`` evicts before
        # it starts an engine): what is busy then, not when the target is up, stays.
        self.at(drained, lambda: self.make_room(source, target))
        self.at(drained + self.setup.cost_s(target, path), self.switch_done)

    def admit(self, waiter: Waiter[int]) -> None:
        request = self.trace[waiter.ticket]
        self.tally.waits[request.model].append(self.now - request.at)
        self.leases[request.model] += 1
        serve_s = request.prompt_tokens / self.setup.prefill_tps + request.output_tokens / self.setup.decode_tps
        end = self.now + serve_s
        self.ends[request.model] = max(self.ends[request.model], end)
        self.at(end, lambda: self.finished(request.model))

    def refuse(self, waiter: Waiter[int], refusal: Refusal) -> None:
        self.tally.refused[waiter.model] += 1

    # -- events --------------------------------------------------------------------------------------------------

    def play(self) -> Outcome:
        for ticket, request in enumerate(self.trace):
            self.at(request.at, functools.partial(self.arrive, ticket, request.model))
        for _ in range(_MAX_EVENTS):
            if not self.events:
                break
            when, _, action = heapq.heappop(self.events)
            self.advance_to(when)
            action()
            self.follow_wakeup()
        return self.tally.outcome(self.last_event)

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (max(when, self.now), next(self.seq), action))

    def advance_to(self, when: float) -> None:
        span = when - self.now
        if span > 0:
            serving = [name for name, count in self.leases.items() if count]
            for name in serving:
                self.tally.serving_s[name] += span
            if serving:
                self.tally.any_serving_s += span
        self.now = max(self.now, when)
        self.last_event = self.now

    def follow_wakeup(self) -> None:
        wake = self.scheduler.next_wakeup()
        if wake is not None and wake not in self.ticks:
            self.ticks.add(wake)
            self.at(wake, lambda: self.tick(wake))

    def tick(self, wake: float) -> None:
        self.ticks.discard(wake)
        self.scheduler.tick(self.now)

    def arrive(self, ticket: int, model: str) -> None:
        self.tally.requests[model] += 1
        self.scheduler.submit(model, ticket, self.now)

    def finished(self, model: str) -> None:
        self.leases[model] -= 1
        self.last_used[model] = self.now
        self.scheduler.finished(model, self.now)

    def switch_done(self) -> None:
        ended = self.current
        assert ended is not None
        target = ended.target
        self.tally.switches[target] += 1
        self.tally.switch_s[target] += self.now - ended.started_at
        self.residents = self.residents | {target} if self.setup.holds_several else {target}
        self.active, self.current = target, None
        self.last_used[target] = self.now
        self.uses[target] += 1
        self.scheduler.switch_ended(ended, self.now, ok=True)

    def make_room(self, source: str | None, target: str) -> None:
        """The drain is over: what the policy evicts for ``target`` goes (one engine: its model goes as the target
        comes, at the switch's end)."""
        if source is not None:
            self.last_used[source] = self.now
        if self.setup.holds_several and target not in self.residents:
            others = [self.resident(name, source) for name in self.residents if name != target]
            setup = self.setup
            if setup.offline_order is not None:
                cap = setup.switching.max_active
                over = len(others) + 1 - cap if cap is not None else 0
                order = setup.offline_order(self.now, target, others) if over > 0 else []
                self.residents -= {item.name for item in order[:over]}
                return
            decision = residency_policy.evictions_to_fit(
                target,
                setup.models[target].footprint_bytes,
                others,
                budget_bytes=setup.budget_bytes if setup.budget_bytes is not None else 2**62,
                max_active=setup.switching.max_active,
                rule=setup.switching.eviction,
                now=self.now,
            )
            self.residents -= set(decision.evict)

    def resident(self, name: str, source: str | None) -> Resident:
        model = self.setup.models[name]
        return Resident(
            name=name,
            last_used=self.last_used[name],
            footprint_bytes=model.footprint_bytes,
            pinned=model.pinned,
            busy=bool(self.leases[name]) or self.scheduler.queue_depth(name) > 0,
            return_s=self.setup.cost_s(name, "in_place" if self.setup.in_place else "cold"),
            uses=self.uses[name],
            priority=model.priority,
        )
