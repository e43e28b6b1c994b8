"""A fake clock and recording effects for driving :class:`server.engine.scheduler.Scheduler` by hand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from server.engine.scheduler import Refusal, Scheduler, SchedulerPolicy, Waiter

__all__ = ["RecordingEffects", "SchedulerRig"]


@dataclass
class RecordingEffects:
    """Records every effect; ``switches`` lists ``(source, target)`` in order, ``admit_times`` when each was let in."""

    clock: Callable[[], float] = lambda: 0.0
    switches: list[tuple[str | None, str]] = field(default_factory=list)
    admitted: list[Waiter[str]] = field(default_factory=list)
    admit_times: list[float] = field(default_factory=list)
    refused: list[tuple[Waiter[str], Refusal]] = field(default_factory=list)
    on_switch: Callable[[str], None] = lambda target: None

    def start_switch(self, source: str | None, target: str) -> None:
        self.on_switch(target)
        self.switches.append((source, target))

    def admit(self, waiter: Waiter[str]) -> None:
        self.admitted.append(waiter)
        self.admit_times.append(self.clock())

    def refuse(self, waiter: Waiter[str], refusal: Refusal) -> None:
        self.refused.append((waiter, refusal))

    def admitted_tickets(self) -> list[str]:
        return [waiter.ticket for waiter in self.admitted]

    def refused_tickets(self) -> dict[str, Refusal]:
        return {waiter.ticket: refusal for waiter, refusal in self.refused}


class SchedulerRig:
    """A scheduler, its recorded effects and a fake clock, with a model already active."""

    def __init__(
        self,
        models: tuple[str, ...] = ("a", "b"),
        active: str | None = "a",
        warm: Callable[[str], bool] = lambda model: True,
        **policy: float,
    ) -> None:
        self.now = 0.0
        self.effects = RecordingEffects(clock=lambda: self.now)
        self.scheduler: Scheduler[str] = Scheduler(models, SchedulerPolicy(**policy), self.effects, warm=warm)
        if active is not None:
            self.scheduler.switch_started(None, active, self.now)
            self.scheduler.switch_ended(active, self.now, ok=True)

    def advance(self, seconds: float) -> None:
        """Move the clock, ticking at every wake-up the scheduler asks for on the way."""
        end = self.now + seconds
        while (wake := self.scheduler.next_wakeup()) is not None and wake <= end:
            self.now = max(self.now, wake)
            self.scheduler.tick(self.now)
            if self.scheduler.next_wakeup() == wake:  # nothing changed: avoid spinning
                break
        self.now = end
        self.scheduler.tick(self.now)

    def submit(self, model: str, ticket: str) -> Waiter[str]:
        return self.scheduler.submit(model, ticket, self.now)

    def finish(self, model: str, times: int = 1) -> None:
        for _ in range(times):
            self.scheduler.finished(model, self.now)

    def end_switch(self, *, ok: bool = True, after: float = 0.0, restored: str | None = None) -> None:
        """End the switch under way after ``after`` seconds; on failure ``restored`` is published."""
        assert self.scheduler.switching is not None
        self.advance(after)
        assert self.scheduler.switching is not None
        target = self.scheduler.switching[1]
        self.scheduler.switch_ended(target if ok else restored, self.now, ok=ok)
