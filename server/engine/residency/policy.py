"""The residency policy: which resident models may go and in what order, how many fit together, and when an idle one
is unloaded. One place decides it, and everything that keeps models resident asks it: the model slots (the
eviction choice a strategy reads through ``SlotAccess``), the ``keep`` strategy (eviction by count, by memory and
by bytes, and the engine that takes a target in place), the idle timer, ``turnout validate --plan`` and the Ray
replica's capacity.

Pure: no asyncio, no clock, no device. The inputs are plain values, :class:`Resident` (a model holding memory now,
as its owner sees it at the moment of asking) and the limits (``max_active`` engines, ``budget_bytes``); times are
monotonic seconds the caller reads. Changing the eviction order is :func:`eviction_order` and its tests
(``tests/engine/test_residency_policy.py``).

The rules:
    * Only an idle, unpinned resident ever goes: never a pinned model, a busy one (requests in flight, a switch
      holding it) or the active one. Among those, a higher ``priority`` value goes first (lower values are the
      more important models, as vLLM's request priority), and within one priority the eviction rule
      (``switching.eviction``) orders them (:func:`eviction_order`): ``lru``, the least recently used first;
      ``cost`` (the default), the one whose loss costs least first (:func:`keep_value`, a GreedyDual-Size-Frequency
      kind of value: its measured cost to come back and the prefill its warm prefix cache saves, times how often it
      served, over its bytes and its idle time).
    * A target fits when the engines held, the target included, are at most ``max_active`` and its footprint fits
      in what ``budget_bytes`` leaves (:func:`evictions_to_fit`); when even every resident that may go would not
      free enough, it cannot fit now, and the answer says why, with the numbers.
    * A resident engine that takes a target in place (``auto`` with a full house) is offered it in the same
      order: the first whose engine can take the target does (an engine that takes another model loses its own).
    * How many models fit together is the most whose footprints fit in the budget, the smallest first
      (:func:`most_resident`): Ray Serve's ``max_num_models_per_replica`` and the gateway's ``max_lora``.
    * A model is unloaded after sitting idle for its ``idle_unload_s`` (else the profile's default; never when it
      is pinned), counted from its last use; the active model only where the mode lets the timer unload it
      (``auto``), and never while it is busy (:func:`idle_deadline`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec

from server.profiles import EvictionRule, Footprint, describe_size

__all__ = [
    "AGE_EXPONENT",
    "USE_CAP",
    "EvictionDecision",
    "ResidencyOutlook",
    "Resident",
    "eviction_order",
    "evictions_to_fit",
    "idle_deadline",
    "idle_due",
    "idle_limit",
    "keep_value",
    "most_resident",
    "one_more_fits",
    "residency_outlook",
]

#: Above this many models the sets that fit are found greedily instead of by trying every subset.
_EXACT_UP_TO: Final = 16
_MAX_SETS: Final = 8
#: Uses counted in a resident's value: two uses tell a model that comes back from one that came once, and counting
#: more kept a model that was popular long ago in place of the one wanted now (the simulations said so).
USE_CAP: Final = 2
#: The idle seconds a resident is treated as having at least, so that the one used a moment ago is not worth
#: everything.
_MIN_AGE_S: Final = 1.0
#: The reload cost a resident is counted at, at least: below it, a switch's timing noise (a few milliseconds on a
#: loaded machine) would decide which of two equally cheap models goes, not what they cost to come back.
_MIN_COST_S: Final = 0.1
#: How strongly idle time ages a resident's value: idle 1024 times longer, worth half. Dividing by the idle time
#: itself (1) let recency all but decide, close to least recently used (0.97x its switch seconds in
#: ``benchmarks/residency_policies.py``); 0.25 (the value before) gave 0.83x on the seeds it was chosen on, 0.1 0.80x
#: (seeds 0-19, chosen over 0.05-0.25 there and on five other trace shapes; the result is measured on other seeds).
#: Leaving the idle time out (0) did no better on any shape and would keep a dear model used once forever.
AGE_EXPONENT: Final = 0.1


class Resident(msgspec.Struct, frozen=True, kw_only=True):
    """One model holding memory now, as the policy sees it.

    Attributes:
        name: The model's name.
        last_used: When it last served or was parked or loaded (monotonic seconds; smaller is older).
        footprint_bytes: What it holds (0 where the memory is not budgeted).
        pinned: Never evicted nor unloaded when idle.
        busy: Requests in flight or queued, or a switch holds it (loading, draining): it stays now.
        active: It is the model that serves now: never evicted (the idle timer may unload it in ``auto`` mode).
        idle_unload_s: Seconds it may sit idle before it is unloaded (:func:`idle_limit`; None: never).
        return_s: What it costs to come back once it is gone, measured (the cost book's cold start, else its
            in-place swap; None: never measured).
        lost_prefix_s: The prefill seconds its warm prefix cache saves a request, lost with its engine (0: none, or
            the kept-KV pool keeps its blocks).
        uses: How often it served or was loaded (:data:`USE_CAP` of them count).
        priority: Its model's ``priority``: a higher value goes first.
    """

    name: str
    last_used: float
    footprint_bytes: int = 0
    pinned: bool = False
    busy: bool = False
    active: bool = False
    idle_unload_s: float | None = None
    return_s: float | None = None
    lost_prefix_s: float = 0.0
    uses: int = 1
    priority: int = 0

    @property
    def evictable(self) -> bool:
        """Idle, unpinned and not the active model: it may go to make room."""
        return not self.pinned and not self.busy and not self.active


class EvictionDecision(msgspec.Struct, frozen=True, kw_only=True):
    """The answer for one target.

    Attributes:
        target: The model to make room for.
        fits: Whether the target fits once ``evict`` are unloaded.
        evict: The residents to unload, in order (:func:`eviction_order`).
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


