"""Model slot states, the one table of legal transitions, and the slot itself (read-only outside its owner).

Invariants (:class:`~server.engine.switching.ModelSlots` holds them; it is the only code that changes a slot):
    * At most one slot is ``active``, and it is the published model.
    * A slot holds a live engine in ``active``, ``resident``, ``sleeping`` and ``draining`` (``loading`` may or
      may not hold one yet). A ``stashed`` slot holds none: vLLM-Gaudi's host keeps its runner.
    * ``failed`` always carries a reason; every other state clears it.
    * Every change is a compare-and-set: the owner names the states it expects to leave, and an unexpected
      state is an :class:`IllegalTransition` that names both, never a silent move.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from server.engine.types.lease import Published
from server.engine.types.report import EngineStart
from server.profiles.schema import ModelProfile

__all__ = ["PARKED", "TRANSITIONS", "IllegalTransition", "Slot", "SlotState"]


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


#: States in which a model serves nobody but comes back without an engine start.
PARKED = frozenset({SlotState.RESIDENT, SlotState.SLEEPING, SlotState.STASHED})

TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    # Loading covers a fresh load, a wake-up and a restore from the stash; a load that does not activate
    # (``turnout load``, a preload) ends resident.
    SlotState.STOPPED: frozenset({SlotState.LOADING}),
    SlotState.LOADING: frozenset({SlotState.ACTIVE, SlotState.RESIDENT, SlotState.FAILED, SlotState.STOPPED}),
    # Failed from a serving or parked state: its engine died (``engine_death.py``).
    SlotState.ACTIVE: frozenset({SlotState.DRAINING, SlotState.STOPPED, SlotState.FAILED}),
    # A drained model is parked by the strategy, or goes back to active when the switch fails before it parks.
    SlotState.DRAINING: frozenset({SlotState.ACTIVE, SlotState.STOPPED, SlotState.FAILED, *PARKED}),
    SlotState.RESIDENT: frozenset({SlotState.LOADING, SlotState.STOPPED, SlotState.FAILED}),
    SlotState.SLEEPING: frozenset({SlotState.LOADING, SlotState.STOPPED, SlotState.FAILED}),
    SlotState.STASHED: frozenset({SlotState.LOADING, SlotState.STOPPED}),
    SlotState.FAILED: frozenset({SlotState.LOADING, SlotState.STOPPED}),
}


class IllegalTransition(RuntimeError):
    """A bug: code asked for a move the table does not allow, or from a state the slot is not in."""


@dataclass(eq=False)
class Slot:
    """One configured model, the engine it holds, and what it publishes when it is active.

    Everything is read-only here: the model slots' owner (:class:`ModelSlots`) changes a slot only through its
    underscore methods (a test holds that no other module calls them). Attaching or detaching an engine drops the
    published snapshot, so a bundle never outlives the engine it was built for (a parked ``keep`` or ``sleep`` slot
    keeps both, and
    switching back reuses its bundle).
    """

    name: str
    _profile: ModelProfile
    _state: SlotState = SlotState.STOPPED
    _reason: str | None = None
    _last_active: float = 0.0
    _uses: int = 0
    _engine: Any = field(default=None, repr=False)
    _published: Published[Any] | None = field(default=None, repr=False)
    _last_start: EngineStart | None = field(default=None, repr=False)

    @property
    def profile(self) -> ModelProfile:
        """The model's profile."""
        return self._profile

    @property
    def state(self) -> SlotState:
        """Current state."""
        return self._state

    @property
    def reason(self) -> str | None:
        """Why the slot failed (``failed``), or why its owner stopped it (``stopped``: an eviction to fit another
        model in the memory budget); None otherwise."""
        return self._reason

    @property
    def last_active(self) -> float:
        """Monotonic time the slot last stopped being active, or was loaded: its last use, as the residency policy
        reads it (``residency/policy.py``: eviction order and idle deadlines)."""
        return self._last_active

    @property
    def uses(self) -> int:
        """How often the slot was loaded or stopped being active: how often it served, as the residency policy's
        ``cost`` rule counts it."""
        return self._uses

    @property
    def engine(self) -> Any:
        """The live engine, or None."""
        return self._engine

    @property
    def published(self) -> Published[Any] | None:
        """The model and the bundle built for the engine held now: what the model slots publish when the slot is
        active. None until a bundle is held, and again after the engine changes."""
        return self._published

    @property
    def last_start(self) -> EngineStart | None:
        """The phases of the model's last engine start (None before its first, or when it was not measured); kept
        after the engine stops."""
        return self._last_start

    # -- the owner's (see the class docstring) -----------------------------------------------------------------

    def _move(self, expected: frozenset[SlotState], new: SlotState, reason: str | None = None) -> SlotState:
        """Compare-and-set: move to ``new`` from one of ``expected``; return the state left."""
        old = self._state
        if old not in expected:
            wanted = ", ".join(sorted(expected))
            raise IllegalTransition(f"{self.name}: expected {wanted} to move to {new}, found {old}")
        if new is not old and new not in TRANSITIONS[old]:
            raise IllegalTransition(f"{self.name}: {old} -> {new} is not allowed")
        if new is SlotState.FAILED and not reason:
            raise IllegalTransition(f"{self.name}: failed needs a reason")
        self._state = new
        self._reason = reason if new in (SlotState.FAILED, SlotState.STOPPED) else None
        return old

    def _attach(self, engine: Any) -> None:
        self._engine, self._published = engine, None

    def _started(self, start: EngineStart) -> None:
        self._last_start = start

    def _detach(self) -> Any:
        engine, self._engine, self._published = self._engine, None, None
        return engine

    def _hold_bundle(self, bundle: Any) -> Published[Any]:
        if self._engine is None:
            raise IllegalTransition(f"{self.name}: a bundle needs an engine")
        self._published = Published(self.name, bundle)
        return self._published

    def _drop_bundle(self) -> None:
        self._published = None

    def _set_profile(self, profile: ModelProfile) -> None:
        self._profile = profile

    def _touch(self, when: float) -> None:
        self._last_active = when
        self._uses += 1
