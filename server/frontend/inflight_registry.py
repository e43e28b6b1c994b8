"""Which engine requests each of our requests has running, so that they can be aborted.

vLLM's serving classes derive the engine request ids themselves (`chatcmpl-{id}`, `cmpl-{id}-{i}` per prompt,
`embd-{id}-{i}` per input, extra ids for chunked inputs and beam search), so instead of re-deriving them we
record what they actually pass to the engine: the serving classes get a `RecordingEngineClient`
(`recording_client.py`), and a bundle call runs inside `InflightRegistry.collect(request_id)`. The entry being
recorded is a context variable, so concurrent requests on the same event loop never see each other's entries.

An engine request id is known before the engine has the request: vLLM's `generate()` is an async generator
that only submits when first iterated (for a stream, when the client reads its first chunk), and `abort()` of
an id the engine does not have yet does nothing. So aborting marks the request as doomed as well, and each
recorded stream aborts its engine request itself as soon as the engine has it.

Nothing here imports vLLM.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["InflightEntry", "InflightRegistry", "collecting_entry"]

_Abort = Callable[[list[str]], Awaitable[None]]


@dataclass
class InflightEntry:
    """One of our requests: its live engine request ids, and whether it was aborted."""

    engine_ids: set[str] = field(default_factory=set)
    doomed: bool = False


_collecting: ContextVar[InflightEntry | None] = ContextVar("turnout_inflight_entry", default=None)


def collecting_entry() -> InflightEntry | None:
    """The entry of the bundle call running in this context, or None outside bundle calls."""
    return _collecting.get()


class InflightRegistry:
    """Maps our request ids to the engine request ids they currently have running.

    Invariants: an entry exists from the start of a bundle call until its response is complete (non-streaming)
    or its stream is exhausted or closed; an engine id is in the entry from the moment vLLM creates the engine
    request's output stream until that stream finishes; a doomed entry stays doomed.
    """

    def __init__(self, abort: _Abort) -> None:
        self._abort = abort
        self._by_request: dict[str, InflightEntry] = {}

    @contextmanager
    def collect(self, request_id: str) -> Iterator[None]:
        """Record, under `request_id`, the engine requests started in this context."""
        if request_id in self._by_request:
            # vLLM's abort() by external id would hit both requests, so a reused id is a bug upstream.
            raise ValueError(f"request id {request_id!r} is already in flight in this bundle")
        entry = self._by_request[request_id] = InflightEntry()
        token = _collecting.set(entry)
        try:
            yield
        finally:
            _collecting.reset(token)

    def release(self, request_id: str) -> None:
        """Forget `request_id` (idempotent)."""
        self._by_request.pop(request_id, None)

    async def abort(self, request_ids: Iterable[str]) -> tuple[str, ...]:
        """Abort these requests' engine work: what runs now, and what they submit later.

        Returns:
            The engine request ids aborted now (those submitted later abort themselves).
        """
        entries = [entry for request_id in request_ids if (entry := self._by_request.get(request_id))]
        for entry in entries:
            entry.doomed = True
        engine_ids = sorted(set().union(*(entry.engine_ids for entry in entries)))
        if engine_ids:
            await self._abort(engine_ids)
        return tuple(engine_ids)
