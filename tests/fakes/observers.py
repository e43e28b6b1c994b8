"""An observer of the manager's events (``server.engine.observer.ManagerObserver``) that records every one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from server.engine.types.proof import Verification
from server.engine.types.report import SwitchAttempt

__all__ = ["RecordingObserver"]


@dataclass
class RecordingObserver:
    """Every event, in order; ``deaths`` keep the monotonic time each reached the manager."""

    attempts: list[SwitchAttempt] = field(default_factory=list)
    waits: list[tuple[str, float, bool]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    idle_unloaded: list[str] = field(default_factory=list)
    deaths: list[tuple[str, str, float]] = field(default_factory=list)
    restarts: list[tuple[str, bool]] = field(default_factory=list)
    verified: list[tuple[str, Verification]] = field(default_factory=list)

    def switch_attempted(self, attempt: SwitchAttempt) -> None:
        self.attempts.append(attempt)

    def request_waited(self, model: str, seconds: float, *, admitted: bool) -> None:
        self.waits.append((model, seconds, admitted))

    def request_aborted(self, model: str) -> None:
        self.aborted.append(model)

    def model_idle_unloaded(self, model: str) -> None:
        self.idle_unloaded.append(model)

    def engine_died(self, model: str, cause: str) -> None:
        self.deaths.append((model, cause, time.perf_counter()))

    def engine_restarted(self, model: str, *, ok: bool) -> None:
        self.restarts.append((model, ok))

    def model_verified(self, model: str, verification: Verification) -> None:
        self.verified.append((model, verification))
