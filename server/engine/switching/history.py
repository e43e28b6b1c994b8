"""What the manager remembers of its switches for the status route, and tells its observers about each attempt."""

from __future__ import annotations

from collections import deque

from server.engine.types import ManagerObserver, SwitchAttempt, SwitchReport

__all__ = ["SWITCH_HISTORY", "SwitchHistory"]

#: How many switch attempts the manager remembers for the status page.
SWITCH_HISTORY = 20


class SwitchHistory:
    """The last successful switch, the last attempt and the recent attempts, oldest first."""

    def __init__(self, observer: ManagerObserver, size: int = SWITCH_HISTORY) -> None:
        self.last_report: SwitchReport | None = None
        self._recent: deque[SwitchAttempt] = deque(maxlen=size)
        self._observer = observer

    @property
    def last_attempt(self) -> SwitchAttempt | None:
        """The newest attempt, failed or not."""
        return self._recent[-1] if self._recent else None

    @property
    def recent(self) -> list[SwitchAttempt]:
        """The last ``size`` attempts, oldest first."""
        return list(self._recent)

    def record(self, attempt: SwitchAttempt) -> None:
        """Remember ``attempt`` (failed or not) and tell the observers."""
        self._recent.append(attempt)
        self._observer.switch_attempted(attempt)
