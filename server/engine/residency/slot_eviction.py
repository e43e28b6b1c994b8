"""The device's slots as the residency policy's residents (``residency/policy.py``), and its answers as slots.

The keep strategy asks through these: which parked slots may go and in what order (:func:`in_eviction_order`, what
the strategy's :class:`SlotAccess` answers), and which to evict so that a model's footprint fits in the memory
budget (:func:`budget_eviction`).
A parked (``resident``) slot is idle; the ``active`` one is the active model; any other state that holds an engine
(loading, draining, asleep) is busy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from server.engine.residency import policy as residency_policy
from server.engine.residency.policy import EvictionDecision, Resident
from server.engine.types import MemoryPlan, Slot, SlotState

__all__ = ["BudgetEviction", "budget_eviction", "held_bytes", "in_eviction_order", "resident_of"]


def resident_of(slot: Slot, footprints: Mapping[str, int] | None = None) -> Resident:
    """``slot`` as the policy sees it, with its footprint from ``footprints`` (none: 0)."""
    return Resident(
        name=slot.name,
        footprint_bytes=(footprints or {}).get(slot.name, 0),
        last_used=slot.last_active,
        pinned=slot.profile.pinned,
        busy=slot.state not in (SlotState.RESIDENT, SlotState.ACTIVE),
        active=slot.state is SlotState.ACTIVE,
    )


def in_eviction_order(holders: Sequence[Slot]) -> list[Slot]:
    """The slots of ``holders`` that may go, in the order they go (the policy's :func:`eviction_order`)."""
    by_name = {slot.name: slot for slot in holders}
    return [by_name[item.name] for item in residency_policy.eviction_order([resident_of(slot) for slot in holders])]


def held_bytes(plan: MemoryPlan, slots: Iterable[Slot]) -> int:
    """What the budget counts as taken: the footprints of the slots holding an engine."""
    footprints = plan.footprints()
    return sum(footprints.get(slot.name, 0) for slot in slots if slot.engine is not None)


#: Which residents to evict so that a model fits: ``(target, every other slot holding an engine)``.
BudgetEviction = Callable[[str, Sequence[Slot]], EvictionDecision]


def budget_eviction(current_plan: Callable[[], MemoryPlan | None]) -> BudgetEviction:
    """The keep strategy's eviction by bytes over the current plan's footprints and budget (the policy's
    :func:`evictions_to_fit`). The plan is read at each decision, so that a reload's models count with their own
    footprints."""

    def decide(target: str, holders: Sequence[Slot]) -> EvictionDecision:
        plan = current_plan()
        if plan is None or plan.budget_bytes is None:
            return EvictionDecision(target=target, fits=True, evict=[], needs_bytes=0, free_bytes=0, reason="no budget")
        footprints = plan.footprints()
        residents = [resident_of(slot, footprints) for slot in holders]
        return residency_policy.evictions_to_fit(
            target, footprints.get(target, 0), residents, budget_bytes=plan.budget_bytes
        )

    return decide
