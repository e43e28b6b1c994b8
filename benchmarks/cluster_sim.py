"""Replicas x models at scale: Ray Serve's multiplexed routing against random routing, and one replica per model.

    .venv/bin/python -m benchmarks.cluster_sim [--requests 2000] [--replicas 2,4,8,16] [--models 2,4,8,16,32]

A discrete-event simulation of R replicas (each one accelerator set running Turnout) serving M models under
Poisson traffic with Zipf popularity. A replica holds up to ``--capacities`` models (an LRU, Ray's
``max_num_models_per_replica``), serves one of them at a time, up to ``--batch`` requests at once, and switches as
Turnout's auto mode does: it drains its active model once that has nothing queued (or once another model's request
has waited ``--max-residency-s``), then activates the model of its oldest waiting request, in ``--activate-s`` if it
holds it, else in ``--load-s`` (each value a grid layer; evicting its least recently used model). That replica
policy is auto mode's in outline only (``benchmarks/auto_scheduler.py`` runs the real Scheduler against one device,
with its cost-scaled residency): the question here is routing, and a rule this small keeps the default grid's
200 runs under a minute. Policies:

* ``affinity``: Ray's multiplexing rule: a replica holding the model (or with requests for it queued) and under
  ``--max-ongoing`` requests, the least loaded of them; else the replica with the fewest models.
* ``random``: any replica, uniformly (a load balancer that knows nothing of models).
* ``dedicated``: one replica per model (R >= M only): model ``i`` on the replicas ``j`` with ``j % M == i``, the
  least loaded of them; no replica ever switches.

Per cell and policy: switches and loads per 1,000 requests, p50/p99 latency (arrival to answer), and the device
shares (serving, switching). The last line says where one replica per model beats affinity swapping (lower p99).
"""

from __future__ import annotations

import argparse
import functools
import heapq
import itertools
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from benchmarks.result_types import ClusterCell, ClusterSimOptions, ClusterSimulation
from benchmarks.results import write_result

__all__ = ["POLICIES", "Replica", "Request", "main", "page_section", "route_affinity", "run_cell", "traffic"]

POLICIES = ("affinity", "random", "dedicated")


@dataclass(frozen=True)
class Request:
    """One request of the stream: when it arrives, for which model, and how long it runs once admitted."""

    index: int
    arrival: float
    model: str
    service_s: float


@dataclass
class Replica:
    """One replica's device: the models it holds (LRU, most recent last), its queue, and its accounting."""

    index: int
    capacity: int
    held: OrderedDict[str, None] = field(default_factory=OrderedDict)
    active: str | None = None
    switching_to: str | None = None
    draining: bool = False
    queue: list[Request] = field(default_factory=list)
    running: int = 0
    switches: int = 0
    loads: int = 0
    busy_s: float = 0.0
    switching_s: float = 0.0
    _busy_since: float = 0.0

    @property
    def ongoing(self) -> int:
        """Requests routed here and not answered (what Ray's router counts against ``max_ongoing_requests``)."""
        return self.running + len(self.queue)

    def models(self) -> set[str]:
        """The models Ray's router sees here: the ones held, the one loading, and the ones queued for."""
        seen = set(self.held) | {r.model for r in self.queue}
        return seen | ({self.switching_to} if self.switching_to else set())

    def set_running(self, running: int, now: float) -> None:
        """Change the running count, accounting serving time (time with at least one request running)."""
        if self.running > 0:
            self.busy_s += now - self._busy_since
        self.running, self._busy_since = running, now

    def begin_switch(self, target: str, load_s: float, activate_s: float) -> float:
        """Start activating ``target``; returns its cost (a load, evicting the least recently used, or not)."""
        self.switches += 1
        cost = activate_s if target in self.held else load_s
        if target not in self.held:
            self.loads += 1
            while len(self.held) >= self.capacity:
                self.held.popitem(last=False)
        self.held[target] = None
        self.held.move_to_end(target)
        self.switching_to, self.draining = target, False
        self.switching_s += cost
        return cost


def route_affinity(replicas: Sequence[Replica], model: str, max_ongoing: int) -> Replica:
    """Ray Serve's multiplexed routing: of the replicas under ``max_ongoing`` (all of them when none is), one with
    the model (the least loaded), else the one with the fewest models (then the least loaded, then the first)."""
    room = [r for r in replicas if r.ongoing < max_ongoing] or list(replicas)  # Ray never fills a replica past it
    holding = [r for r in room if model in r.models()]
    if holding:
        return min(holding, key=lambda r: (r.ongoing, r.index))
    return min(room, key=lambda r: (len(r.models()), r.ongoing, r.index))


def traffic(options: ClusterSimOptions, replicas: int, models: int) -> list[Request]:
    """The cell's Poisson stream with Zipf popularity; the seed makes every policy of a cell see the same one."""
    rng = random.Random(f"{options.seed}-{replicas}-{models}")
    rate = options.utilization * replicas * options.batch / options.service_s
    names = [f"m{i}" for i in range(models)]
    weights = [1 / (i + 1) ** options.zipf for i in range(models)]
    now, stream = 0.0, []
    for index in range(options.requests):
        now += rng.expovariate(rate)
        model = rng.choices(names, weights)[0]
        stream.append(Request(index, now, model, rng.expovariate(1 / options.service_s)))
    return stream


