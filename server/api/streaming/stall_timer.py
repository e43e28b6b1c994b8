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

    One loop timer per stream, not one per chunk: :meth:`arm` and :meth:`disarm` only note when the hand-over
    under way began; the timer, when it comes due, fires if that hand-over is as old as the timeout, and otherwise
    waits until it would be (or, between chunks, lets the next :meth:`arm` start it again). A chunk's hand-over
    costs a clock read, not a timer scheduled and cancelled.

    Args:
        timeout_s: Seconds a chunk may take to be taken; 0 or infinite: never fires.
        on_stall: Awaited once, in a task of its own (the stream itself is parked in ``send``).
    """

    def __init__(self, timeout_s: float, on_stall: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._timeout_s = timeout_s
        self._on_stall = on_stall
        self._watching = 0 < timeout_s < float("inf")
        self._since: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self.stalled = False

    def arm(self) -> None:
        """A chunk is being handed over from now."""
        if not self._watching or self.stalled:
            return
        loop = asyncio.get_running_loop()
        self._since = loop.time()
        if self._handle is None:
            self._handle = loop.call_at(self._since + self._timeout_s, self._check)

    def disarm(self) -> None:
        """The chunk was taken."""
        self._since = None

    def close(self) -> None:
        """The stream ends: nothing is watched any more."""
        self._since = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        if self._since is None:
            return  # between chunks: the next hand-over starts the timer again
        loop = asyncio.get_running_loop()
        due = self._since + self._timeout_s
        if loop.time() < due:
            self._handle = loop.call_at(due, self._check)  # a later hand-over: wait until it is as old
            return
        self.stalled = True
        self._task = loop.create_task(self._on_stall(), name="stalled stream")
