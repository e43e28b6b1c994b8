"""Model slot states and the one table of legal transitions.

Invariants:
    * At most one slot is ``active``, and it is the published model.
    * A slot holds a live engine exactly in ``active``, ``resident``, ``sleeping``, ``stashed`` and ``draining``
      (``loading`` may or may not hold one yet).
    * ``failed`` always carries a reason; every other state clears it.
    * Every transition goes through :func:`transition`, which checks the table and logs it.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from server.profiles.schema import ModelProfile

__all__ = ["TRANSITIONS", "IllegalTransition", "Slot", "SlotState", "transition"]

logger = logging.getLogger("turnout.engine")


class SlotState(enum.StrEnum):
    """What a configured model's slot is doing."""

    STOPPED = "stopped"
    LOADING = "loading"
    ACTIVE = "active"
    RESIDENT = "resident"
    SLEEPING = "sleeping"
    STASHED = "stashed"
    DRAINING = "draining"
    FAILED = "failed"


_PARKED = {SlotState.RESIDENT, SlotState.SLEEPING, SlotState.STASHED}

TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    # Loading covers a fresh load, a wake-up and a restore from the stash.
    SlotState.STOPPED: frozenset({SlotState.LOADING}),
    SlotState.LOADING: frozenset({SlotState.ACTIVE, SlotState.FAILED, SlotState.STOPPED}),
    SlotState.ACTIVE: frozenset({SlotState.DRAINING, SlotState.STOPPED}),
    # A drained model is parked by the strategy, or goes back to active when the switch fails before it parks.
    SlotState.DRAINING: frozenset({SlotState.ACTIVE, SlotState.STOPPED, SlotState.FAILED, *_PARKED}),
    SlotState.RESIDENT: frozenset({SlotState.LOADING, SlotState.STOPPED}),
    SlotState.SLEEPING: frozenset({SlotState.LOADING, SlotState.STOPPED}),
    SlotState.STASHED: frozenset({SlotState.LOADING, SlotState.STOPPED}),
    SlotState.FAILED: frozenset({SlotState.LOADING, SlotState.STOPPED}),
}


class IllegalTransition(RuntimeError):
    """A bug: code tried a transition the table does not allow."""


@dataclass(eq=False)
class Slot:
    """One configured model and the engine it holds, if any. Owned and mutated by the manager only.

    Attributes:
        name: The served model name (the profile's key).
        profile: The model's profile.
        state: Current state.
        reason: Why the slot failed (``failed`` only).
        engine: The live engine, when one is held.
        bundle: The frontend bundle built for ``engine`` (reused while the engine stays the same object).
        bundle_engine: The engine ``bundle`` was built for.
        last_active: Monotonic time the slot last stopped being active (for least-recently-used eviction).
    """

    name: str
    profile: ModelProfile
    state: SlotState = SlotState.STOPPED
    reason: str | None = None
    engine: Any = None
    bundle: Any = None
    bundle_engine: Any = None
    last_active: float = field(default=0.0)


def transition(slot: Slot, new: SlotState, reason: str | None = None) -> None:
    """Move ``slot`` to ``new`` after checking the table; log it."""
    if new is not slot.state and new not in TRANSITIONS[slot.state]:
        raise IllegalTransition(f"{slot.name}: {slot.state} -> {new} is not allowed")
    if new is SlotState.FAILED and not reason:
        raise IllegalTransition(f"{slot.name}: failed needs a reason")
    logger.info("slot %s: %s -> %s%s", slot.name, slot.state, new, f" ({reason})" if reason else "")
    slot.state = new
    slot.reason = reason if new is SlotState.FAILED else None
