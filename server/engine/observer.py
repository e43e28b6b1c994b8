"""What the manager tells the outside about (the API layer turns it into Prometheus metrics).

The engine layer never imports the API layer or prometheus_client: it calls observers it was given.
"""

from __future__ import annotations

from typing import Protocol

from server.engine.report import SwitchAttempt

__all__ = ["ManagerObserver"]


class ManagerObserver(Protocol):
    """Receives the manager's events. Calls are synchronous and must not raise (errors are logged and dropped)."""

    def switch_attempted(self, attempt: SwitchAttempt) -> None:
        """A switch ended, failed or not."""

    def request_waited(self, model: str, seconds: float, *, admitted: bool) -> None:
        """Auto mode: a queued request was admitted or refused after waiting ``seconds``."""

    def request_aborted(self, model: str) -> None:
        """A switch aborted a request of ``model`` when its drain timeout ran out."""
