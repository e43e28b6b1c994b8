"""The residency room: which models stay loaded, by count, by bytes and by idle time.

``room_plan.py`` decides which residents go to make room (pure); ``kv_budget.py`` sizes each model's KV cache so that
the models resident together fit; ``controls.py`` loads and unloads models without a switch, preloads at start and
unloads idle ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engine.faces import lazy_face

if TYPE_CHECKING:
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
    from server.engine.residency.room_plan import RoomBudget, held_bytes, room_budget
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
    "RoomBudget",
    "held_bytes",
    "host_held_bytes",
    "kv_bytes_per_token",
    "plan_kv_cache",
    "resident_together",
    "room_budget",
    "with_kv_budget",
]
