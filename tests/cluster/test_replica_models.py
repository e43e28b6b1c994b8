"""A replica's models under Ray's multiplexing and the memory budget, without Ray: the replica's record and loader
(``server/cluster/replica_models.py``) over the real manager with fake engines, behind a fake multiplexer that
follows Ray's LRU contract (``tests/fakes/cluster.py``). Footprints are in GiB (``tests/fakes/memory_plans.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from server.cluster.replica_models import ReplicaModels
from server.engine import EngineManager, SlotState
from server.profiles.schema import Switching
from tests.fakes.cluster import FakeMultiplexer
from tests.fakes.manager_views import admitted, state_of
from tests.fakes.memory_plans import GIB, budget_manager

#: One request at a time: a replica's manager answers it with the model it was sent for.
WAIT_S = 5.0


def _replica(manager: EngineManager[Any]) -> tuple[ReplicaModels, FakeMultiplexer]:
    models = ReplicaModels(manager)
    return models, FakeMultiplexer(models.load, models.capacity)


async def _request(manager: EngineManager[Any], models: ReplicaModels, ray: FakeMultiplexer, name: str) -> None:
    """One request for ``name`` as a node handles it: activated through Ray's multiplexer, then admitted by the
    manager and served by ``name``'s own engine."""
    await models.activate(name, ray)
    async with admitted(manager, name, wait_timeout=WAIT_S) as lease:
        assert lease.model == name and lease.bundle.name == name and lease.bundle.engine.name == name


def _report(manager: EngineManager[Any], models: ReplicaModels) -> dict[str, Any]:
    return models.report(manager.snapshot())


@pytest.mark.parametrize(
    ("footprints", "budget", "max_active", "capacity"),
    [
        ({"a": 3, "b": 2, "c": 2}, 5, None, 2),  # any two fit, never three
        ({"a": 3, "b": 2, "c": 2}, 5, 1, 1),  # max_active still caps
        ({"a": 3, "b": 2, "c": 2}, 5, 3, 2),  # and the budget caps max_active
        ({"a": 3, "b": 2, "c": 2}, 7, None, 3),
        ({"a": 1, "b": 1, "c": 1, "d": 3}, 4, None, 3),  # the three small ones, though d fits beside one only
        ({"a": 6, "b": 6}, 5, None, 1),  # none fits: one at a time (the plan says so before start)
    ],
)
def test_a_replicas_capacity_is_the_most_models_the_budget_holds(
    footprints: dict[str, int], budget: int, max_active: int | None, capacity: int
) -> None:
    manager = budget_manager(
        {name: units * GIB for name, units in footprints.items()},
        budget * GIB,
        Switching(strategy="keep", max_active=max_active),
    )
    assert ReplicaModels(manager).capacity == manager.models_held_at_once == capacity


async def test_a_load_that_ray_counts_in_evicts_by_bytes_and_the_held_model_comes_back() -> None:
    manager = budget_manager({"a": GIB, "b": GIB, "c": GIB, "d": 3 * GIB}, 4 * GIB)
    models, ray = _replica(manager)
    assert models.capacity == 3
    try:
        for name in "abc":
            await _request(manager, models, ray, name)
        assert _report(manager, models) == {
            "capacity": 3,
            "held": ["a", "b", "c"],
            "held_unloaded": {},
            "loads": 3,
            "evictions": 0,
        }

        # Ray's LRU is full: it evicts a (least recently used) and loads d; 3 GiB beside c's 1 GiB leaves no room
        # for b, so the manager evicts b by bytes. Ray still holds b.
        await _request(manager, models, ray, "d")
        report = _report(manager, models)
        assert report["held"] == list(ray.models) == ["b", "c", "d"]
        assert report["held_unloaded"] == {"b": "evicted to fit d (needs 3.0 GiB, free 2.0 GiB)"}
        assert (report["loads"], report["evictions"]) == (4, 1)  # Ray's own: one load each, one eviction
        assert [state_of(manager, name) for name in "abcd"] == [
            SlotState.STOPPED,
            SlotState.STOPPED,
            SlotState.RESIDENT,
            SlotState.ACTIVE,
        ]
        assert manager.snapshot().memory_held_bytes == 4 * GIB

        # A request for b: Ray's hit (no load), the manager brings b back and evicts c by bytes (d is parked, then
        # the least recently used of the two is c).
        await _request(manager, models, ray, "b")
        report = _report(manager, models)
        assert report["held"] == list(ray.models) == ["c", "d", "b"]
        assert report["held_unloaded"] == {"c": "evicted to fit b (needs 1.0 GiB, free 0 B)"}
        assert (report["loads"], report["evictions"]) == (4, 1)
        assert manager.snapshot().memory_held_bytes == 4 * GIB

        # Ray evicts c, which has no engine: nothing to free, and Ray's record and the replica's agree again.
        await _request(manager, models, ray, "a")
        report = _report(manager, models)
        assert report["held"] == list(ray.models) == ["d", "b", "a"]
        assert report["held_unloaded"] == {"d": "evicted to fit a (needs 1.0 GiB, free 0 B)"}
        assert (report["loads"], report["evictions"]) == (5, 2)
        assert manager.snapshot().memory_held_bytes <= 4 * GIB
    finally:
        await manager.shutdown()


@pytest.mark.parametrize("mode", ["manual", "auto"])
async def test_a_model_that_cannot_load_beside_the_busy_active_one_is_served_by_a_switch(mode: str) -> None:
    # c (4 GiB) is active; a (2 GiB) fits only where c was: beside it the budget has 1 GiB, and the active model is
    # never evicted. Ray counts room for two, so its loader runs; the request is still served.
    manager = budget_manager({"a": 2 * GIB, "b": GIB, "c": 4 * GIB}, 5 * GIB, Switching(strategy="keep", mode=mode))
    models, ray = _replica(manager)
    assert models.capacity == 2
    try:
        await _request(manager, models, ray, "c")
        await _request(manager, models, ray, "a")
        report = _report(manager, models)
        assert report["held"] == list(ray.models) == ["c", "a"]
        assert report["held_unloaded"] == {"c": "evicted to fit a (needs 2.0 GiB, free 1.0 GiB)"}
        assert manager.active_model == "a"
        await _request(manager, models, ray, "c")  # and back: Ray's hit, the manager evicts a by bytes
        assert _report(manager, models)["held_unloaded"] == {"a": "evicted to fit c (needs 4.0 GiB, free 3.0 GiB)"}
    finally:
        await manager.shutdown()
