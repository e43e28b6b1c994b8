"""``/metrics``' memory budget families: the budget, each model's footprint and what the models holding engines
take, against fake engines (the plan is one a keep profile's budget gives)."""

from __future__ import annotations

from typing import Any

from server.api.metrics import ManagerCollector
from server.engine import EngineManager
from tests.fakes.memory_plans import GIB, budget_manager


async def test_budget_footprints_and_resident_bytes_are_exported() -> None:
    manager: EngineManager[Any] = budget_manager()
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
