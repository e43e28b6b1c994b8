"""Auto mode's scheduler against FIFO swapping, in a discrete-event simulation at measured switch costs.

    .venv/bin/python benchmarks/auto_scheduler.py [--requests 1000] [--json out.json]

The real :class:`server.engine.admission.scheduler.Scheduler` runs against a simulated device and clock: requests take
``--service-s`` each, up to ``--capacity`` at once (vLLM's batch), and a switch first drains the model it leaves,
then costs the strategy's measured time (``keep`` 3 ms, ``reconfigure`` 0.9 s, ``stop`` 17 s on the CPU machine;
override with ``--cost stop=20``). FIFO is the swapping of llama-swap and Ollama (and of Turnout's auto mode
before the scheduler): requests in arrival order, and a switch whenever the head of the queue wants another model.

Traffic is interleaved: each request asks for a random model, from 16 closed-loop clients (the live test's
workload) or from a Poisson stream (``--rate`` requests/s). The table gives, per policy: switches per 1,000
requests, the device's serving share (time with a request running / time to the last answer), throughput
(answers/s), p50/p99/max admission wait, and refusals; then the ratios of scheduler to FIFO.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from server.engine.admission.scheduler import Scheduler
from server.engine.types.scheduling import Refusal, SchedulerEffects, SchedulerPolicy, SwitchView, Waiter
from server.profiles.schema import Switching

COSTS = {"keep": 0.003, "reconfigure": 0.9, "stop": 17.0}


class Policy(Protocol):
    """What the simulator needs of a policy: :class:`Scheduler`'s event methods."""

    def submit(self, model: str, ticket: int, now: float) -> Waiter[int]: ...
    def finished(self, model: str, now: float) -> None: ...
    def tick(self, now: float) -> None: ...
    def next_wakeup(self) -> float | None: ...
    def switch_ended(self, ended: SwitchView, now: float, *, ok: bool) -> None: ...


class FifoPolicy:
    """FIFO swapping: one queue in arrival order; the head's model gets the device, switching as often as needed."""

    def __init__(self, effects: SchedulerEffects[int]) -> None:
        self._effects = effects
        self._queue: deque[Waiter[int]] = deque()
        self._active: str | None = "m0"  # the simulation starts with the first model active
        self._switching = False

    def submit(self, model: str, ticket: int, now: float) -> Waiter[int]:
        waiter = Waiter(model=model, enqueued_at=now, ticket=ticket)
        self._queue.append(waiter)
        self._pump()
        return waiter

    def finished(self, model: str, now: float) -> None:
        self._pump()

    def tick(self, now: float) -> None:
        self._pump()

    def next_wakeup(self) -> float | None:
        return None

    def switch_ended(self, ended: SwitchView, now: float, *, ok: bool) -> None:
        self._switching, self._active = False, ended.target
        self._pump()

    def _pump(self) -> None:
        if self._switching:
            return
        while self._queue and self._queue[0].model == self._active:
            self._effects.admit(self._queue.popleft())
        if self._queue:
            self._switching = True
            self._effects.start_switch(self._active, self._queue[0].model)


