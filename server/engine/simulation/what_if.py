"""Which one change of the profile (a pin, the budget, a priority) would change a simulated outcome most: each
variant is simulated with the same trace and costs, and the one that moves the switch seconds most (then the p99
wait) is named."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import msgspec

from server.engine.simulation.driver import Simulation, simulate
from server.engine.simulation.figures import Outcome
from server.engine.simulation.trace import TraceRequest

__all__ = ["WhatIf", "strongest_change"]


class WhatIf(msgspec.Struct, frozen=True, kw_only=True):
    """One variant and its outcome beside the profile's.

    Attributes:
        change: The change in words (``pin big``, ``memory budget x1.5``, ``priority -1 for chat``).
        outcome: Its simulated outcome.
    """

    change: str
    outcome: Outcome


def _variants(setup: Simulation) -> list[tuple[str, Simulation]]:
    variants: list[tuple[str, Simulation]] = []
    for name, model in setup.models.items():
        if setup.holds_several and not model.pinned:
            pinned = {**setup.models, name: replace(model, pinned=True)}
            variants.append((f"pin {name}", replace(setup, models=pinned)))
        raised = {**setup.models, name: replace(model, priority=model.priority - 1)}
        variants.append((f"priority {model.priority - 1} for {name}", replace(setup, models=raised)))
    if setup.holds_several and setup.budget_bytes is not None:
        for factor in (1.5, 0.67):
            budget = int(setup.budget_bytes * factor)
            variants.append((f"memory budget x{factor:g}", replace(setup, budget_bytes=budget)))
    if setup.holds_several and setup.switching.max_active is not None:
        more = msgspec.structs.replace(setup.switching, max_active=setup.switching.max_active + 1)
        variants.append((f"max_active {more.max_active}", replace(setup, switching=more)))
    return variants


def strongest_change(setup: Simulation, trace: Sequence[TraceRequest], base: Outcome) -> WhatIf | None:
    """The variant whose outcome differs most from ``base`` (switch seconds, then p99 wait); None when none
    changes anything."""
    best: WhatIf | None = None
    best_key = (0.0, 0.0)
    for change, variant in _variants(setup):
        outcome = simulate(variant, trace)
        key = (
            abs(outcome.overall.switch_s - base.overall.switch_s),
            abs(outcome.overall.wait_p99_s - base.overall.wait_p99_s),
        )
        if key > best_key:
            best, best_key = WhatIf(change=change, outcome=outcome), key
    return best
