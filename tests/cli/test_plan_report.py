"""``turnout serve``'s start-up plan: one block (``render_plan`` with the KV-cache plan), every fact in it once."""

from __future__ import annotations

from server.cli.plan_report import ModelFootprint, PlanReport, render_plan
from tests.fakes.memory_plans import GIB, budget_plan


def test_the_serve_plan_is_one_block_with_the_kv_cache_decisions_and_the_reserve() -> None:
    kv_plan = budget_plan({"a": 2 * GIB, "b": GIB}, 4 * GIB)
    report = PlanReport(
        platform="cpu",
        strategy="keep",
        memory=kv_plan.memory,
        budget_bytes=4 * GIB,
        footprints=[
            ModelFootprint(
                model=name, weight_bytes=size, kv_cache_bytes=0, kv_source="profile", overhead_bytes=0, total_bytes=size
            )
            for name, size in (("a", 2 * GIB), ("b", GIB))
        ],
        unknown={},
        outlook=None,
    )
    lines = render_plan(report, kv_plan)
    assert lines[0].startswith("plan: cpu, strategy keep; 4.0 GiB available of 16.0 GiB on NUMA node 0; reserve ")
    assert lines[0].endswith("; memory budget 4.0 GiB")
    # Each model's KV cache says how the plan sized it (not the prepared profile's kv_cache_memory_bytes).
    assert lines[1].startswith("  a: 2.0 GiB = weights 2.0 GiB + KV cache ")
    assert "(budgeted, capped at max_model_len x max_num_seqs; " in lines[1] and "full-length sequences)" in lines[1]
    assert not any(line.startswith("memory: ") for line in lines)  # the MemoryPlan.summary() line is gone
    # Without a KV-cache plan (turnout validate --plan) the block is as before.
    assert "its kv_cache_memory_bytes" in render_plan(report)[1] and "reserve" not in render_plan(report)[0]
