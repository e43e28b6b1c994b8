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

from server.engine.lease import Published
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
    """One configured model, the engine it holds, and what it publishes when it is active.

    The manager owns the slots; the others change them only through this API. Strategies use :meth:`attach`
    and :meth:`detach` (and :func:`transition` when they evict); the switch run uses :func:`transition`,
    :meth:`hold_bundle` and ``last_active``; a reload sets ``profile`` and calls :meth:`drop_bundle`. Attaching
    or detaching an engine drops the published snapshot, so a bundle never outlives the engine it was built for
    (a parked ``keep`` or ``sleep`` slot keeps both, and switching back reuses its bundle).

    Attributes:
        name: The served model name (the profile's key).
        profile: The model's profile.
        state: Current state.
        reason: Why the slot failed (``failed`` only).
        last_active: Monotonic time the slot last stopped being active (for least-recently-used eviction).
    """

    name: str
    profile: ModelProfile
    state: SlotState = SlotState.STOPPED
    reason: str | None = None
    last_active: float = 0.0
    _engine: Any = field(default=None, repr=False)
    _published: Published[Any] | None = field(default=None, repr=False)

    @property
    def engine(self) -> Any:
        """The live engine, or None."""
        return self._engine

    @property
    def published(self) -> Published[Any] | None:
        """The model and the bundle built for the engine held now: what the manager publishes when the slot is
        active. None until a bundle is held, and again after the engine changes."""
        return self._published

    def attach(self, engine: Any) -> None:
        """Hold ``engine`` (a load, or a shared engine handed over); any earlier bundle is dropped."""
        self._engine, self._published = engine, None

    def detach(self) -> Any:
        """Stop holding the engine and its bundle; return the engine (None when there was none)."""
        engine, self._engine, self._published = self._engine, None, None
        return engine

    def drop_bundle(self) -> None:
        """Forget the bundle (its frontend settings changed); the next activation builds one anew."""
        self._published = None

    def hold_bundle(self, bundle: Any) -> Published[Any]:
        """Keep ``bundle``, built for the engine held now, as what the slot publishes."""
        if self._engine is None:
            raise IllegalTransition(f"{self.name}: a bundle needs an engine")
        self._published = Published(self.name, bundle)
        return self._published


def transition(slot: Slot, new: SlotState, reason: str | None = None) -> None:
    """Move ``slot`` to ``new`` after checking the table; log it."""
    if new is not slot.state and new not in TRANSITIONS[slot.state]:
        raise IllegalTransition(f"{slot.name}: {slot.state} -> {new} is not allowed")
    if new is SlotState.FAILED and not reason:
        raise IllegalTransition(f"{slot.name}: failed needs a reason")
    logger.info("slot %s: %s -> %s%s", slot.name, slot.state, new, f" ({reason})" if reason else "")
    slot.state = new
    slot.reason = reason if new is SlotState.FAILED else None
