"""Residency planning: which models may stay loaded, by count, by bytes and by idle time, and how much KV cache each
gets. Pure: it decides, and the owners above it (the model slots, the keep strategy, the residency controls in
``server/engine/residency_controls.py``) act.

``policy.py`` is the one residency policy: which residents may go and in what order (least recently used, never
pinned, busy or active ones), within the count and byte limits, the in-place victim, how many models fit together,
and when an idle one is due; changing the eviction order is that module and its tests. It is a public name as a
module (``policy``), so that its callers read it at call time. ``slot_eviction.py`` turns the model slots into the
policy's residents and its answers back into slots; ``kv_budget.py`` sizes each model's KV cache so that the models
resident together fit (its types are :mod:`server.engine.types.memory_plan`).
"""

from __future__ import annotations

from server.engine.residency import policy
from server.engine.residency.kv_budget import (
    DEFAULT_RESERVE_FRACTION,
    ENGINE_OVERHEAD_BYTES,
    VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
    host_held_bytes,
    kv_bytes_per_token,
    plan_kv_cache,
    resident_together,
    with_kv_budget,
)
from server.engine.residency.policy import ResidencyOutlook, Resident, residency_outlook
from server.engine.residency.slot_eviction import (
    BudgetEviction,
    Weighing,
    budget_eviction,
    held_bytes,
    in_eviction_order,
)

__all__ = [
    "DEFAULT_RESERVE_FRACTION",
    "ENGINE_OVERHEAD_BYTES",
    "VLLM_DEFAULT_GPU_MEMORY_UTILIZATION",
    "BudgetEviction",
    "ResidencyOutlook",
    "Resident",
    "Weighing",
    "budget_eviction",
    "held_bytes",
    "host_held_bytes",
    "in_eviction_order",
    "kv_bytes_per_token",
    "plan_kv_cache",
    "policy",
    "residency_outlook",
    "resident_together",
    "with_kv_budget",
]
