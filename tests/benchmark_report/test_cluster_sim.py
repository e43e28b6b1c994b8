"""The cluster simulation: Ray's multiplexed routing rule, and the counting on hand-built streams."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest

from benchmarks import auto_scheduler, cluster_sim
from benchmarks.cluster_sim import Replica, Request, route_affinity, run_cell
from benchmarks.result_types import ClusterSimOptions, ClusterSimulation

#: Service 1 s, load 10 s, activation 1 s: every figure below is computed by hand from these.
OPTIONS = ClusterSimOptions(requests=0, activate_s=1.0, batch=2, max_ongoing=3, max_residency_s=1000)
LOAD_S = 10.0


def _replica(index: int, held: Sequence[str], queued: Sequence[str] = ()) -> Replica:
    replica = Replica(index, capacity=3)
    for model in held:
        replica.held[model] = None
    replica.queue = [Request(i, 0.0, model, 1.0) for i, model in enumerate(queued)]
    return replica


def test_affinity_prefers_a_replica_holding_the_model_else_the_one_with_the_fewest_models() -> None:
    replicas = [_replica(0, ["a"]), _replica(1, ["b", "c"]), _replica(2, ["d"], queued=["d"])]
    assert route_affinity(replicas, "b", max_ongoing=3).index == 1
    # Not held anywhere: the fewest models wins (0 and 2 hold one each; 0 has fewer ongoing requests).
    assert route_affinity(replicas, "x", max_ongoing=3).index == 0
    # A model only queued for counts as there (Ray's router knows the replica it sent the model to).
    assert route_affinity([_replica(0, []), _replica(1, ["a"], queued=["e"])], "e", 3).index == 1
    # Two hold it: the less loaded one.
    both = [_replica(0, ["a"], queued=["a", "a"]), _replica(1, ["a"], queued=["a"])]
    assert route_affinity(both, "a", max_ongoing=3).index == 1
    # Spill: the only holder is at max_ongoing, so the fewest-models rule picks another replica.
    full = [_replica(0, ["a"], queued=["a", "a", "a"]), _replica(1, ["b", "c"])]
    assert route_affinity(full, "a", max_ongoing=3).index == 1


def _stream(*arrivals: tuple[float, str]) -> list[Request]:
    return [Request(i, at, model, 1.0) for i, (at, model) in enumerate(arrivals)]


def test_one_replica_counts_loads_switches_latency_and_device_shares() -> None:
    stream = _stream((0, "a"), (20, "b"), (40, "a"), (60, "b"))
    lru1 = run_cell("random", 1, 2, 1, LOAD_S, OPTIONS, stream)
    # Capacity 1: every request loads its model (10 s) then runs 1 s.
    assert (lru1.switches_per_1000, lru1.loads_per_1000) == (1000.0, 1000.0)
    assert (lru1.latency_p50_s, lru1.latency_p99_s) == (11.0, 11.0)
    # The last answer at 71 s: 4 s serving, 40 s switching.
    assert (lru1.busy_share, lru1.switching_share) == (round(4 / 71, 4), round(40 / 71, 4))
    lru2 = run_cell("random", 1, 2, 2, LOAD_S, OPTIONS, stream)
    # Capacity 2: two loads, then two activations of a held model (1 s each), the last answer at 62 s.
    assert (lru2.switches_per_1000, lru2.loads_per_1000) == (1000.0, 500.0)
    assert (lru2.latency_p50_s, lru2.latency_p99_s) == (11.0, 11.0)  # nearest rank: [2, 2, 11, 11]
    assert (lru2.busy_share, lru2.switching_share) == (round(4 / 62, 4), round(22 / 62, 4))


def test_a_replica_serves_its_active_model_first_and_batches() -> None:
    # a at 0 (load to 10, runs to 11); b at 1 waits; a at 2 joins a's batch at 10: one switch to b after both a's.
    stream = _stream((0, "a"), (1, "b"), (2, "a"))
    cell = run_cell("random", 1, 2, 1, LOAD_S, OPTIONS, stream)
    assert cell.switches_per_1000 == round(2 * 1000 / 3, 2)
    # a: 11 - 0, a: 11 - 2, b: loads 11..21, runs to 22, arrived at 1.
    assert (cell.latency_p50_s, cell.latency_p99_s) == (11.0, 21.0)


def test_affinity_settles_two_models_on_two_replicas_and_random_does_not() -> None:
    stream = _stream(*[(5.0 * i, f"m{i % 2}") for i in range(40)])
    affinity = run_cell("affinity", 2, 2, 1, LOAD_S, OPTIONS, stream)
    assert affinity.loads_per_1000 == 2 * 1000 / 40  # one load per replica, ever
    dedicated = run_cell("dedicated", 2, 2, 1, LOAD_S, OPTIONS, stream)
    assert dedicated.loads_per_1000 == affinity.loads_per_1000
    randomly = run_cell("random", 2, 2, 1, LOAD_S, OPTIONS, stream)
    assert randomly.loads_per_1000 > 4 * affinity.loads_per_1000
    with pytest.raises(ValueError, match="at least as many replicas"):
        run_cell("dedicated", 1, 2, 1, LOAD_S, OPTIONS, stream)


def test_the_grid_is_seeded_typed_and_says_where_dedicated_wins() -> None:
    options = ClusterSimOptions(replicas=(2, 4), models=(2, 4), capacities=(1,), load_s=(5.0,), requests=200)
    first, second = cluster_sim.simulate(options), cluster_sim.simulate(options)
    assert first.cells == second.cells
    decoded = msgspec.json.decode(msgspec.json.encode(first), type=ClusterSimulation)
    assert decoded.cells == first.cells
    # Dedicated only where R >= M: (2,2), (4,2), (4,4); the other two policies everywhere.
    assert len(first.cells) == 4 * 2 + 3
    assert {c.policy for c in first.cells if c.replicas < c.models} == {"affinity", "random"}
    assert all(win.split(" s ", 1)[1] in first.conclusion for win in first.dedicated_wins)
    assert first.conclusion.startswith("With 5 s loads, one replica per model has the lower p99 in ")
    assert {c.requests for c in first.cells} == {200}
    section = "\n".join(cluster_sim.page_section(first))
    assert "| 5 | 1 | 4 | 2 | dedicated |" in section and first.conclusion in section


def test_the_default_load_costs_are_the_measured_stop_and_reconfigure_costs() -> None:
    assert ClusterSimOptions().load_s == (auto_scheduler.COSTS["stop"], auto_scheduler.COSTS["reconfigure"])
