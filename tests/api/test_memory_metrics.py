"""``/metrics``' memory budget families: the budget, each model's footprint and what the models holding engines
take, against fake engines (the plan is one a keep profile's budget gives)."""

from __future__ import annotations

from typing import Any

from server.api.metrics import ManagerCollector
from server.engine import EngineManager
from server.engine.room_plan import room_budget
from server.engine.strategies import KeepStrategy
from tests.fakes.engines import FakeBundleBuilder, FakeLoader, fake_models
from tests.fakes.memory_plans import budget_plan

GIB = 2**30


async def test_budget_footprints_and_resident_bytes_are_exported() -> None:
    plan = budget_plan({"a": 3 * GIB, "b": 2 * GIB, "c": 2 * GIB}, 5 * GIB)
    strategy = KeepStrategy(FakeLoader(), by_bytes=room_budget(lambda: plan))
    manager: EngineManager[Any] = EngineManager(
        fake_models("a", "b", "c"), strategy, FakeBundleBuilder(), memory_plan=plan, memory_probe=lambda: 1.0
    )
    try:
        await manager.initialize("a")
        await manager.switch("b")  # a resident, b active: 5 GiB held
        samples = {
            (sample.name, tuple(sample.labels.values())): sample.value
            for family in ManagerCollector(manager).collect()
            for sample in family.samples
        }
    finally:
        await manager.shutdown()
    assert samples[("turnout_memory_budget_bytes", ())] == 5 * GIB
    assert samples[("turnout_model_footprint_bytes", ("c",))] == 2 * GIB
    assert samples[("turnout_memory_resident_bytes", ())] == 5 * GIB
