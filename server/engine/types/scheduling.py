"""The scheduler's vocabulary: its policy, its refusals, a waiter, and the two protocols it talks through (the view
of the model slots it reads, the effects it asks of its driver). Kept apart from the scheduler's algorithm
(``admission/scheduler.py``) so that the model slots, the admission package, the fakes and the simulation benchmark
can name these without the algorithm.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from server.profiles.schema import Switching, SwitchMode

__all__ = ["Refusal", "SchedulerEffects", "SchedulerPolicy", "SlotsView", "SwitchView", "Waiter"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class SchedulerPolicy:
    """The scheduler's settings: the profile's ``switching`` section (``server/profiles/schema.py`` holds the
    defaults and says what each means). Manual mode waits without a bound of its own (the caller's applies), as a
    request there only ever waits for a switch the admin started; every queue, in both modes, holds at most
    ``max_queue`` waiters (then 503 with ``Retry-After``), since each waiter holds its body and a connection."""

    #: Whether the scheduler decides the switches (``Switching.auto``, the one reading of the profile's mode).
    auto: bool
    min_residency_s: float
    max_residency_s: float
    max_wait_s: float
    max_queue: int
    failure_backoff_s: float
    max_failure_backoff_s: float

    @classmethod
    def from_switching(cls, switching: Switching) -> SchedulerPolicy:
        """The policy of a profile's ``switching`` section."""
        manual = not switching.auto
        return cls(
            auto=switching.auto,
            min_residency_s=switching.min_residency_s,
            max_residency_s=switching.max_residency_s,
            max_wait_s=math.inf if manual else switching.max_wait_s,
            max_queue=switching.max_queue,
            failure_backoff_s=switching.failure_backoff_s,
            max_failure_backoff_s=switching.max_failure_backoff_s,
        )

    @property
    def mode(self) -> SwitchMode:
        """The mode, as the profile names it (for the status)."""
        return "auto" if self.auto else "manual"

    def backoff_s(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row: ``failure_backoff_s x 2^(failures-1)``, capped."""
        return min(self.failure_backoff_s * 2.0 ** (failures - 1), self.max_failure_backoff_s)


class Refusal(enum.StrEnum):
    """Why a waiter was refused."""

    QUEUE_FULL = "queue_full"
    WAIT_TIMEOUT = "wait_timeout"
    LOAD_FAILED = "load_failed"
    CLOSED = "closed"
    REMOVED = "removed"
    # Manual mode's: the request names a model that is not active, or the model a switch is leaving; no model is
    # active; the switch the request waited for failed.
    NOT_ACTIVE = "not_active"
    SWITCHING_AWAY = "switching_away"
    NO_ACTIVE = "no_active"
    SWITCH_FAILED = "switch_failed"
    # The active model serves its max_concurrent_requests and as many more wait already.
    CONCURRENCY_LIMIT = "concurrency_limit"


@dataclass(eq=False)
class Waiter(Generic[T]):
    """One request waiting for (or admitted to) a model.

    Attributes:
        model: The model it asked for.
        enqueued_at: When it arrived.
        ticket: The caller's handle (the manager's future).
        retry_after_s: Set on refusal: seconds the client should wait before it retries.
    """

    model: str
    enqueued_at: float
    ticket: T
    retry_after_s: int = 0


@dataclass(frozen=True)
class SwitchView:
    """The switch under way, as the model slots record it.

    Attributes:
        source: The model being left (None: nothing was active).
        target: The model the device moves to.
        started_at: When it began (the scheduler's clock).
        warm: Whether the target was parked with its engine (its cost is estimated apart from cold starts).
    """

    source: str | None
    target: str
    started_at: float
    warm: bool


class SlotsView(Protocol):
    """What the scheduler reads of the model slots (:class:`ModelSlots` is their one owner)."""

    @property
    def models(self) -> Collection[str]:
        """Every configured model (the one model list)."""

    @property
    def closed(self) -> bool:
        """Whether the manager is shutting down: every waiter is refused."""

    @property
    def active_model(self) -> str | None:
        """The model published now."""

    @property
    def switch(self) -> SwitchView | None:
        """The switch under way."""

    @property
    def free(self) -> bool:
        """No switch runs and no reload holds the device: a switch may start."""

    def in_flight(self, model: str) -> int:
        """Requests admitted to ``model`` and not finished."""

    def is_warm(self, model: str) -> bool:
        """Whether ``model`` is parked with its engine (comes back without an engine start)."""

    def concurrency_limit(self, model: str) -> int | None:
        """The most requests ``model`` serves at once (None: no limit)."""

    def priority(self, model: str) -> int:
        """``model``'s priority: among waiting models a lower value is switched to first (default 0)."""


class SchedulerEffects(Protocol[T]):
    """What the scheduler asks of its driver. Each call returns at once; none may call back into the scheduler."""

    def start_switch(self, source: str | None, target: str) -> None:
        """Begin switching the device to ``target`` (the model slots record it at once); report its end with
        :meth:`Scheduler.switch_ended`."""

    def admit(self, waiter: Waiter[T]) -> None:
        """Let ``waiter`` run on its model, which is published now; report its end with ``finished``."""

    def refuse(self, waiter: Waiter[T], refusal: Refusal) -> None:
        """Answer ``waiter`` with an error (``waiter.retry_after_s`` says when to retry)."""
