"""The memory budget that residency spends (``switching.memory_budget``); which models fit in it together is the
engine's residency policy (``server/engine/residency/policy.py``).

A budget is bytes (``70GiB``, ``512MiB``, ``1.5TB``) or a fraction of the device's memory (``0.8``); unset, it is
the device's memory less :data:`DEFAULT_RESERVE_FRACTION` of it, the pool the KV-cache plan uses. Pure: no vLLM.
"""

from __future__ import annotations

import re
from typing import Final

from server.profiles.schema import MEMORY_SIZE_PATTERN

__all__ = [
    "DEFAULT_RESERVE_FRACTION",
    "budget_bytes",
    "describe_size",
    "parse_size",
]

#: Share of the device's total memory left out of the pool: the OS, the server process growing, other tenants.
DEFAULT_RESERVE_FRACTION: Final = 0.1
_UNITS: Final = {"B": 1, **{f"{p}iB": 1024 ** (i + 1) for i, p in enumerate("KMGT")}}
_UNITS.update({f"{p}B": 1000 ** (i + 1) for i, p in enumerate("KMGT")})


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
