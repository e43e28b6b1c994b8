"""A request's lease on one model: the engine and frontend bundle it was admitted to, for its whole life.

A lease pins a :class:`Published` snapshot, so a request never sees a later model's engine or bundle even when a
switch publishes a new one while it streams. The frontend gives the lease a way to abort its engine requests (or
records their ids on it), so a switch can abort exactly those when its drain timeout runs out.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from server.engine.errors import RequestAbortedBySwitch

__all__ = ["Lease", "Published"]

B = TypeVar("B")


@dataclass(frozen=True, eq=False)
class Published(Generic[B]):
    """The active model, its engine and its bundle, replaced as one object by a switch."""

    model: str
    engine: Any
    bundle: B


@dataclass(eq=False)
class Lease(Generic[B]):
    """One admitted request.

    Attributes:
        published: What the request was admitted to.
        request_id: Turnout's id for the request (the frontend derives vLLM request ids from it).
        engine_request_ids: vLLM request ids started for this request, for targeted aborts.
        abort_hook: Aborts this request's engine work, set by the frontend, which knows the vLLM request ids
            its serving classes start (and can abort one that has not reached the engine yet).
        aborted_by: Set when a switch aborted the request; the API turns it into the client's error.
    """

    published: Published[B]
    request_id: str = field(default_factory=lambda: f"tn-{uuid.uuid4().hex}")
    engine_request_ids: set[str] = field(default_factory=set)
    abort_hook: Callable[[], Awaitable[object]] | None = None
    aborted_by: RequestAbortedBySwitch | None = None

    @property
    def model(self) -> str:
        """The model the request was admitted for."""
        return self.published.model

    @property
    def engine(self) -> Any:
        """The engine the request must use."""
        return self.published.engine

    @property
    def bundle(self) -> B:
        """The frontend bundle the request must use."""
        return self.published.bundle

    def track(self, engine_request_id: str) -> None:
        """Record a vLLM request id started on behalf of this request."""
        self.engine_request_ids.add(engine_request_id)

    def raise_if_aborted(self) -> None:
        """Raise the switch error if a switch aborted this request."""
        if self.aborted_by is not None:
            raise self.aborted_by
