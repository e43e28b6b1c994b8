"""``/metrics``' memory budget families: the budget, each model's footprint and what the models holding engines
take, against fake engines (the plan is one a keep profile's budget gives)."""

from __future__ import annotations

from typing import Any

from server.api.metrics import ManagerCollector
from server.engine import EngineManager
from server.engine.kv_budget import MemoryReading, ModelShape, plan_kv_cache
from server.engine.room_plan import room_budget
from server.engine.strategies import KeepStrategy
from tests.fakes.engines import FakeBundleBuilder, FakeLoader, fake_models

GIB = 2**30


async def test_budget_footprints_and_resident_bytes_are_exported() -> None:
    shapes = [
        ModelShape(name=name, kv_bytes_per_token=0, max_model_len=16, max_num_seqs=1, block_size=16, weight_bytes=size)
        for name, size in (("a", 3 * GIB), ("b", 2 * GIB), ("c", 2 * GIB))
    ]
    memory = MemoryReading(device="cpu", where="NUMA node 0", total_bytes=64 * GIB, available_bytes=60 * GIB)
    plan = plan_kv_cache(shapes, memory, resident=3, strategy="keep", engine_overhead_bytes=0, budget_bytes=5 * GIB)
    footprints = {item.model: item.footprint_bytes for item in plan.decisions}
    strategy = KeepStrategy(FakeLoader(), by_bytes=room_budget(footprints, 5 * GIB))
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