# -- which residents may go, and in what order --------------------------------------------------------------------


def eviction_order(
    residents: Iterable[Resident], *, rule: EvictionRule = "lru", now: float | None = None
) -> list[Resident]:
    """The residents that may go, in the order they go: the idle, unpinned ones, a higher ``priority`` first, then
    by ``rule``: ``lru`` the least recently used first, ``cost`` the least :func:`keep_value` first (the least
    recently used first among equals, and the order given after that). The same order offers a resident engine to
    take a target in place.

    ``now``: the time the idle ages are counted to (default: the newest ``last_used`` among ``residents``).
    """
    idle = [item for item in residents if item.evictable]
    if rule == "lru":
        return sorted(idle, key=lambda item: (-item.priority, item.last_used))
    everyone = list(residents)
    when = now if now is not None else max((item.last_used for item in everyone), default=0.0)
    sizes = [item.footprint_bytes for item in idle if item.footprint_bytes > 0]
    mean_bytes = sum(sizes) / len(sizes) if sizes else 0.0
    known = [max(item.return_s, _MIN_COST_S) for item in idle if item.return_s is not None]
    fallback = sum(known) / len(known) if known else 0.0
    return sorted(
        idle,
        key=lambda item: (
            -item.priority,
            keep_value(item, now=when, mean_bytes=mean_bytes, fallback_s=fallback),
            item.last_used,
        ),
    )


def keep_value(resident: Resident, *, now: float, mean_bytes: float = 0.0, fallback_s: float = 0.0) -> float:
    """What keeping ``resident`` is worth: the reload its next use would otherwise cost, times how likely that use
    comes soon, for each byte it holds (``docs/residency.md`` gives the formula)::

        min(uses, USE_CAP) x (max(return_s, 0.1 s) + lost_prefix_s) / (bytes / mean_bytes)
            / max(now - last_used, 1 s) ** AGE_EXPONENT

    GreedyDual-Size-Frequency's value (frequency x cost / size), aged by the idle time rather than by an inflation
    value: a model idle 1024 times as long is worth half as much (:data:`AGE_EXPONENT`). ``mean_bytes``: the mean
    footprint of the candidates (0: footprints unknown, every one counts as 1); ``fallback_s``: the cost of a model
    never measured (the mean of those measured). A warm prefix cache the engine would lose adds the prefill it saves
    (``lost_prefix_s``) to the cost.
    """
    cost = max(resident.return_s, _MIN_COST_S) if resident.return_s is not None else fallback_s
    cost += resident.lost_prefix_s
    share = resident.footprint_bytes / mean_bytes if mean_bytes > 0 and resident.footprint_bytes > 0 else 1.0
    age = max(now - resident.last_used, _MIN_AGE_S)
    return min(resident.uses, USE_CAP) * cost / share / math.pow(age, AGE_EXPONENT)


def one_more_fits(held: int, *, max_active: int | None) -> bool:
    """Whether another engine fits beside the ``held`` ones within ``max_active`` (None: no count cap)."""
    return max_active is None or held + 1 <= max_active


def evictions_to_fit(
    target: str,
    target_bytes: int,
    residents: Sequence[Resident],
    *,
    budget_bytes: int,
    max_active: int | None = None,
    rule: EvictionRule = "lru",
    now: float | None = None,
) -> EvictionDecision:
    """The residents to unload, in :func:`eviction_order`, so that ``target`` fits within the limits.

    Args:
        target: The model to load.
        target_bytes: Its footprint.
        residents: Every other model holding memory now.
        budget_bytes: What all resident models may take together.
        max_active: The most engines at once, the target included (None: no count cap).
        rule, now: As :func:`eviction_order`.
    """
    free = budget_bytes - sum(item.footprint_bytes for item in residents)
    reason = f"to fit {target} (needs {describe_size(target_bytes)}, free {describe_size(free)})"
    count = len(residents)
    evict: list[str] = []
    room = free
    for item in eviction_order(residents, rule=rule, now=now):
        if room >= target_bytes and one_more_fits(count, max_active=max_active):
            break
        evict.append(item.name)
        room += item.footprint_bytes
        count -= 1
    fits = room >= target_bytes and one_more_fits(count, max_active=max_active)
    if not fits:
        held = ", ".join(r.name for r in residents if not r.evictable) or "nothing"
        why = "more than the budget" if target_bytes > budget_bytes else f"{held} busy or pinned"
        reason = (
            f"cannot fit {target} now (needs {describe_size(target_bytes)}, free {describe_size(room)} at most; {why})"
        )
        evict = []
    return EvictionDecision(
        target=target, fits=fits, evict=evict, needs_bytes=target_bytes, free_bytes=free, reason=reason
    )