@dataclass
class Cluster:
    """The replicas, the clock and the events, driving one routing policy over one stream."""

    options: ClusterSimOptions
    load_s: float
    replicas: list[Replica]
    route: Callable[[Request], Replica]
    now: float = 0.0
    events: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    last_answer: float = 0.0
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self._seq), action))

    def run(self, stream: Sequence[Request]) -> float:
        """Serve every request of ``stream``; returns the time of the last answer (not of the last timer)."""
        for request in stream:
            self.at(request.arrival, functools.partial(self._arrive, request))
        while self.events:
            self.now, _, action = heapq.heappop(self.events)
            action()
        return self.last_answer

    def _arrive(self, request: Request) -> None:
        replica = self.route(request)
        replica.queue.append(request)
        self.at(request.arrival + self.options.max_residency_s, lambda: self._pump(replica))
        self._pump(replica)

    def _pump(self, replica: Replica) -> None:
        if replica.switching_to is not None:
            return
        if not replica.draining:
            for request in [r for r in replica.queue if r.model == replica.active]:
                if replica.running >= self.options.batch:
                    break
                replica.queue.remove(request)
                replica.set_running(replica.running + 1, self.now)
                self.at(self.now + request.service_s, functools.partial(self._finish, replica, request))
        others = [r for r in replica.queue if r.model != replica.active]
        if not others:
            return
        active_waits = any(r.model == replica.active for r in replica.queue)
        if not active_waits or self.now - others[0].arrival >= self.options.max_residency_s:
            replica.draining = True
        if replica.draining and replica.running == 0:
            target = others[0].model
            cost = replica.begin_switch(target, self.load_s, self.options.activate_s)
            self.at(self.now + cost, lambda: self._switched(replica))

    def _switched(self, replica: Replica) -> None:
        replica.active, replica.switching_to = replica.switching_to, None
        self._pump(replica)

    def _finish(self, replica: Replica, request: Request) -> None:
        replica.set_running(replica.running - 1, self.now)
        self.latencies.append(self.now - request.arrival)
        self.last_answer = self.now
        self._pump(replica)


def _router(
    policy: str, replicas: list[Replica], models: int, options: ClusterSimOptions
) -> Callable[[Request], Replica]:
    if policy == "affinity":
        return lambda request: route_affinity(replicas, request.model, options.max_ongoing)
    if policy == "random":
        rng = random.Random(options.seed)
        return lambda request: rng.choice(replicas)
    if policy == "dedicated":
        owners = {f"m{i}": [r for r in replicas if r.index % models == i] for i in range(models)}
        return lambda request: min(owners[request.model], key=lambda r: (r.ongoing, r.index))
    raise ValueError(f"unknown policy {policy!r}")


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def run_cell(
    policy: str,
    n_replicas: int,
    n_models: int,
    capacity: int,
    load_s: float,
    options: ClusterSimOptions,
    stream: Sequence[Request] | None = None,
) -> ClusterCell:
    """One policy on one (replicas, models, capacity, load cost) cell; ``stream`` defaults to the cell's traffic."""
    if policy == "dedicated" and n_replicas < n_models:
        raise ValueError("one replica per model needs at least as many replicas as models")
    stream = traffic(options, n_replicas, n_models) if stream is None else stream
    replicas = [Replica(index, capacity) for index in range(n_replicas)]
    cluster = Cluster(options, load_s, replicas, _router(policy, replicas, n_models, options))
    makespan = cluster.run(stream)
    device_s = max(makespan, 1e-9) * n_replicas
    per_1000 = 1000 / max(len(stream), 1)
    return ClusterCell(
        replicas=n_replicas,
        models=n_models,
        capacity=capacity,
        load_s=load_s,
        policy=policy,
        requests=len(cluster.latencies),
        switches_per_1000=round(sum(r.switches for r in replicas) * per_1000, 2),
        loads_per_1000=round(sum(r.loads for r in replicas) * per_1000, 2),
        latency_p50_s=round(_quantile(cluster.latencies, 0.5), 3),
        latency_p99_s=round(_quantile(cluster.latencies, 0.99), 3),
        busy_share=round(sum(r.busy_s for r in replicas) / device_s, 4),
        switching_share=round(sum(r.switching_s for r in replicas) / device_s, 4),
    )


