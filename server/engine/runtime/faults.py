"""Faults armed for tests and drills (``turnout serve --inject-fault KIND:MODEL``): each shows a proof or a digest
catching what it damages, as an operator would see it.

* ``weights:MODEL``: MODEL's next in-place load installs its weights with the final norm's weight negated (the drill
  that shows on confident tiny models; a tensor merely scaled leaves their greedy answers as they were), so the
  switch's proof finds the engine answering unlike the model's fingerprint;
* ``kv:MODEL``: MODEL's kept KV blocks are restored with flipped bytes, so each block's digest refuses it.

A fault of a kind is used once (``weights``) or for the server's life (``kv``, set into the model's engine
arguments at start). The server warns at start, and ``/admin/status`` lists what is armed.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["FAULT_KINDS", "FaultKind", "InjectedFaults", "parse_fault"]

FaultKind = Literal["weights", "kv"]
FAULT_KINDS: Final[tuple[str, ...]] = ("weights", "kv")


def parse_fault(text: str) -> tuple[FaultKind, str]:
    """``KIND:MODEL`` as ``(kind, model)``.

    Raises:
        ValueError: Not ``weights:MODEL`` or ``kv:MODEL``.
    """
    kind, _, model = text.partition(":")
    if kind == "weights" and model:
        return "weights", model
    if kind == "kv" and model:
        return "kv", model
    raise ValueError(f"{text!r} is no fault: give weights:MODEL or kv:MODEL")


class InjectedFaults:
    """The faults armed in this server (see the module's docstring)."""

    def __init__(self, faults: list[tuple[FaultKind, str]] | None = None) -> None:
        self._armed: list[tuple[FaultKind, str]] = list(faults or [])

    def arm(self, kind: FaultKind, model: str) -> None:
        """Arm ``kind`` for ``model``."""
        self._armed.append((kind, model))

    def armed(self) -> list[str]:
        """What is armed, as ``KIND:MODEL``."""
        return [f"{kind}:{model}" for kind, model in self._armed]

    def models(self, kind: FaultKind) -> list[str]:
        """The models ``kind`` is armed for."""
        return [model for armed, model in self._armed if armed == kind]

    def take(self, kind: FaultKind, model: str) -> bool:
        """Whether ``kind`` was armed for ``model``; it is used up."""
        if (kind, model) not in self._armed:
            return False
        self._armed.remove((kind, model))
        return True


#: This process's faults: what ``--inject-fault`` armed (none in a server that was not told to).
FAULTS: Final = InjectedFaults()
