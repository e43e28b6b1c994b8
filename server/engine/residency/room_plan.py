"""Eviction by bytes: which residents to unload so that a model's footprint fits in the memory budget.

Pure: the strategy gives the residents as they are now and acts on the answer. Only idle, unpinned residents
are ever chosen, least recently used first; the active model, a model with requests in flight and a pinned one
stay. When even all of those would not free enough, the answer is "cannot fit now", with the numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import msgspec

from server.engine.residency.kv_budget import MemoryPlan
from server.engine.switching import Slot, SlotState
from server.profiles.memory_budget import describe_size

__all__ = ["Resident", "RoomBudget", "RoomDecision", "evictions_to_fit", "held_bytes", "room_budget"]


class Resident(msgspec.Struct, frozen=True, kw_only=True):
    """One model holding memory now.

    Attributes:
        name: The model's name.
        footprint_bytes: What it holds.
        last_used: When it last served (monotonic seconds; smaller is older).
        pinned: Never evicted.
        busy: Active or with requests in flight: not evicted now.
    """

    name: str
    footprint_bytes: int
    last_used: float
    pinned: bool = False
    busy: bool = False

    @property
    def evictable(self) -> bool:
        """Idle and unpinned."""
        return not self.pinned and not self.busy


class RoomDecision(msgspec.Struct, frozen=True, kw_only=True):
    """The answer for one target.

    Attributes:
        target: The model to make room for.
        fits: Whether the target fits once ``evict`` are unloaded.
        evict: The residents to unload, in order (least recently used first).
        needs_bytes: The target's footprint.
        free_bytes: The budget left now, before any eviction (negative when over).
        reason: ``to fit NAME (needs X, free Y)``, with why not when it does not fit.
    """

    target: str
    fits: bool
    evict: list[str]
    needs_bytes: int
    free_bytes: int
    reason: str


def evictions_to_fit(
    target: str,
    target_bytes: int,
    residents: Sequence[Resident],
    *,
    budget_bytes: int,
    max_active: int | None = None,
) -> RoomDecision:
    """The least recently used idle, unpinned residents whose unloading lets ``target`` fit.

    Args:
        target: The model to load.
        target_bytes: Its footprint.
        residents: Every other model holding memory now.
        budget_bytes: What all resident models may take together.
        max_active: The most engines at once, the target included (None: no count cap).
    """
    free = budget_bytes - sum(item.footprint_bytes for item in residents)
    reason = f"to fit {target} (needs {describe_size(target_bytes)}, free {describe_size(free)})"
    count = len(residents)
    evict: list[str] = []
    room = free
    for item in sorted((r for r in residents if r.evictable), key=lambda r: r.last_used):
        if room >= target_bytes and (max_active is None or count + 1 <= max_active):
            break
        evict.append(item.name)
        room += item.footprint_bytes
        count -= 1
    fits = room >= target_bytes and (max_active is None or count + 1 <= max_active)
    if not fits:
        held = ", ".join(r.name for r in residents if not r.evictable) or "nothing"
        why = "more than the budget" if target_bytes > budget_bytes else f"{held} busy or pinned"
        reason = (
            f"cannot fit {target} now (needs {describe_size(target_bytes)}, free {describe_size(room)} at most; {why})"
        )
        evict = []
    return RoomDecision(target=target, fits=fits, evict=evict, needs_bytes=target_bytes, free_bytes=free, reason=reason)


def held_bytes(plan: MemoryPlan, slots: Iterable[Slot]) -> int:
    """What the budget counts as taken: the footprints of the slots holding an engine."""
    footprints = plan.footprints()
    return sum(footprints.get(slot.name, 0) for slot in slots if slot.engine is not None)


#: Which residents to evict so that a model fits: ``(target, every other slot holding an engine)``.
RoomBudget = Callable[[str, Sequence[Slot]], RoomDecision]


def room_budget(current_plan: Callable[[], MemoryPlan | None]) -> RoomBudget:
    """The keep strategy's eviction by bytes over the current plan's footprints and budget.

    The plan is read at each decision, so that a reload's models count with their own footprints. A parked
    (``resident``) slot is idle; any other state that holds an engine (active, draining, asleep) is busy.
    """

    def decide(target: str, holders: Sequence[Slot]) -> RoomDecision:
        plan = current_plan()
        if plan is None or plan.budget_bytes is None:
            return RoomDecision(target=target, fits=True, evict=[], needs_bytes=0, free_bytes=0, reason="no budget")
        footprints = plan.footprints()
        residents = [
            Resident(
                name=slot.name,
                footprint_bytes=footprints.get(slot.name, 0),
                last_used=slot.last_active,
                pinned=slot.profile.pinned,
                busy=slot.state is not SlotState.RESIDENT,
            )
            for slot in holders
        ]
        return evictions_to_fit(target, footprints.get(target, 0), residents, budget_bytes=plan.budget_bytes)

    return decide
