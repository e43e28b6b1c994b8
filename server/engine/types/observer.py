"""What the manager tells the outside about (the API layer turns it into Prometheus metrics).

The engine layer never imports the API layer or prometheus_client: it calls observers it was given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from server.engine.types.proof import Verification
from server.engine.types.report import SwitchAttempt

__all__ = ["ManagerObserver", "Observers"]

logger = logging.getLogger("turnout.engine")


class ManagerObserver(Protocol):
    """Receives the manager's events. Calls are synchronous; an observer that raises is logged and skipped."""

    def switch_attempted(self, attempt: SwitchAttempt) -> None:
        """A switch ended, failed or not."""

    def request_waited(self, model: str, seconds: float, *, admitted: bool) -> None:
        """Auto mode: a queued request was admitted or refused after waiting ``seconds``."""

    def request_aborted(self, model: str) -> None:
        """A switch aborted a request of ``model`` when its drain timeout ran out."""

    def model_idle_unloaded(self, model: str) -> None:
        """The idle timer unloaded ``model`` (it served nothing for its ``idle_unload_s``)."""

    def engine_died(self, model: str, cause: str) -> None:
        """``model``'s engine died or hung while it served or was parked."""

    def engine_restarted(self, model: str, *, ok: bool) -> None:
        """A switch brought ``model`` back after its engine died (``ok``), or failed to."""

    def model_verified(self, model: str, verification: Verification) -> None:
        """A switch proved ``model`` before publishing it (``switching.verify``)."""


class Observers:
    """Every registered observer behind one :class:`ManagerObserver`; a failing one never reaches a request."""

    def __init__(self) -> None:
        self._observers: list[ManagerObserver] = []

    def add(self, observer: ManagerObserver) -> None:
        """Tell ``observer`` about events from now on."""
        self._observers.append(observer)

    def switch_attempted(self, attempt: SwitchAttempt) -> None:
        self._call(lambda observer: observer.switch_attempted(attempt))

    def request_waited(self, model: str, seconds: float, *, admitted: bool) -> None:
        self._call(lambda observer: observer.request_waited(model, seconds, admitted=admitted))

    def request_aborted(self, model: str) -> None:
        self._call(lambda observer: observer.request_aborted(model))

    def model_idle_unloaded(self, model: str) -> None:
        self._call(lambda observer: observer.model_idle_unloaded(model))

    def engine_died(self, model: str, cause: str) -> None:
        self._call(lambda observer: observer.engine_died(model, cause))

    def engine_restarted(self, model: str, *, ok: bool) -> None:
        self._call(lambda observer: observer.engine_restarted(model, ok=ok))

    def model_verified(self, model: str, verification: Verification) -> None:
        self._call(lambda observer: observer.model_verified(model, verification))

    def _call(self, event: Callable[[ManagerObserver], None]) -> None:
        for observer in self._observers:
            try:
                event(observer)
            except Exception:
                logger.exception("observer %r failed", observer)
