"""The device's slots as the residency policy's residents (``residency/policy.py``), and its answers as slots.

The keep strategy asks through these: which parked slots may go and in what order (:func:`in_eviction_order`, what
the strategy's :class:`SlotAccess` answers), and which to evict so that a model's footprint fits in the memory
budget (:func:`budget_eviction`). Both weigh the slots by the profile's eviction rule and the measured reload costs
(:class:`Weighing`), their idle ages counted to the monotonic clock they read at each decision.
A parked (``resident``) slot is idle; the ``active`` one is the active model; any other state that holds an engine
(loading, draining, asleep) is busy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from server.engine.engine_metrics import ENGINE_METRICS
from server.engine.residency import policy as residency_policy
from server.engine.residency.policy import EvictionDecision, Resident
from server.engine.types import CostBook, MemoryPlan, Slot, SlotState
from server.profiles import EvictionRule, Switching

__all__ = ["BudgetEviction", "Weighing", "budget_eviction", "held_bytes", "in_eviction_order", "resident_of"]


@dataclass(frozen=True)
class Weighing:
    """How the slots are weighed for eviction: the profile's ``switching.eviction`` and the measured costs.

    Attributes:
        rule: ``cost`` or ``lru`` (``policy.eviction_order``).
        costs: The switches' measurements (None: none, every model costs the same).
        saved_prefill_s: What an engine's warm prefix cache saves a request, in seconds, lost when it goes
            (``EngineMetrics.saved_prefill_s``; None: not weighed).
    """

    rule: EvictionRule = "lru"
    costs: CostBook | None = None
    saved_prefill_s: Callable[[Any], float] | None = None

    @classmethod
    def of(cls, switching: Switching, costs: CostBook | None) -> Weighing:
        """The profile's rule over ``costs``, and the prefix caches the engines would lose, read from vLLM's
        counters (not where ``switching.kv_keep_bytes`` keeps an engine's prefix blocks in the pool when it goes)."""
        saved = ENGINE_METRICS.saved_prefill_s if switching.kv_keep_bytes is None else None
        return cls(switching.eviction, costs, saved)


def resident_of(slot: Slot, footprints: Mapping[str, int] | None = None, weighing: Weighing | None = None) -> Resident:
    """``slot`` as the policy sees it, with its footprint from ``footprints`` (none: 0), its cost to come back from
    ``weighing``'s costs and the prefill its engine's prefix cache saves."""
    costs = weighing.costs if weighing is not None else None
    saved = weighing.saved_prefill_s if weighing is not None else None
    return Resident(
        name=slot.name,
        footprint_bytes=(footprints or {}).get(slot.name, 0),
        last_used=slot.last_active,
        pinned=slot.profile.pinned,
        busy=slot.state not in (SlotState.RESIDENT, SlotState.ACTIVE),
        active=slot.state is SlotState.ACTIVE,
        return_s=costs.return_s(slot.name) if costs is not None else None,
        lost_prefix_s=saved(slot.engine) if saved is not None and slot.engine is not None else 0.0,
        uses=slot.uses,
        priority=slot.profile.priority,
    )


def in_eviction_order(
    holders: Sequence[Slot], weighing: Weighing | None = None, footprints: Mapping[str, int] | None = None
) -> list[Slot]:
    """The slots of ``holders`` that may go, in the order they go (the policy's :func:`eviction_order`)."""
    weighing = weighing or Weighing()
    by_name = {slot.name: slot for slot in holders}
    residents = [resident_of(slot, footprints, weighing) for slot in holders]
    order = residency_policy.eviction_order(residents, rule=weighing.rule, now=time.monotonic())
    return [by_name[item.name] for item in order]


def held_bytes(plan: MemoryPlan, slots: Iterable[Slot]) -> int:
    """What the budget counts as taken: the footprints of the slots holding an engine."""
    footprints = plan.footprints()
    return sum(footprints.get(slot.name, 0) for slot in slots if slot.engine is not None)


#: Which residents to evict so that a model fits: ``(target, every other slot holding an engine)``.
BudgetEviction = Callable[[str, Sequence[Slot]], EvictionDecision]


def budget_eviction(current_plan: Callable[[], MemoryPlan | None], weighing: Weighing | None = None) -> BudgetEviction:
    """The keep strategy's eviction by bytes over the current plan's footprints and budget (the policy's
    :func:`evictions_to_fit`), weighed by ``weighing``. The plan is read at each decision, so that a reload's
    models count with their own footprints."""
    weighing = weighing or Weighing()

    def decide(target: str, holders: Sequence[Slot]) -> EvictionDecision:
        plan = current_plan()
        if plan is None or plan.budget_bytes is None:
            return EvictionDecision(target=target, fits=True, evict=[], needs_bytes=0, free_bytes=0, reason="no budget")
        footprints = plan.footprints()
        residents = [resident_of(slot, footprints, weighing) for slot in holders]
        return residency_policy.evictions_to_fit(
            target,
            footprints.get(target, 0),
            residents,
            budget_bytes=plan.budget_bytes,
            rule=weighing.rule,
            now=time.monotonic(),
        )

    return decide