def simulate(options: ClusterSimOptions) -> ClusterSimulation:
    """Every cell of the grid under every policy that applies to it."""
    cells: list[ClusterCell] = []
    wins: list[str] = []
    grid = itertools.product(options.load_s, options.capacities, options.replicas, options.models)
    for load_s, capacity, n_replicas, n_models in grid:
        stream = traffic(options, n_replicas, n_models)
        by_policy = {
            policy: run_cell(policy, n_replicas, n_models, capacity, load_s, options, stream)
            for policy in POLICIES
            if policy != "dedicated" or n_replicas >= n_models
        }
        cells += by_policy.values()
        dedicated = by_policy.get("dedicated")
        if dedicated is not None and dedicated.latency_p99_s < by_policy["affinity"].latency_p99_s:
            wins.append(f"load {load_s:g} s C={capacity} R={n_replicas} M={n_models}")
    return ClusterSimulation(options=options, cells=cells, dedicated_wins=wins, conclusion=_conclusion(cells, wins))


def _conclusion(cells: Sequence[ClusterCell], wins: Sequence[str]) -> str:
    loads = {(c.load_s, c.capacity, c.replicas, c.models, c.policy): c.loads_per_1000 for c in cells}
    pairs = [(a, loads[(*key[:4], "random")]) for key, a in loads.items() if key[4] == "affinity"]
    fewer = sum(r for _, r in pairs) / max(sum(a for a, _ in pairs), 1e-9)
    parts = []
    for load_s in sorted({c.load_s for c in cells}, reverse=True):
        eligible = sum(1 for c in cells if c.policy == "dedicated" and c.load_s == load_s)
        won = [w.removeprefix(f"load {load_s:g} s ") for w in wins if w.startswith(f"load {load_s:g} s ")]
        parts.append(
            f"with {load_s:g} s loads, one replica per model has the lower p99 in {len(won)} of the {eligible} "
            f"cells where it is possible (R >= M){': ' + ', '.join(won) if won else ''}"
        )
    said = "; ".join(parts)
    lost = len(wins) < sum(1 for c in cells if c.policy == "dedicated")
    why = (
        " Where it loses, the hottest model outgrows its one replica while swapping replicas share it." if lost else ""
    )
    return (
        f"{said[:1].upper()}{said[1:]}.{why} Where R < M every replica must swap; over the grid, random routing "
        f"loads {fewer:.2f}x as many models as affinity routing."
    )


def table(result: ClusterSimulation) -> list[str]:
    """The grid as a Markdown table (printed and on the docs page)."""
    header = ["load s", "C", "R", "M", "policy", "switches/1k", "loads/1k", "p50 s", "p99 s", "serving", "switching"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for c in result.cells:
        row = [
            f"{c.load_s:g}",
            c.capacity,
            c.replicas,
            c.models,
            c.policy,
            f"{c.switches_per_1000:.1f}",
            f"{c.loads_per_1000:.1f}",
        ]
        row += [f"{c.latency_p50_s:.1f}", f"{c.latency_p99_s:.1f}", f"{c.busy_share:.0%}", f"{c.switching_share:.0%}"]
        lines.append("| " + " | ".join(map(str, row)) + " |")
    return lines


def page_section(result: ClusterSimulation | None) -> list[str]:
    """The docs page's section (``benchmarks/docs_page.py``)."""
    lines = ["## Replicas x models: multiplexed (affinity) routing against random routing", ""]
    if result is None:
        return [*lines, "**Not measured** in this run (`python -m benchmarks.cluster_sim`).", ""]
    o = result.options
    held, costs = "/".join(map(str, o.capacities)), "/".join(f"{cost:g}" for cost in o.load_s)
    lines += [
        f"Simulated (`benchmarks/cluster_sim.py`): {o.requests} Poisson requests per cell at {o.utilization:.0%} "
        f"offered load per replica, Zipf({o.zipf:g}) model popularity, {o.service_s:g} s mean service, batch "
        f"{o.batch}, C = {held} models held per replica (LRU), a load {costs} s, an activation "
        f"{o.activate_s:g} s, spill past {o.max_ongoing} ongoing requests.",
        "",
        *table(result),
        "",
        f"**{result.conclusion}**",
        "",
    ]
    return lines


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(","))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid, print the table, write ``benchmarks/results/cluster_simulation.json``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    given = ClusterSimOptions()  # the defaults, stated once on the Struct
    parser.add_argument("--replicas", type=_ints, default=given.replicas, help="comma-separated replica counts")
    parser.add_argument("--models", type=_ints, default=given.models, help="comma-separated model counts")
    parser.add_argument("--capacities", type=_ints, default=given.capacities, help="models held per replica")
    parser.add_argument("--load-s", type=_floats, default=given.load_s, help="comma-separated load seconds")
    for name in ("requests", "utilization", "service_s", "batch", "activate_s", "zipf"):
        default = getattr(given, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument("--max-ongoing", type=int, default=given.max_ongoing)
    parser.add_argument("--max-residency-s", type=float, default=given.max_residency_s)
    parser.add_argument("--seed", type=int, default=given.seed)
    parser.add_argument("--no-write", action="store_true", help="print only; write no result file")
    args = vars(parser.parse_args(argv))
    write = not args.pop("no_write")
    result = simulate(ClusterSimOptions(**args))
    print("\n".join(table(result)))
    print(result.conclusion)
    if write:
        print(f"wrote {write_result('cluster_simulation', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
