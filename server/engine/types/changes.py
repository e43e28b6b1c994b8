"""What changed, as the model slots' owner tells its subscribers (the scheduler among them) through its change signal.

Each event carries news the state alone does not keep: a switch began or ended and how, a request ended. ``None``
stands for any other change.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.engine.types.scheduling import SwitchView

__all__ = ["Change", "LeaseEnded", "SwitchBegan", "SwitchEnded"]


@dataclass(frozen=True)
class SwitchBegan:
    """A switch to ``target`` began; ``forced`` when the scheduler did not ask for it (start-up, admin, restart)."""

    target: str
    forced: bool


@dataclass(frozen=True)
class SwitchEnded:
    """``switch`` is over (``ok``: its target is active) and its outcome is published."""

    switch: SwitchView
    ok: bool


@dataclass(frozen=True)
class LeaseEnded:
    """A request admitted to ``model`` ended."""

    model: str


#: What a subscriber is told: one of the events above, or None for any other change.
Change = SwitchBegan | SwitchEnded | LeaseEnded | None
