"""The KV-cache budget's arithmetic: caps, shares, residency groups and the errors it reports."""

from __future__ import annotations

import itertools

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from server.engine.residency.kv_budget import (
    host_held_bytes,
    kv_bytes_per_token,
    plan_kv_cache,
    resident_together,
    with_kv_budget,
)
from server.engine.strategies import capabilities_of
from server.engine.types.memory_plan import MemoryReading, ModelShape
from server.profiles.schema import ModelProfile, Profile

MIB = 2**20
GIB = 2**30


def memory(available: int, total: int = 24 * GIB, device: str = "cpu") -> MemoryReading:
    return MemoryReading(device=device, where="NUMA node 0", total_bytes=total, available_bytes=available)


def shape(name: str, *, per_token: int = 512, max_model_len: int = 1024, seqs: int = 128, **kwargs: int) -> ModelShape:
    return ModelShape(
        name=name,
        kv_bytes_per_token=per_token,
        max_model_len=max_model_len,
        max_num_seqs=seqs,
        block_size=16,
        weight_bytes=kwargs.pop("weights", 100 * MIB),
        **kwargs,  # type: ignore[arg-type]
    )


def test_bytes_per_token_count_a_key_and_a_value_per_layer_and_kv_head() -> None:
    # The tiny models: 2 layers, 1 KV head of 64, bfloat16.
    assert kv_bytes_per_token(num_layers=2, num_kv_heads=1, head_size=64, dtype_bytes=2, mla=False) == 512
    # Llama 3.1 8B: 32 layers, 8 KV heads of 128, bfloat16: 128 KiB a token.
    assert kv_bytes_per_token(num_layers=32, num_kv_heads=8, head_size=128, dtype_bytes=2, mla=False) == 128 * 1024
    assert kv_bytes_per_token(num_layers=2, num_kv_heads=1, head_size=576, dtype_bytes=2, mla=True) == 2 * 576 * 2


def test_a_model_never_gets_more_than_max_model_len_times_max_num_seqs() -> None:
    plan = plan_kv_cache([shape("a")], memory(16 * GIB), resident=1, strategy="stop", engine_overhead_bytes=GIB)
    (decision,) = plan.decisions
    assert decision.kv_cache_bytes == decision.need_bytes == 1024 * 128 * 512 == 64 * MIB
    assert decision.capped_at_need and decision.sequences == 128
    assert decision.footprint_bytes == GIB + 100 * MIB + 64 * MIB
    assert plan.errors == []


def test_the_kept_kv_pool_is_held_out_of_host_memory_only() -> None:
    assert host_held_bytes(2 * GIB, memory(16 * GIB)) == 2 * GIB, "on CPU the engines run in host memory"
    assert host_held_bytes(2 * GIB, memory(16 * GIB, device="cuda")) == 0, "a GPU's memory is not the host's"
    assert host_held_bytes(None, memory(16 * GIB)) == 0
    big = [shape("a", max_model_len=8192, seqs=256, per_token=128 * 1024)]
    alone = plan_kv_cache(big, memory(10 * GIB), resident=1, strategy="stop", engine_overhead_bytes=GIB)
    held = plan_kv_cache(
        big, memory(10 * GIB), resident=1, strategy="stop", engine_overhead_bytes=GIB, host_held_bytes=2 * GIB
    )
    assert held.reserve_bytes == alone.reserve_bytes + 2 * GIB
    assert held.decisions[0].kv_cache_bytes <= alone.decisions[0].kv_cache_bytes - 2 * GIB + 16 * 128 * 1024


def test_one_at_a_time_lets_each_model_use_the_whole_pool() -> None:
    big = [shape(name, max_model_len=8192, seqs=256, per_token=128 * 1024) for name in ("a", "b")]
    plan = plan_kv_cache(big, memory(10 * GIB, total=20 * GIB), resident=1, strategy="stop", engine_overhead_bytes=GIB)
    pool = 10 * GIB - 2 * GIB  # available less the 10% reserve of the total
    for decision in plan.decisions:
        assert not decision.capped_at_need
        assert pool - 16 * 128 * 1024 < decision.footprint_bytes <= pool  # whole blocks: at most one block short


def test_models_resident_together_share_the_pool_so_any_group_fits() -> None:
    big = [shape(name, max_model_len=8192, seqs=256, per_token=128 * 1024) for name in ("a", "b", "c")]
    plan = plan_kv_cache(big, memory(10 * GIB, total=20 * GIB), resident=2, strategy="keep", engine_overhead_bytes=GIB)
    pool = 8 * GIB
    footprints = [decision.footprint_bytes for decision in plan.decisions]
    assert all(a + b <= pool for a, b in itertools.combinations(footprints, 2))
    assert sum(footprints[:2]) > pool - 2 * 16 * 128 * 1024  # and nothing is wasted
    assert plan.resident_together == 2