class Result(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One run's figures."""

    policy: str
    strategy: str
    models: int
    traffic: str
    requests: int
    answered: int
    refused: int
    switches: int
    switches_per_1000: float
    serving_share: float
    throughput_rps: float
    wait_p50_s: float
    wait_p99_s: float
    wait_max_s: float
    makespan_s: float


@dataclass
class Simulation:
    """A device, a clock and the traffic, driving one policy through its effects."""

    models: Sequence[str]
    switch_cost_s: float
    service_s: float
    capacity: int
    requests: int
    rng: random.Random
    clients: int | None
    rate: float
    make_policy: Callable[[Simulation], Policy]
    now: float = 0.0
    events: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    seq: itertools.count[int] = field(default_factory=itertools.count)
    issued: int = 0
    answered: int = 0
    refused: int = 0
    switches: int = 0
    waits: list[float] = field(default_factory=list)
    running: int = 0
    busy_s: float = 0.0
    busy_since: float = 0.0
    leases: Counter[str] = field(default_factory=Counter)
    device_queue: deque[tuple[str, int]] = field(default_factory=deque)
    on_done: dict[int, Callable[[], None] | None] = field(default_factory=dict)
    draining: tuple[str | None, str] | None = None
    active: str | None = None
    switch: SwitchView | None = None
    last_answer: float = 0.0
    wake_at: float | None = None

    def __post_init__(self) -> None:
        self.active = self.models[0]
        self.policy = self.make_policy(self)

    # -- the device's state, as the scheduler reads it (server.engine.types.SlotsView) ------------------------

    @property
    def active_model(self) -> str | None:
        return self.active

    @property
    def free(self) -> bool:
        return self.switch is None

    @property
    def closed(self) -> bool:
        return False

    def in_flight(self, model: str) -> int:
        return self.leases[model]

    def is_warm(self, model: str) -> bool:
        return True  # one cost per strategy: warm and cold switches are not told apart here

    def concurrency_limit(self, model: str) -> int | None:
        return None  # the simulated device's ``capacity`` bounds what runs at once, for every model together

    def priority(self, model: str) -> int:
        return 0

    # -- the event loop -------------------------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.seq), action))

    def run(self) -> None:
        if self.clients:
            for _ in range(self.clients):
                self.at(0.0, self._client_request)
        else:
            self.at(0.0, self._open_arrival)
        while self.events:
            when, _, action = heapq.heappop(self.events)
            self.now = max(self.now, when)
            action()
            wake = self.policy.next_wakeup()
            if wake is not None and wake != self.wake_at:
                self.wake_at = wake
                self.at(max(wake, self.now), lambda: self.policy.tick(self.now))

    # -- traffic --------------------------------------------------------------------------------------------

    def _request(self, on_done: Callable[[], None] | None) -> None:
        ticket = self.issued
        self.issued += 1
        self.on_done[ticket] = on_done
        self.policy.submit(self.rng.choice(self.models), ticket, self.now)

    def _client_request(self) -> None:
        if self.issued < self.requests:
            self._request(self._client_request)

    def _open_arrival(self) -> None:
        self._request(None)
        if self.issued < self.requests:
            self.at(self.now + self.rng.expovariate(self.rate), self._open_arrival)

    def _end(self, ticket: int) -> None:
        callback = self.on_done.pop(ticket)
        if callback is not None:
            self.at(self.now, callback)  # never re-enter the policy from an effect

    # -- effects (called by the policy) -----------------------------------------------------------------------

    def start_switch(self, source: str | None, target: str) -> None:
        self.switches += 1
        self.switch = SwitchView(source, target, self.now, warm=True)
        self.draining = (source, target)
        self._switch_when_drained()

    def admit(self, waiter: Waiter[int]) -> None:
        self.waits.append(self.now - waiter.enqueued_at)
        self.leases[waiter.model] += 1
        self.device_queue.append((waiter.model, waiter.ticket))
        self.at(self.now, self._start_service)

    def refuse(self, waiter: Waiter[int], refusal: Refusal) -> None:
        self.refused += 1
        self._end(waiter.ticket)

    # -- the device -----------------------------------------------------------------------------------------

    def _start_service(self) -> None:
        while self.running < self.capacity and self.device_queue:
            model, ticket = self.device_queue.popleft()
            if self.running == 0:
                self.busy_since = self.now
            self.running += 1
            duration = self.service_s * self.rng.uniform(0.5, 1.5)
            self.at(self.now + duration, lambda model=model, ticket=ticket: self._served(model, ticket))  # type: ignore[misc]

    def _served(self, model: str, ticket: int) -> None:
        self.running -= 1
        if self.running == 0:
            self.busy_s += self.now - self.busy_since
        self.leases[model] -= 1
        self.answered += 1
        self.last_answer = self.now
        self.policy.finished(model, self.now)
        self._start_service()
        self._end(ticket)
        self._switch_when_drained()

    def _switch_when_drained(self) -> None:
        if self.draining is None:
            return
        source, target = self.draining
        if source is not None and self.leases[source] > 0:
            return
        self.draining = None
        cost = self.switch_cost_s * self.rng.uniform(0.9, 1.1)
        self.at(self.now + cost, lambda: self._switched(target))

    def _switched(self, target: str) -> None:
        ended, self.switch = self.switch, None
        assert ended is not None and ended.target == target
        self.active = target
        self.policy.switch_ended(ended, self.now, ok=True)

    def result(self, policy: str, strategy: str, traffic: str) -> Result:
        waits = sorted(self.waits) or [0.0]
        makespan = max(self.last_answer, 1e-9)
        return Result(
            policy=policy,
            strategy=strategy,
            models=len(self.models),
            traffic=traffic,
            requests=self.issued,
            answered=self.answered,
            refused=self.refused,
            switches=self.switches,
            switches_per_1000=round(1000 * self.switches / self.issued, 1),
            serving_share=round(self.busy_s / makespan, 3),
            throughput_rps=round(self.answered / makespan, 3),
            wait_p50_s=round(statistics.median(waits), 3),
            wait_p99_s=round(waits[min(len(waits) - 1, int(0.99 * len(waits)))], 3),
            wait_max_s=round(waits[-1], 3),
            makespan_s=round(makespan, 1),
        )


class Workload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The traffic and the device, the same for every policy and strategy; the defaults are the command line's.

    Attributes:
        requests: Requests per run.
        clients: Closed-loop clients (the live test's 16).
        rate: Poisson arrivals per second.
        service_s: Mean seconds one request runs.
        capacity: Requests the device runs at once.
        seed: The random seed (the same request stream for FIFO and the scheduler).
    """

    requests: int = 1000
    clients: int = 16
    rate: float = 4.0
    service_s: float = 0.5
    capacity: int = 8
    seed: int = 7


class Comparison(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The scheduler against FIFO on one traffic, strategy and number of models."""

    traffic: str
    strategy: str
    models: int
    fewer_switches: float
    throughput: float
    max_wait_within_bound: bool


class Report(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``--json`` writes: the parameters every run shared, each run, and the comparisons."""

    workload: Workload
    traffic: str
    costs: dict[str, float]
    switching: Switching
    results: list[Result]
    comparisons: list[Comparison]


def simulate(
    policy: str,
    strategy: str,
    cost_s: float,
    n_models: int,
    traffic: str,
    load: Workload,
    scheduler_policy: SchedulerPolicy,
) -> Result:
    """One run; the same seed gives FIFO and the scheduler the same request stream."""
    models = [f"m{i}" for i in range(n_models)]

    def make(device: Simulation) -> Policy:
        if policy == "fifo":
            return FifoPolicy(device)
        return Scheduler(scheduler_policy, device, device)

    sim = Simulation(
        models=models,
        switch_cost_s=cost_s,
        service_s=load.service_s,
        capacity=load.capacity,
        requests=load.requests,
        rng=random.Random(load.seed),
        clients=load.clients if traffic == "closed" else None,
        rate=load.rate,
        make_policy=make,
    )
    sim.run()
    label = f"{load.clients} clients" if traffic == "closed" else f"poisson {load.rate:g}/s"
    return sim.result(policy, strategy, label)


def _table(results: list[Result], comparisons: list[Comparison]) -> str:
    head = (
        f"{'traffic':<14}{'strategy':<12}{'models':>6}  {'policy':<10}{'sw/1k':>8}{'serving':>9}{'req/s':>9}"
        f"{'p50 s':>10}{'p99 s':>10}{'max s':>10}{'refused':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r.traffic:<14}{r.strategy:<12}{r.models:>6}  {r.policy:<10}{r.switches_per_1000:>8.1f}"
            f"{r.serving_share:>9.1%}{r.throughput_rps:>9.2f}{r.wait_p50_s:>10.2f}{r.wait_p99_s:>10.2f}"
            f"{r.wait_max_s:>10.1f}{r.refused:>8}"
        )
    lines.append("")
    lines.append(f"{'traffic':<14}{'strategy':<12}{'models':>6}  {'fewer switches':>15}{'throughput':>12}")
    for c in comparisons:
        lines.append(f"{c.traffic:<14}{c.strategy:<12}{c.models:>6}  {c.fewer_switches:>14.1f}x{c.throughput:>11.1f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every strategy x {2, 3} models x {FIFO, scheduler}; print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    given = Workload()  # the defaults, stated once on Workload
    parser.add_argument("--requests", type=int, default=given.requests, help="requests per run")
    parser.add_argument("--clients", type=int, default=given.clients, help="closed-loop clients (the live test's 16)")
    parser.add_argument("--rate", type=float, default=given.rate, help="Poisson arrivals per second")
    parser.add_argument(
        "--traffic", choices=["closed", "poisson", "both"], default="both", help="closed-loop clients, Poisson, or both"
    )
    parser.add_argument("--service-s", type=float, default=given.service_s, help="mean seconds one request runs")
    parser.add_argument("--capacity", type=int, default=given.capacity, help="requests the device runs at once")
    parser.add_argument("--cost", action="append", default=[], metavar="STRATEGY=SECONDS", help="switch cost")
    parser.add_argument("--seed", type=int, default=given.seed)
    defaults = Switching()  # the profile's defaults, stated once in server/profiles/schema.py
    parser.add_argument("--min-residency-s", type=float, default=defaults.min_residency_s)
    parser.add_argument("--max-residency-s", type=float, default=defaults.max_residency_s)
    parser.add_argument("--max-wait-s", type=float, default=defaults.max_wait_s)
    parser.add_argument("--max-queue", type=int, default=defaults.max_queue)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    costs = dict(COSTS)
    for item in args.cost:
        name, _, seconds = item.partition("=")
        costs[name] = float(seconds)
    switching = Switching(
        mode="auto",
        min_residency_s=args.min_residency_s,
        max_residency_s=args.max_residency_s,
        max_wait_s=args.max_wait_s,
        max_queue=args.max_queue,
    )
    scheduler_policy = SchedulerPolicy.from_switching(switching)
    results: list[Result] = []
    comparisons: list[Comparison] = []
    load = Workload(
        requests=args.requests,
        clients=args.clients,
        rate=args.rate,
        service_s=args.service_s,
        capacity=args.capacity,
        seed=args.seed,
    )
    traffics = ["closed", "poisson"] if args.traffic == "both" else [args.traffic]
    for traffic, (strategy, cost), n_models in itertools.product(traffics, costs.items(), (2, 3)):
        fifo = simulate("fifo", strategy, cost, n_models, traffic, load, scheduler_policy)
        ours = simulate("scheduler", strategy, cost, n_models, traffic, load, scheduler_policy)
        results += [fifo, ours]
        comparisons.append(
            Comparison(
                traffic=fifo.traffic,
                strategy=strategy,
                models=n_models,
                fewer_switches=round(fifo.switches / max(ours.switches, 1), 2),
                throughput=round(ours.throughput_rps / max(fifo.throughput_rps, 1e-9), 2),
                max_wait_within_bound=ours.wait_max_s <= args.max_wait_s,
            )
        )
    print(_table(results, comparisons))
    if args.json is not None:
        report = Report(
            workload=load,
            traffic=args.traffic,
            costs=costs,
            switching=switching,
            results=results,
            comparisons=comparisons,
        )
        args.json.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
