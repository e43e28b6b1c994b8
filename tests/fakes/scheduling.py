"""A fake clock, a fake device and recording effects for driving the scheduler (``admission.scheduler``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from server.engine.admission.scheduler import Scheduler
from server.engine.types.scheduling import Refusal, SchedulerPolicy, SwitchView, Waiter
from server.profiles.schema import Switching

__all__ = ["FakeSlots", "RecordingEffects", "SchedulerRig"]


@dataclass
class FakeSlots:
    """The model slots the scheduler reads (the real one is ``server.engine.switching.model_slots.ModelSlots``)."""

    models: tuple[str, ...] = ()
    active_model: str | None = None
    closed: bool = False
    switch: SwitchView | None = None
    held_for_reload: bool = False
    leases: Counter[str] = field(default_factory=Counter)
    warm: Callable[[str], bool] = lambda model: True
    limits: dict[str, int] = field(default_factory=dict)
    priorities: dict[str, int] = field(default_factory=dict)

    @property
    def free(self) -> bool:
        return self.switch is None and not self.held_for_reload

    def in_flight(self, model: str) -> int:
        return self.leases[model]

    def is_warm(self, model: str) -> bool:
        return self.warm(model)

    def concurrency_limit(self, model: str) -> int | None:
        return self.limits.get(model)

    def priority(self, model: str) -> int:
        return self.priorities.get(model, 0)


@dataclass
class RecordingEffects:
    """Records every effect; ``switches`` lists ``(source, target)`` in order, ``admit_times`` when each was let in.

    Like the real device, a switch is recorded on the device at once and an admitted request counts in flight.
    """

    slots: FakeSlots
    clock: Callable[[], float] = lambda: 0.0
    switches: list[tuple[str | None, str]] = field(default_factory=list)
    admitted: list[Waiter[str]] = field(default_factory=list)
    admit_times: list[float] = field(default_factory=list)
    refused: list[tuple[Waiter[str], Refusal]] = field(default_factory=list)
    on_switch: Callable[[str], None] = lambda target: None

    def start_switch(self, source: str | None, target: str) -> None:
        self.on_switch(target)
        self.switches.append((source, target))
        self.slots.switch = SwitchView(source, target, self.clock(), self.slots.is_warm(target))

    def admit(self, waiter: Waiter[str]) -> None:
        self.admitted.append(waiter)
        self.admit_times.append(self.clock())
        self.slots.leases[waiter.model] += 1

    def refuse(self, waiter: Waiter[str], refusal: Refusal) -> None:
        self.refused.append((waiter, refusal))

    def admitted_tickets(self) -> list[str]:
        return [waiter.ticket for waiter in self.admitted]

    def refused_tickets(self) -> dict[str, Refusal]:
        return {waiter.ticket: refusal for waiter, refusal in self.refused}


class SchedulerRig:
    """A scheduler, a fake device, recorded effects and a fake clock, with a model already active."""

    def __init__(
        self,
        models: tuple[str, ...] = ("a", "b"),
        active: str | None = "a",
        warm: Callable[[str], bool] = lambda model: True,
        mode: str = "auto",
        **policy: float,
    ) -> None:
        self.now = 0.0
        self.slots = FakeSlots(models=models, warm=warm)
        self.effects = RecordingEffects(self.slots, clock=lambda: self.now)
        switching = Switching(mode=mode, **policy)  # type: ignore[arg-type]
        self.scheduler: Scheduler[str] = Scheduler(SchedulerPolicy.from_switching(switching), self.effects, self.slots)
        if active is not None:
            self.force_switch(active)
            self.end_switch()

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
            assert self.slots.leases[model] > 0, f"nothing in flight on {model}"
            self.slots.leases[model] -= 1
            self.scheduler.finished(model, self.now)

    def force_switch(self, target: str) -> None:
        """A switch the scheduler did not start (start-up or the admin route)."""
        self.slots.switch = SwitchView(self.slots.active_model, target, self.now, self.slots.is_warm(target))
        self.scheduler.switch_forced(target, self.now)

    def end_switch(self, *, ok: bool = True, after: float = 0.0, restored: str | None = None) -> None:
        """End the switch under way after ``after`` seconds; on failure ``restored`` is published."""
        assert self.slots.switch is not None
        self.advance(after)
        ended = self.slots.switch
        assert ended is not None
        self.slots.switch = None
        self.slots.active_model = ended.target if ok else restored
        self.scheduler.switch_ended(ended, self.now, ok=ok)

    @property
    def active(self) -> str | None:
        return self.slots.active_model

    @property
    def switching(self) -> SwitchView | None:
        return self.slots.switch
