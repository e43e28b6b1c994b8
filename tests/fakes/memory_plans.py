"""Memory plans for tests of residency by memory budget: models of given footprints (weights only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.engine.residency.kv_budget import plan_kv_cache
from server.engine.types.memory_plan import MemoryPlan, MemoryReading, ModelShape

__all__ = ["GIB", "budget_manager", "budget_plan"]


def budget_plan(footprints: Mapping[str, int], budget_bytes: int) -> MemoryPlan:
    """The plan a keep profile gets for models of ``footprints`` bytes (no KV cache, no engine) in a budget."""
    shapes = [
        ModelShape(name=name, kv_bytes_per_token=0, max_model_len=16, max_num_seqs=1, block_size=16, weight_bytes=size)
        for name, size in footprints.items()
    ]
    memory = MemoryReading(
        device="cpu", where="NUMA node 0", total_bytes=4 * budget_bytes, available_bytes=budget_bytes
    )
    return plan_kv_cache(
        shapes, memory, resident=len(shapes), strategy="keep", engine_overhead_bytes=0, budget_bytes=budget_bytes
    )


GIB = 2**30


def budget_manager(footprints: Mapping[str, int] | None = None, budget: int = 5 * GIB, switching: Any = None) -> Any:
    """A ``keep`` manager over fake engines of ``footprints`` bytes (default: ``a``, ``b``, ``c`` of 3, 2 and 2 GiB)
    under ``budget`` (default 5 GiB), evicting by bytes, with ``switching``'s mode and ``max_active`` (default:
    manual, no cap); not initialized."""
    from server.engine import EngineManager
    from server.engine.residency.slot_eviction import budget_eviction
    from server.engine.strategies import KeepStrategy
    from server.profiles.schema import Switching
    from tests.fakes.engines import FakeBundleBuilder, FakeLoader, fake_models

    footprints = footprints or {"a": 3 * GIB, "b": 2 * GIB, "c": 2 * GIB}
    switching = switching or Switching()
    plan = budget_plan(footprints, budget)
    strategy = KeepStrategy(FakeLoader(), max_resident=switching.max_active, by_bytes=budget_eviction(lambda: plan))
    return EngineManager(
        fake_models(*footprints),
        strategy,
        FakeBundleBuilder(),
        switching=switching,
        memory_plan=plan,
        memory_probe=lambda: 1.0,
    )
