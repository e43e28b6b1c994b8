"""What proving a model's engine reads and reports: the probe's reading, the recorded fingerprint, the verdict.

A switch's fast paths change a live engine instead of starting a fresh one (an in-place swap, a fork from the warm
launcher, a wake, a stash restore); each ends in a model that answers, which proves only that an endpoint answered.
The proof runs one fixed, greedy probe through the model's own frontend and compares the reading with what that
model answered before (its fingerprint, kept in the private state folder).

The frontend takes the reading (it alone drives a bundle) and returns anything shaped as :class:`ProbeReading`,
so neither layer imports the other: the CLI wires a :data:`ModelProbe` into the manager.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal, Protocol, TypeVar

import msgspec

from server.engine.types.lease import Published
from server.profiles.schema import ModelProfile

__all__ = [
    "FIRST_FINGERPRINT",
    "PROOF_PATHS",
    "ModelProbe",
    "ModelProver",
    "ProbeReading",
    "ProofOutcome",
    "ProofPath",
    "Verification",
]

B = TypeVar("B")

#: How a model came up, as the proof names it: ``in_place`` (a swap inside the running engine), ``fork`` (an
#: engine core forked from the warm launcher), ``wake`` (sleep mode), ``restore`` (a stash restore), ``plain`` (a
#: freshly spawned engine: the reference the others are proven against).
ProofPath = Literal["in_place", "fork", "wake", "restore", "plain"]
PROOF_PATHS: Final[tuple[str, ...]] = ("in_place", "fork", "wake", "restore", "plain")
#: The detail of a proof that found no fingerprint and recorded the first one (its checkpoint's first load).
FIRST_FINGERPRINT: Final = "first fingerprint recorded"
#: ``passed`` (agrees, or recorded on a first load), ``changed`` (the checkpoint changed: a plain start agreed with
#: the fast path), ``fell_back`` (the fast path was wrong: the plain engine serves), ``failed`` (neither agreed),
#: ``skipped`` (the probe cannot drive the model; the detail says why).
ProofOutcome = Literal["passed", "changed", "fell_back", "failed", "skipped"]


class ProbeReading(Protocol):
    """One probe's answer, as the frontend reads it off the model's own operation call.

    Attributes:
        tokens: The greedy output token ids (empty for a pooling model).
        top: Per output position, the two most likely ``(token id, logprob)`` pairs, most likely first.
        vector: A pooling model's vector for the fixed input (None for a generating model).
        skipped: Why the probe could not drive the model (None when it did).
    """

    @property
    def tokens(self) -> Sequence[int]: ...
    @property
    def top(self) -> Sequence[Sequence[tuple[int, float]]]: ...
    @property
    def vector(self) -> Sequence[float] | None: ...
    @property
    def skipped(self) -> str | None: ...


#: Runs the probe through the published bundle of a model: ``(name, profile, bundle) -> reading``.
ModelProbe = Callable[[str, ModelProfile, Any], Awaitable[ProbeReading]]
#: Proves a model just brought up before it is published or resident (the switching layer's ``ModelProof.prove``):
#: ``(slots, name, path, published) -> (published, verdict)``; raises when neither path agrees.
ModelProver = Callable[[Any, str, ProofPath | None, Published[B]], Awaitable[object]]


class Verification(msgspec.Struct, frozen=True, kw_only=True):
    """A switch's proof of the model it published (``last_switch.verify`` in ``/admin/status``).

    Attributes:
        outcome: ``passed``, ``changed``, ``fell_back``, ``failed`` or ``skipped`` (see :data:`ProofOutcome`).
        duration_ms: The proof's time: the probe, and on a mismatch the plain start and its probe.
        path: How the model came up: ``in_place``, ``fork``, ``wake``, ``restore`` or ``plain``.
        detail: What the comparison found, in words (the first differing position, the mean logprob gap).
    """

    outcome: str
    duration_ms: float
    path: str
    detail: str = ""

    @property
    def recorded_first(self) -> bool:
        """It recorded its checkpoint's first fingerprint: a one-off that a later load of the checkpoint does not
        pay (the content's digests, kept after)."""
        return self.detail == FIRST_FINGERPRINT