# -- how many models fit together ---------------------------------------------------------------------------------


class ResidencyOutlook(msgspec.Struct, frozen=True, kw_only=True):
    """Which models can be resident together within a budget.

    Attributes:
        budget_bytes: The budget.
        max_active: The count cap, if any.
        largest_sets: The largest sets of models that fit together (no other model fits beside them), biggest
            first, at most eight.
        never_fit: Models whose footprint alone exceeds the budget.
    """

    budget_bytes: int
    max_active: int | None
    largest_sets: list[list[str]]
    never_fit: list[str]


def most_resident(sizes: Mapping[str, int], budget: int, *, max_active: int | None = None) -> list[str]:
    """The most models of ``sizes`` (name to footprint) that fit in ``budget`` together, at most ``max_active``:
    the smallest first, so that no set of more models fits. Its length is how many models can be resident at
    once (Ray Serve's ``max_num_models_per_replica``, the gateway's ``max_lora``)."""
    chosen: list[str] = []
    used = 0
    for name in sorted(sizes, key=lambda n: sizes[n]):
        if not one_more_fits(len(chosen), max_active=max_active) or used + sizes[name] > budget:
            break  # the rest are no smaller
        chosen.append(name)
        used += sizes[name]
    return chosen


def residency_outlook(
    footprints: Sequence[Footprint], budget: int, *, max_active: int | None = None
) -> ResidencyOutlook:
    """The largest sets of ``footprints`` that fit in ``budget`` together (at most ``max_active`` each)."""
    sizes = {item.model: item.total_bytes for item in footprints}
    never = [name for name, size in sizes.items() if size > budget]
    fitting = {name: size for name, size in sizes.items() if name not in never}
    most = most_resident(fitting, budget, max_active=max_active)
    if len(fitting) <= _EXACT_UP_TO:
        sets = _maximal_sets(list(fitting), fitting, budget, len(most))
    else:  # too many to try every subset: the most models that fit, the smallest first
        sets = [most] if most else []
    return ResidencyOutlook(budget_bytes=budget, max_active=max_active, largest_sets=sets, never_fit=never)


def _maximal_sets(names: list[str], sizes: Mapping[str, int], budget: int, most: int) -> list[list[str]]:
    """Every set that fits and to which no other model can be added, biggest (then heaviest) first; none has more
    than ``most`` models (:func:`most_resident`)."""
    found: list[list[str]] = []
    for count in range(most, 0, -1):
        for combo in itertools.combinations(names, count):
            used = sum(sizes[n] for n in combo)
            if used > budget:
                continue
            if count < most and any(used + sizes[n] <= budget for n in names if n not in combo):
                continue  # not maximal: another model still fits beside it
            found.append(list(combo))
    found.sort(key=lambda combo: (-len(combo), -sum(sizes[n] for n in combo)))
    return found[:_MAX_SETS]


# -- idle deadlines -----------------------------------------------------------------------------------------------


def idle_limit(own_s: float | None, default_s: float | None, *, pinned: bool) -> float | None:
    """How long a model may sit idle before it is unloaded: its own ``idle_unload_s``, else the profile's default;
    None (never) for a pinned model or where neither is set."""
    if pinned:
        return None
    return own_s if own_s is not None else default_s


def idle_deadline(resident: Resident, *, unload_active: bool, not_before: float = 0.0) -> float | None:
    """When the idle timer unloads ``resident`` (monotonic), or None: it has no idle limit, or it is busy, or it is
    the active model and ``unload_active`` is off (manual mode). ``not_before``: a retry of an idle unload that
    did not happen waits until then."""
    limit = resident.idle_unload_s
    if limit is None or resident.pinned or resident.busy or (resident.active and not unload_active):
        return None
    return max(resident.last_used + limit, not_before)


def idle_due(resident: Resident, now: float, *, unload_active: bool, not_before: float = 0.0) -> bool:
    """Whether ``resident`` is due for an idle unload at ``now`` (:func:`idle_deadline`)."""
    deadline = idle_deadline(resident, unload_active=unload_active, not_before=not_before)
    return deadline is not None and deadline <= now