def test_a_small_model_is_capped_and_a_big_one_gets_the_rest() -> None:
    small = shape("small")  # needs 64 MiB
    large = shape("large", max_model_len=8192, seqs=256, per_token=128 * 1024)
    plan = plan_kv_cache(
        [small, large], memory(10 * GIB, total=20 * GIB), resident=2, strategy="keep", engine_overhead_bytes=GIB
    )
    by_name = {decision.model: decision for decision in plan.decisions}
    assert by_name["small"].capped_at_need and by_name["small"].kv_cache_bytes == 64 * MIB
    assert by_name["large"].kv_cache_bytes > 5 * GIB
    assert by_name["small"].footprint_bytes + by_name["large"].footprint_bytes <= 8 * GIB


def test_a_profiles_own_size_is_kept_and_counted() -> None:
    fixed = shape("fixed", explicit_kv_bytes=3 * GIB)
    open_ = shape("open", max_model_len=8192, seqs=256, per_token=128 * 1024)
    plan = plan_kv_cache(
        [fixed, open_], memory(10 * GIB, total=20 * GIB), resident=2, strategy="keep", engine_overhead_bytes=GIB
    )
    by_name = {decision.model: decision for decision in plan.decisions}
    assert by_name["fixed"].source == "profile" and by_name["fixed"].kv_cache_bytes == 3 * GIB
    assert by_name["open"].source == "budget"
    assert by_name["fixed"].footprint_bytes + by_name["open"].footprint_bytes <= 8 * GIB
    assert by_name["open"].kv_cache_bytes < 8 * GIB - 3 * GIB - 2 * GIB  # the fixed model's cache is counted


def test_a_model_that_cannot_hold_one_sequence_is_an_error_naming_it() -> None:
    huge = shape("huge", max_model_len=131072, per_token=128 * 1024)  # one sequence: 16 GiB
    plan = plan_kv_cache(
        [huge, shape("tiny")], memory(10 * GIB, total=20 * GIB), resident=1, strategy="stop", engine_overhead_bytes=GIB
    )
    assert len(plan.errors) == 1
    assert "model 'huge'" in plan.errors[0] and "max_model_len 131072" in plan.errors[0]
    assert "16,384 MiB" in plan.errors[0]


def test_residency_follows_the_strategy() -> None:
    assert resident_together(capabilities_of("stop").serves_several, max_active=None, models=3) == 1
    assert resident_together(capabilities_of("reconfigure").serves_several, max_active=3, models=3) == 1
    assert resident_together(capabilities_of("sleep").serves_several, max_active=None, models=3) == 1
    assert resident_together(capabilities_of("keep").serves_several, max_active=None, models=3) == 3
    assert resident_together(capabilities_of("keep").serves_several, max_active=2, models=3) == 2
    assert resident_together(capabilities_of("keep").serves_several, max_active=5, models=3) == 3


def test_the_summary_names_every_model_and_the_memory_read() -> None:
    plan = plan_kv_cache(
        [shape("a"), shape("b")], memory(16 * GIB), resident=2, strategy="keep", engine_overhead_bytes=GIB
    )
    lines = plan.summary()
    assert "NUMA node 0" in lines[0] and "up to 2 model(s) resident together (strategy keep)" in lines[0]
    assert lines[1].startswith("  a: KV cache 64 MiB (budgeted, capped")
    assert lines[2].startswith("  b: KV cache 64 MiB")


def test_the_budget_is_written_into_budgeted_models_only() -> None:
    profile = Profile(
        path="/p.yaml",
        default_model="a",
        models={
            "a": ModelProfile(model="/m/a", engine_args={"max_model_len": 1024}),
            "b": ModelProfile(model="/m/b", engine_args={"kv_cache_memory_bytes": 5 * MIB}),
        },
    )
    shapes = [shape("a"), shape("b", explicit_kv_bytes=5 * MIB)]
    plan = plan_kv_cache(shapes, memory(16 * GIB), resident=2, strategy="keep", engine_overhead_bytes=GIB)
    budgeted = with_kv_budget(profile, plan)
    assert budgeted.models["a"].engine_args == {"max_model_len": 1024, "kv_cache_memory_bytes": 64 * MIB}
    assert budgeted.models["b"] is profile.models["b"]
    assert "gpu_memory_utilization" not in budgeted.models["a"].engine_args


