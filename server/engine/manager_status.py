"""The manager's state as the status route shows it: one :class:`ManagerSnapshot` built from the device, the
admission, the residency, the healing and the switch history (``EngineManager.snapshot``). It only reads."""

from __future__ import annotations

import time
from typing import Any

from server.engine.admission import Admission
from server.engine.residency import held_bytes
from server.engine.residency_controls import Residency
from server.engine.runtime import FAULTS
from server.engine.supervision import Healer, engine_pids
from server.engine.switching import ModelSlots, SwitchHistory
from server.engine.types import ManagerSnapshot, SchedulerPolicy, SlotSnapshot

__all__ = ["manager_snapshot"]


def manager_snapshot(
    *,
    slots: ModelSlots[Any],
    policy: SchedulerPolicy,
    strategy: str,
    admission: Admission[Any],
    residency: Residency[Any],
    healer: Healer,
    history: SwitchHistory,
) -> ManagerSnapshot:
    """The manager's state for the status route (``strategy``: the strategy's name)."""
    auto, now = policy.auto, time.monotonic()
    switch = slots.switch
    switching_to = switch.target if switch is not None else None
    plan = slots.memory_plan
    return ManagerSnapshot(
        active_model=slots.active_model,
        switching_to=switching_to,
        mode=policy.mode,
        strategy=strategy,
        in_flight=sum(slots.in_flight(name) for name in slots.models),
        slots=[
            SlotSnapshot(
                name=slot.name,
                model=slot.profile.model,
                state=slot.state.value,
                reason=slot.reason,
                in_flight=slots.in_flight(slot.name),
                max_model_len=getattr(slot.published.bundle, "max_model_len", None) if slot.published else None,
                queued=admission.scheduler.queue_depth(slot.name),
                retry_in_s=admission.retry_in(slot.name) if auto else None,
                pinned=slot.profile.pinned,
                unloads_in_s=residency.unloads_in(slot.name, now),
                restart=healer.plan(
                    slot.name,
                    restarting=switching_to == slot.name,
                    retry_in_s=admission.retry_in(slot.name) if auto else None,
                ),
                pids=engine_pids(slot.engine) if slot.engine is not None else [],
                last_start=slot.last_start,
            )
            for slot in slots
        ],
        last_switch=history.last_report,
        last_attempt=history.last_attempt,
        recent_switches=history.recent,
        memory=plan,
        memory_held_bytes=held_bytes(plan, slots) if plan is not None and plan.budget_bytes is not None else None,
        faults=FAULTS.armed(),
    )
