"""Ends a stream whose client stopped reading: ``server.stream_stall_timeout_s`` without taking a byte.

uvicorn has no send timeout: a client that stops reading (a hung proxy, a paused process) parks the stream's
``send`` once the socket buffers are full, and with it the request's lease, until the TCP connection dies. That
holds a ``max_concurrent_requests`` place, and every switch away from the model waits out its whole drain for it.

A stream's generator is suspended at its ``yield`` while the server sends the chunk; a :class:`StallTimer` armed
there fires when that takes longer than the timeout (nginx's ``send_timeout`` is the same idea, 60 s by default),
and calls the stream's ``on_stall``, which aborts the engine request and releases the lease at once. A stream
waiting for its engine is not stalled: only time spent handing a chunk over counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["StallTimer"]


class StallTimer:
    """Fires ``on_stall`` once when one hand-over (between :meth:`arm` and :meth:`disarm`) outlives ``timeout_s``.

    Args:
        timeout_s: Seconds a chunk may take to be taken; 0 or infinite: never fires.
        on_stall: Awaited once, in a task of its own (the stream itself is parked in ``send``).
    """

    def __init__(self, timeout_s: float, on_stall: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._timeout_s = timeout_s
        self._on_stall = on_stall
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self.stalled = False

    def arm(self) -> None:
        """A chunk is being handed over from now."""
        if 0 < self._timeout_s < float("inf") and not self.stalled:
            self._handle = asyncio.get_running_loop().call_later(self._timeout_s, self._fire)

    def disarm(self) -> None:
        """The chunk was taken (or the stream ends)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self.stalled = True
        self._task = asyncio.get_running_loop().create_task(self._on_stall(), name="stalled stream")