def test_on_cuda_a_budgeted_model_also_asks_for_its_share_of_the_device() -> None:
    profile = Profile(path="/p.yaml", default_model="a", models={"a": ModelProfile(model="/m/a")})
    plan = plan_kv_cache(
        [shape("a", weights=16 * GIB)],
        memory(70 * GIB, total=80 * GIB, device="cuda"),
        resident=1,
        strategy="sleep",
        engine_overhead_bytes=2 * GIB,
    )
    args = with_kv_budget(profile, plan).models["a"].engine_args
    assert args["kv_cache_memory_bytes"] == 64 * MIB
    # vLLM checks that this share of the device is free at start-up: the footprint (18 GiB + 64 MiB), rounded up.
    assert args["gpu_memory_utilization"] == 0.23


def test_the_plan_travels_as_json_for_the_status_route() -> None:
    plan = plan_kv_cache([shape("a")], memory(16 * GIB), resident=1, strategy="stop", engine_overhead_bytes=GIB)
    decoded = msgspec.json.decode(msgspec.json.encode(plan))
    assert decoded["decisions"][0]["kv_cache_bytes"] == 64 * MIB
    assert decoded["memory"]["where"] == "NUMA node 0"


@settings(deadline=None)  # as many examples as the profile says (tests/conftest.py)
@given(
    needs=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 512), st.integers(0, 4096)), min_size=1, max_size=5),
    resident=st.integers(1, 5),
    available_mib=st.integers(0, 64 * 1024),
)
def test_any_group_of_resident_models_fits_whenever_the_plan_has_no_error(
    needs: list[tuple[int, int, int]], resident: int, available_mib: int
) -> None:
    shapes = [
        shape(f"m{i}", max_model_len=blocks * 16, seqs=seqs, per_token=128 * 1024, weights=weights * MIB)
        for i, (blocks, seqs, weights) in enumerate(needs)
    ]
    total = 64 * GIB
    plan = plan_kv_cache(
        shapes, memory(available_mib * MIB, total=total), resident=resident, strategy="keep", engine_overhead_bytes=GIB
    )
    footprints = [decision.footprint_bytes for decision in plan.decisions]
    group = min(resident, len(shapes))
    worst = sum(sorted(footprints, reverse=True)[:group])
    if not plan.errors:
        assert worst <= available_mib * MIB - total // 10
    for decision, model in zip(plan.decisions, shapes, strict=True):
        assert decision.kv_cache_bytes <= model.full_bytes
        assert decision.kv_cache_bytes % (16 * 128 * 1024) == 0  # whole blocks
        assert (decision.kv_cache_bytes < model.one_sequence_bytes) == any(f"'{model.name}'" in e for e in plan.errors)


def test_by_memory_budget_each_model_is_sized_for_itself_not_for_a_group() -> None:
    # Under keep the budget drives residency: a big model may take the whole budget alone; a small one its need.
    big = shape("big", max_model_len=8192, seqs=256, per_token=128 * 1024)  # needs 256 GiB
    small = shape("small")  # needs 64 MiB
    plan = plan_kv_cache(
        [big, small, shape("other")],
        memory(10 * GIB, total=20 * GIB),
        resident=3,
        strategy="keep",
        engine_overhead_bytes=GIB,
        budget_bytes=6 * GIB,
    )
    by_name = {decision.model: decision for decision in plan.decisions}
    assert 6 * GIB - 16 * 128 * 1024 < by_name["big"].footprint_bytes <= 6 * GIB  # the budget, to a whole block
    assert by_name["small"].kv_cache_bytes == by_name["small"].need_bytes == 64 * MIB
    assert plan.budget_bytes == 6 * GIB and plan.resident_together == 3  # the count cap, reported
    assert "resident by memory budget 6,144 MiB (strategy keep)" in plan.summary()[0]
    # The same models planned for any three together would shrink the big one to what the group leaves.
    grouped = plan_kv_cache(
        [big, small, shape("other")],
        memory(10 * GIB, total=20 * GIB),
        resident=3,
        strategy="keep",
        engine_overhead_bytes=GIB,
    )
    assert grouped.decisions[0].kv_cache_bytes < by_name["big"].kv_cache_bytes


def test_by_memory_budget_a_model_whose_fixed_part_exceeds_it_is_an_error() -> None:
    heavy = shape("heavy", weights=7 * GIB)
    plan = plan_kv_cache(
        [heavy], memory(16 * GIB), resident=1, strategy="keep", engine_overhead_bytes=GIB, budget_bytes=6 * GIB
    )
    assert len(plan.errors) == 1 and "model 'heavy'" in plan.errors[0]
