"""A request's lease on one model: the frontend bundle it was admitted to, for its whole life.

A lease pins a :class:`Published` snapshot, so a request never sees a later model's bundle even when a switch
publishes a new one while it streams. The API layer gives every lease an abort hook when it admits the request
(the bundle knows the engine request ids its serving classes start); a switch whose drain timeout runs out calls
that hook. It is the only way a switch aborts a request; a dead engine's requests end through it too.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from server.engine.types.errors import EngineError

__all__ = ["AbortHook", "Lease", "Published"]

B = TypeVar("B")
#: Aborts one request's engine work, including engine requests it has not submitted yet.
AbortHook = Callable[[], Awaitable[object]]


@dataclass(frozen=True, eq=False)
class Published(Generic[B]):
    """The active model and its bundle, replaced as one object by a switch."""

    model: str
    bundle: B


@dataclass(eq=False)
class Lease(Generic[B]):
    """One admitted request.

    Attributes:
        published: What the request was admitted to.
        request_id: Turnout's id for the request (the frontend derives vLLM request ids from it).
        abort_hook: Aborts this request's engine work; installed by the API layer at admission.
        aborted_by: Set when a switch (or a forced unload) aborted the request or its engine died; the API
            turns it into the client's error.
    """

    published: Published[B]
    request_id: str = field(default_factory=lambda: f"tn-{uuid.uuid4().hex}")
    abort_hook: AbortHook | None = None
    aborted_by: EngineError | None = None

    @property
    def model(self) -> str:
        """The model the request was admitted for."""
        return self.published.model

    @property
    def bundle(self) -> B:
        """The frontend bundle the request must use."""
        return self.published.bundle

    async def abort(self, error: EngineError) -> None:
        """Mark the request aborted (by a switch, a forced unload, or its engine's death), then abort its engine work.

        The flag comes first: by the time the engine ends the request, the API knows why it ended.
        """
        self.aborted_by = error
        if self.abort_hook is not None:
            await self.abort_hook()

    def raise_if_aborted(self) -> None:
        """Raise the error that aborted this request, if any."""
        if self.aborted_by is not None:
            raise self.aborted_by
