"""The residency room: which models stay loaded, by count, by bytes and by idle time.

``policy.py`` is the one residency policy, pure: which residents may go and in what order (least recently used, never
pinned, busy or active ones), within the count and byte limits, the in-place victim, how many models fit together,
and when an idle one is due; changing the eviction order is that module and its tests. It is handed out as a module
(``policy``), so that its callers in other rooms (the keep strategy, the strategy registry) read it at call time.
``room_plan.py`` turns the device's slots into the policy's residents and its answers back into slots;
``kv_budget.py`` sizes each model's KV cache so that the models resident together fit; ``controls.py`` loads and
unloads models without a switch, preloads at start and unloads idle ones when the policy says they are due.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engine.faces import lazy_face

if TYPE_CHECKING:
    from server.engine.residency import policy
    from server.engine.residency.controls import Residency
    from server.engine.residency.kv_budget import (
        DEFAULT_RESERVE_FRACTION,
        ENGINE_OVERHEAD_BYTES,
        VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
        MemoryBudgetExceeded,
        MemoryPlan,
        MemoryReading,
        ModelShape,
        host_held_bytes,
        kv_bytes_per_token,
        plan_kv_cache,
        resident_together,
        with_kv_budget,
    )
    from server.engine.residency.policy import ResidencyOutlook, residency_outlook
    from server.engine.residency.room_plan import RoomBudget, held_bytes, in_eviction_order, room_budget
else:
    __getattr__ = lazy_face(__name__, __file__)

__all__ = [
    "DEFAULT_RESERVE_FRACTION",
    "ENGINE_OVERHEAD_BYTES",
    "VLLM_DEFAULT_GPU_MEMORY_UTILIZATION",
    "MemoryBudgetExceeded",
    "MemoryPlan",
    "MemoryReading",
    "ModelShape",
    "Residency",
    "ResidencyOutlook",
    "RoomBudget",
    "held_bytes",
    "host_held_bytes",
    "in_eviction_order",
    "kv_bytes_per_token",
    "plan_kv_cache",
    "policy",
    "residency_outlook",
    "resident_together",
    "room_budget",
    "with_kv_budget",
]
