"""The memory budget that residency spends (``switching.memory_budget``), and which models fit in it together.

A budget is bytes (``70GiB``, ``512MiB``, ``1.5TB``) or a fraction of the device's memory (``0.8``); unset, it is
the device's memory less :data:`DEFAULT_RESERVE_FRACTION` of it, the pool the KV-cache plan uses. Pure: no vLLM.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Final

import msgspec

from server.profiles.footprint import Footprint
from server.profiles.schema import MEMORY_SIZE_PATTERN

__all__ = [
    "DEFAULT_RESERVE_FRACTION",
    "ResidencyOutlook",
    "budget_bytes",
    "describe_size",
    "most_resident",
    "parse_size",
    "residency_outlook",
]

#: Share of the device's total memory left out of the pool: the OS, the server process growing, other tenants.
DEFAULT_RESERVE_FRACTION: Final = 0.1
_UNITS: Final = {"B": 1, **{f"{p}iB": 1024 ** (i + 1) for i, p in enumerate("KMGT")}}
_UNITS.update({f"{p}B": 1000 ** (i + 1) for i, p in enumerate("KMGT")})
#: Above this many models the sets that fit are found greedily instead of by trying every subset.
_EXACT_UP_TO: Final = 16
_MAX_SETS: Final = 8


def parse_size(text: str) -> int:
    """Bytes of a size such as ``70GiB`` (``MEMORY_SIZE_PATTERN``); raises ValueError otherwise."""
    match = re.fullmatch(MEMORY_SIZE_PATTERN, text)
    if match is None:
        raise ValueError(f"not a size with a unit (such as 70GiB or 512MiB): {text!r}")
    unit = match.group(2)
    return int(float(text.strip()[: -len(unit)].strip()) * _UNITS[unit])


def describe_size(size: int) -> str:
    """``1.5 GiB``, ``300.0 MiB``, ``-12.0 KiB``: a size for people (negative: over a budget)."""
    sign, size = ("-", -size) if size < 0 else ("", size)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{sign}{size / scale:,.1f} {unit}"
    return f"{sign}{size} B"


def budget_bytes(setting: str | float | None, *, total_bytes: int | None, available_bytes: int | None) -> int | None:
    """The budget in bytes: a size as written, a fraction of ``total_bytes``, or by default ``available_bytes``
    less :data:`DEFAULT_RESERVE_FRACTION` of ``total_bytes`` (the KV-cache plan's pool). None: the setting needs
    the device's memory, which is unknown."""
    if isinstance(setting, str):
        return parse_size(setting)
    if total_bytes is None:
        return None
    if setting is not None:
        return int(total_bytes * float(setting))
    available = total_bytes if available_bytes is None else available_bytes
    return available - int(total_bytes * DEFAULT_RESERVE_FRACTION)


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


def most_resident(sizes: Mapping[str, int], budget: int, *, max_active: int | None = None) -> list[str]:
    """The most models of ``sizes`` (name to footprint) that fit in ``budget`` together, at most ``max_active``:
    the smallest first, so that no set of more models fits. Its length is how many models can be resident at
    once (Ray Serve's ``max_num_models_per_replica``, the gateway's ``max_lora``)."""
    chosen: list[str] = []
    used = 0
    for name in sorted(sizes, key=lambda n: sizes[n]):
        if (max_active is not None and len(chosen) >= max_active) or used + sizes[name] > budget:
            break  # the rest are no smaller
        chosen.append(name)
        used += sizes[name]
    return chosen


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
