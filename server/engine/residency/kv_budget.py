"""KV-cache budgeting: how much KV cache each model gets so that every model that may be resident together fits.

Left alone, vLLM sizes an engine's KV cache from ``gpu_memory_utilization`` of the whole device (92% of the NUMA
node on CPU), as if the engine were alone. A second resident engine, or the next one while the previous one is
still shutting down, then fails to start. So for a model whose profile sets neither ``kv_cache_memory_bytes``
nor ``gpu_memory_utilization``, Turnout decides the size itself:

* The pool is the memory vLLM will check (the NUMA node on CPU, the device on CUDA), as available now, less a
  reserve for everything that is not an engine.
* Every model costs a fixed part (the engine processes, its weights) plus its KV cache.
* Under ``keep`` a memory budget (``switching.memory_budget``, default: the pool) drives residency: each model's
  KV cache is sized once, for the model alone, ``min(need, budget - its fixed part)``; which models are resident
  together is decided at run time by their footprints (``residency/policy.py``), not by the plan.
* Under the other strategies one model is resident (``resident_together``), so budgeted models share the pool by
  water-filling: each gets ``min(need, level)`` for the highest level at which the worst group still fits.
* ``need`` is what ``max_model_len`` x ``max_num_seqs`` tokens take: more would never be used. A model that
  cannot hold one sequence of ``max_model_len`` is an error, said before any engine starts.

This module is pure arithmetic; ``vllm_configs.py`` measures the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

import msgspec

from server.engine.types import KvDecision, MemoryPlan, MemoryReading, ModelShape
from server.profiles.footprint import ENGINE_OVERHEAD_BYTES, kv_bytes_per_token
from server.profiles.memory_budget import DEFAULT_RESERVE_FRACTION
from server.profiles.schema import Profile

__all__ = [
    "DEFAULT_RESERVE_FRACTION",
    "ENGINE_OVERHEAD_BYTES",
    "VLLM_DEFAULT_GPU_MEMORY_UTILIZATION",
    "host_held_bytes",
    "kv_bytes_per_token",
    "plan_kv_cache",
    "resident_together",
    "with_kv_budget",
]

_MIB: Final = 2**20
#: vLLM's own default share of the device (``gpu_memory_utilization``); the budget never asks for more.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION: Final = 0.92


def resident_together(serves_several: bool, *, max_active: int | None, models: int) -> int:
    """How many models may be held at once: a strategy that serves several (``Capabilities.serves_several``:
    ``keep``) holds up to ``max_active``; every other strategy one."""
    if not serves_several:
        return 1
    return max(1, min(max_active or models, models))


def host_held_bytes(kv_keep_bytes: int | None, memory: MemoryReading) -> int:
    """What the host holds beside the engines out of the memory they use: the kept-KV pool
    (``switching.kv_keep_bytes``, tmpfs, so host memory) counts where the engines run in host memory (CPU)."""
    return (kv_keep_bytes or 0) if memory.device == "cpu" else 0


def plan_kv_cache(
    shapes: Sequence[ModelShape],
    memory: MemoryReading,
    *,
    resident: int,
    strategy: str,
    engine_overhead_bytes: int,
    reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
    budget_bytes: int | None = None,
    host_held_bytes: int = 0,
) -> MemoryPlan:
    """Size the KV cache of every budgeted model: for itself within ``budget_bytes`` (residency by memory), else
    so that any ``resident`` models fit in ``memory`` together.

    Args:
        shapes: Every model of the profile.
        memory: The memory vLLM checks, read before any engine starts.
        resident: How many models may be resident together (see ``resident_together``).
        strategy: The strategy's name, for the report.
        engine_overhead_bytes: What one engine takes besides weights and KV cache.
        reserve_fraction: Share of ``memory.total_bytes`` kept out of the pool.
        budget_bytes: The memory budget of residency by memory (``keep``); given, each model is sized alone
            within it and ``resident`` is not used.
        host_held_bytes: Memory held beside the engines out of the same memory (see :func:`host_held_bytes`);
            reserved with ``reserve_fraction``.

    Returns:
        The plan; ``errors`` names every model that cannot hold one sequence of its ``max_model_len``.
    """
    reserve = int(memory.total_bytes * reserve_fraction) + host_held_bytes
    pool = memory.available_bytes - reserve if budget_bytes is None else budget_bytes
    together = max(1, min(resident, len(shapes)))
    group = 1 if budget_bytes is not None else together  # by budget each model is sized alone
    fixed = [engine_overhead_bytes + shape.weight_bytes + _explicit_kv(shape, memory) for shape in shapes]

    def worst_group(level: int) -> int:
        pairs = zip(shapes, fixed, strict=True)
        costs = [cost + (min(shape.full_bytes, level) if shape.budgeted else 0) for shape, cost in pairs]
        return sum(sorted(costs, reverse=True)[:group])

    level = _highest_level(worst_group, pool, max((s.full_bytes for s in shapes if s.budgeted), default=0))
    decisions: list[KvDecision] = []
    errors: list[str] = []
    for shape, cost in zip(shapes, fixed, strict=True):
        alone = level if budget_bytes is None else max(0, pool - cost)  # by budget: each model for itself
        kv = _whole_blocks(min(shape.full_bytes, alone), shape) if shape.budgeted else _explicit_kv(shape, memory)
        if shape.budgeted and kv < shape.one_sequence_bytes:
            errors.append(_too_small(shape, kv, group))
        decisions.append(
            KvDecision(
                model=shape.name,
                source="budget" if shape.budgeted else "profile",
                kv_cache_bytes=kv,
                footprint_bytes=cost + (kv if shape.budgeted else 0),
                need_bytes=shape.full_bytes,
                min_bytes=shape.one_sequence_bytes,
                sequences=kv / shape.one_sequence_bytes if shape.one_sequence_bytes else 0.0,
                capped_at_need=shape.budgeted and kv >= shape.full_bytes,
            )
        )
    return MemoryPlan(
        memory=memory,
        reserve_bytes=reserve,
        engine_overhead_bytes=engine_overhead_bytes,
        resident_together=together,
        strategy=strategy,
        decisions=decisions,
        budget_bytes=budget_bytes,
        errors=errors,
    )


def _explicit_kv(shape: ModelShape, memory: MemoryReading) -> int:
    if shape.explicit_kv_bytes is not None:
        return shape.explicit_kv_bytes
    if shape.explicit_fraction is not None:
        # vLLM claims this share of the whole device for the engine, weights included: count all of it.
        return int(memory.total_bytes * shape.explicit_fraction)
    return 0


def _highest_level(worst_group: Callable[[int], int], pool: int, ceiling: int) -> int:
    """The highest per-model KV level at which the worst group fits in ``pool`` (0 when nothing fits)."""
    if worst_group(ceiling) <= pool:
        return ceiling
    low, high = 0, ceiling  # worst_group(low) may exceed pool too: then 0, and every model reports an error
    while high - low > 1:
        middle = (low + high) // 2
        if worst_group(middle) <= pool:
            low = middle
        else:
            high = middle
    return low


def _whole_blocks(size: int, shape: ModelShape) -> int:
    block = shape.block_size * shape.kv_bytes_per_token
    return size // block * block if block else size


def _too_small(shape: ModelShape, kv: int, group: int) -> str:
    together = f" with {group} models resident together" if group > 1 else ""
    return (
        f"model {shape.name!r}: only {_mib(kv)} of KV cache fits{together}, but one sequence of max_model_len "
        f"{shape.max_model_len} needs {_mib(shape.one_sequence_bytes)}; lower max_model_len, lower "
        "switching.max_active, free memory, or set kv_cache_memory_bytes yourself"
    )


def _mib(size: int) -> str:
    return f"{size / _MIB:,.0f} MiB" if size >= 10 * _MIB else f"{size / _MIB:.1f} MiB"


def with_kv_budget(profile: Profile, plan: MemoryPlan) -> Profile:
    """``profile`` with each budgeted model's KV cache fixed by ``plan``.

    On CUDA vLLM also checks at start-up that ``gpu_memory_utilization`` of the device is free, even when the KV
    cache size is given, so each budgeted model asks for its own footprint's share instead of vLLM's 92%.
    """
    decisions = {item.model: item for item in plan.decisions if item.source == "budget"}
    models = {}
    for name, model in profile.models.items():
        decision = decisions.get(name)
        if decision is None:
            models[name] = model
            continue
        engine_args = {**model.engine_args, "kv_cache_memory_bytes": decision.kv_cache_bytes}
        if plan.memory.device == "cuda":
            share = math.ceil(decision.footprint_bytes / plan.memory.total_bytes * 100) / 100
            engine_args["gpu_memory_utilization"] = min(max(share, 0.01), VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)
        models[name] = msgspec.structs.replace(model, engine_args=engine_args)
    return msgspec.structs.replace(profile, models=models)
