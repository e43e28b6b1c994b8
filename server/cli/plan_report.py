"""What fits before start: each model's footprint, the memory budget, and which models can be resident together.

One place builds it and its text, for ``turnout validate --plan`` (no vLLM, no engine: the memory is read with
psutil, NVML or HLML) and for ``turnout serve`` at start-up (after the KV-cache plan, so each budgeted model's
KV cache is the size it will get).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

import msgspec

from server.engine import (
    MemoryPlan,
    MemoryReading,
    ResidencyOutlook,
    capabilities_of,
    hlml_memory,
    nvml_memory,
    residency_outlook,
    resolve_strategy_name,
)
from server.profiles import (
    Footprint,
    FootprintUnknown,
    Profile,
    budget_bytes,
    describe_size,
    model_footprint,
)

__all__ = ["ModelFootprint", "PlanReport", "build_plan_report", "read_memory", "render_plan"]


class ModelFootprint(msgspec.Struct, frozen=True, kw_only=True):
    """One model's footprint as reported (``total_bytes`` spelled out for JSON readers)."""

    model: str
    weight_bytes: int
    kv_cache_bytes: int
    kv_source: str
    overhead_bytes: int
    total_bytes: int


class PlanReport(msgspec.Struct, frozen=True, kw_only=True):
    """The plan for one profile on this machine.

    Attributes:
        platform: ``cpu``, ``cuda`` or ``hpu``.
        strategy: The strategy the profile's resolves to here.
        memory: The memory read (None: unreadable here).
        budget_bytes: The memory budget (None: it needs the memory, which is unknown).
        footprints: One per model whose files say its footprint, in profile order.
        unknown: Models whose footprint is unknown, with why.
        outlook: Which models fit together within the budget (residency by memory: ``keep``; None otherwise).
    """

    platform: str
    strategy: str
    memory: MemoryReading | None
    budget_bytes: int | None
    footprints: list[ModelFootprint]
    unknown: dict[str, str]
    outlook: ResidencyOutlook | None


def read_memory(platform: str) -> MemoryReading | None:
    """The device's memory without vLLM: NVML on CUDA, HLML on Gaudi, host RAM (psutil) on CPU."""
    if platform == "cuda":
        reading = nvml_memory()
        if reading is None:
            return None
        index, info = reading
        return MemoryReading(device="cuda", where=f"cuda:{index}", total_bytes=info.total, available_bytes=info.free)
    if platform == "hpu":
        gaudi = hlml_memory()
        if gaudi is None:
            return None
        return MemoryReading(device="hpu", where="Gaudi", total_bytes=gaudi.total, available_bytes=gaudi.free)
    import psutil

    ram = psutil.virtual_memory()
    return MemoryReading(device="cpu", where="host RAM", total_bytes=ram.total, available_bytes=ram.available)


def build_plan_report(
    profile: Profile, *, platform: str, memory: MemoryReading | None, env: Mapping[str, str]
) -> PlanReport:
    """The footprints of ``profile``'s models on ``platform`` and what fits together within its budget."""
    strategy = resolve_strategy_name(
        profile.switching.strategy,
        device=platform,
        stash_available=importlib.util.find_spec("vllm_gaudi") is not None,
    )
    footprints: list[Footprint] = []
    unknown: dict[str, str] = {}
    for name, model in profile.models.items():
        try:
            footprints.append(model_footprint(name, model, platform=platform, env=env))
        except FootprintUnknown as exc:
            unknown[name] = str(exc)
    budget = budget_bytes(
        profile.switching.memory_budget,
        total_bytes=memory.total_bytes if memory else None,
        available_bytes=memory.available_bytes if memory else None,
    )
    outlook = None
    if budget is not None and capabilities_of(strategy).budgets_bytes:
        outlook = residency_outlook(footprints, budget, max_active=profile.switching.max_active)
    return PlanReport(
        platform=platform,
        strategy=strategy,
        memory=memory,
        budget_bytes=budget,
        footprints=[
            ModelFootprint(
                model=item.model,
                weight_bytes=item.weight_bytes,
                kv_cache_bytes=item.kv_cache_bytes,
                kv_source=item.kv_source,
                overhead_bytes=item.overhead_bytes,
                total_bytes=item.total_bytes,
            )
            for item in footprints
        ],
        unknown=unknown,
        outlook=outlook,
    )


def render_plan(report: PlanReport, kv_plan: MemoryPlan | None = None) -> list[str]:
    """The plan as lines for people: ``turnout validate --plan``, and ``turnout serve`` at start-up, which passes
    its KV-cache plan (``kv_plan``) so that the one block also says the reserve and how each KV cache was sized."""
    size = describe_size
    decisions = {item.model: item for item in kv_plan.decisions} if kv_plan is not None else {}
    memory = report.memory
    read = (
        f"{size(memory.available_bytes)} available of {size(memory.total_bytes)} on {memory.where}"
        if memory
        else "memory unreadable here"
    )
    budget = size(report.budget_bytes) if report.budget_bytes is not None else "unknown"
    reserve = f"; reserve {size(kv_plan.reserve_bytes)}" if kv_plan is not None else ""
    lines = [f"plan: {report.platform}, strategy {report.strategy}; {read}{reserve}; memory budget {budget}"]
    for item in report.footprints:
        kv = "its kv_cache_memory_bytes" if item.kv_source == "profile" else "max_model_len x max_num_seqs"
        decision = decisions.get(item.model)
        if decision is not None:  # the prepared profile holds the size the plan chose: say how it was chosen
            how = "set by the profile" if decision.source == "profile" else "budgeted"
            cap = ", capped at max_model_len x max_num_seqs" if decision.capped_at_need else ""
            kv = f"{how}{cap}; {decision.sequences:.1f} full-length sequences"
        lines.append(
            f"  {item.model}: {size(item.total_bytes)} = weights {size(item.weight_bytes)} + KV cache "
            f"{size(item.kv_cache_bytes)} ({kv}) + engine {size(item.overhead_bytes)}"
        )
    lines.extend(f"  {name}: footprint unknown ({why})" for name, why in report.unknown.items())
    outlook = report.outlook
    if outlook is None:
        one = not capabilities_of(report.strategy).serves_several
        lines.append("  resident together: " + ("one model at a time" if one else "unknown (no memory budget)"))
        return lines
    cap = f", at most {outlook.max_active} (max_active)" if outlook.max_active else ""
    uncounted = "; models of unknown footprint not counted" if report.unknown else ""
    lines.append(f"  resident together (largest sets that fit{cap}{uncounted}):")
    lines.extend(f"    {', '.join(combo)}" for combo in outlook.largest_sets)
    if not outlook.largest_sets:
        lines.append("    none" if report.footprints else "    unknown: no model's footprint is known here")
    if outlook.never_fit:
        lines.append(f"  never fit: {', '.join(outlook.never_fit)}")
    return lines
