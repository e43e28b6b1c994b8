"""Slow and many clients at the HTTP server: header and body read timeouts and a cap on open connections.

uvicorn times out an idle keep-alive connection (``timeout_keep_alive``) but not one that is sending a request:
a client that sends half a request line, or a request's headers and then its body a byte every few seconds, holds
its connection for ever, and enough of them (a slow-loris, a slow POST) hold every file descriptor. uvicorn's
``limit_concurrency`` answers 503 to everything past its count, health checks and clients already served
included, so an attacker who holds the connections starves those too.

:class:`ConnectionLimits` is the limits' one definition (from the profile's ``server.*``), and
:func:`limited_protocol` gives uvicorn's httptools protocol (the one ``turnout serve`` runs) its rules:

- **Header timeout.** From the moment a connection opens, and from the first byte of each next request, the
  request line and headers must be complete within ``server.header_timeout_s``; otherwise the connection is
  closed.
- **Body timeout.** While a request's body is incomplete, ``server.body_timeout_s`` may pass between two reads of
  it (nginx's ``client_body_timeout``): a large upload sent steadily takes as long as it needs, a body that stops
  or trickles slower is answered 408 (when nothing was answered yet) and its connection closed. The time the
  server itself stops reading (the app has not taken what arrived, or a pipelined request waits its turn) does
  not count. Answers are not timed here (``server.stream_stall_timeout_s`` times a stream's reader).
- **Connection cap.** At most ``server.max_connections`` connections are open. A new connection past the cap
  closes one that has not been served: first the oldest that never completed a request's headers (a slow-loris,
  or a client that connected and said nothing), then the one whose request body has come slowest so far in bytes
  a second (a slow body; a steady upload comes at its link's speed, so it is the last of them; a burst of new
  connections does not make it the slowest), then the one idle longest
  between two requests (HTTP lets a server close an idle keep-alive connection; its client opens a new one).
  Connections whose request is complete and in flight are never closed for a newcomer; when all are, the
  newcomer gets a 503 with ``Retry-After`` and is closed.

So a flood of half-sent requests only ever evicts its own kind: a health check on a new connection gets in
(evicting one of them) and has until the flood has replaced every other such connection to send its request, and
a client that was served keeps its connection while it has a request in flight. A reverse proxy in front adds
per-client limits that one process cannot: see the README's deployment notes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.api.errors import retry_after_header
from server.frontend import error_body

if TYPE_CHECKING:
    import asyncio

    from server.profiles import ServerSection

__all__ = ["ConnectionLimits", "OpenConnections", "limited_protocol"]

logger = logging.getLogger("turnout.api")

#: Seconds between two warnings about the cap (a flood would otherwise log a line per connection).
_WARN_EVERY_S = 10.0


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    """The limits an HTTP server holds its client connections to (the profile's ``server.*``).

    Attributes:
        header_timeout_s: Seconds a request's line and headers may take to arrive (``server.header_timeout_s``).
        body_timeout_s: Seconds that may pass between two reads of an incomplete request body
            (``server.body_timeout_s``).
        max_connections: Most connections open at once (``server.max_connections``).
    """

    header_timeout_s: float
    body_timeout_s: float
    max_connections: int

    @classmethod
    def of(cls, server: ServerSection) -> ConnectionLimits:
        """The limits a profile's ``server`` section sets."""
        return cls(
            header_timeout_s=server.header_timeout_s,
            body_timeout_s=server.body_timeout_s,
            max_connections=server.max_connections,
        )


class OpenConnections:
    """One server's open connections, oldest first, kept under ``max_connections``.

    Args:
        max_connections: Most connections open at once.
    """

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._open: dict[_LimitedProtocol, None] = {}  # oldest first
        self._evicted = self._refused = 0
        self._warned_at = float("-inf")

    @property
    def count(self) -> int:
        """How many connections are open now."""
        return len(self._open)

    def opened(self, connection: _LimitedProtocol) -> bool:
        """Count ``connection`` in; False when the cap leaves it no room (every connection has a complete request
        in flight): the caller refuses it."""
        if len(self._open) >= self.max_connections:
            victim = self._victim()
            if victim is None:
                self._refused += 1
                self._warn()
                return False
            self._evicted += 1
            self._warn()
            self.closed(victim)
            victim.close_now()
        self._open[connection] = None
        return True

    def closed(self, connection: _LimitedProtocol) -> None:
        """Count ``connection`` out (idempotent)."""
        self._open.pop(connection, None)

    def _victim(self) -> _LimitedProtocol | None:
        """The connection a newcomer past the cap replaces (the module's order); None when every connection has a
        complete request in flight."""
        bodies: list[_LimitedProtocol] = []
        idle: list[_LimitedProtocol] = []
        for connection in self._open:  # oldest first
            if not connection.completed_headers:
                return connection
            if connection.body_read_at is not None and not connection.flow.read_paused:
                bodies.append(connection)  # the client owes the body (a paused read is the server's wait)
            elif connection.idle_since is not None:
                idle.append(connection)
        if bodies:
            now = time.monotonic()
            return min(bodies, key=lambda connection: connection.body_rate(now))  # the oldest of equals
        return min(idle, key=lambda connection: connection.idle_since or 0.0, default=None)

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned_at < _WARN_EVERY_S:
            return
        self._warned_at = now
        logger.warning(
            "%d connections open (server.max_connections): %d closed that had not been served, %d refused with "
            "503 (every connection busy) since the last such warning",
            len(self._open),
            self._evicted,
            self._refused,
        )
        self._evicted = self._refused = 0


class _ReadingFlow(FlowControl):
    """uvicorn's flow control that says when the server resumes reading (the body timer restarts then)."""

    def __init__(self, transport: asyncio.Transport, on_resume: Callable[[], None]) -> None:
        super().__init__(transport)
        self._on_resume = on_resume

    def resume_reading(self) -> None:
        paused = self.read_paused
        super().resume_reading()
        if paused:
            self._on_resume()


class _LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under :class:`ConnectionLimits` (made by :func:`limited_protocol`)."""

    limits: ConnectionLimits
    open_connections: OpenConnections
    #: The answer to a connection past the cap while every connection is busy (set by :func:`limited_protocol`).
    refusal: bytes
    #: The answer to a request whose body stopped before anything was answered.
    body_timeout_answer: bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        #: Whether a request's headers ever arrived whole on this connection.
        self.completed_headers = False
        #: When its last answer was sent, while it waits idle for the next request (None: not idle).
        self.idle_since: float | None = None
        #: While a request's body is incomplete: when bytes of it last arrived (or its headers, or the server
        #: resumed reading); None when no body is owed.
        self.body_read_at: float | None = None
        self._body_started_at = 0.0
        self._body_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _ReadingFlow(transport, self._reading_resumed)
        if not self.open_connections.opened(self):
            self.transport.write(self.refusal)
            self.transport.close()
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.open_connections.closed(self)
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.idle_since = None
        super().data_received(data)
        if self.transport.is_closing():
            return
        # Bytes between requests that begin none (blank lines) must not hold the connection either: uvicorn's
        # keep-alive timer is off from the first byte, so the header timer takes over until headers complete.
        between_requests = self.cycle is None or self.cycle.response_complete
        if between_requests and self.body_read_at is None and self.timeout_keep_alive_task is None:
            self._arm_header_timer()
        if self.body_read_at is not None and self._body_timer is None:
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timed_out)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self.completed_headers = True
        super().on_headers_complete()
        self.body_read_at = self._body_started_at = time.monotonic()  # until the message completes
        self._body_bytes = 0

    def on_body(self, body: bytes) -> None:
        self.body_read_at = time.monotonic()
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.body_read_at = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline and not self.transport.is_closing():
            self.idle_since = time.monotonic()

    def handle_websocket_upgrade(self) -> None:
        # The connection becomes a WebSocket's (its own protocol and limits): it leaves these.
        self.open_connections.closed(self)
        self._cancel_timers()
        self.body_read_at = None
        super().handle_websocket_upgrade()

    def body_rate(self, now: float) -> float:
        """Bytes a second the request's body has come at so far (over at least a second, so a connection that
        just sent its headers is not the fastest): a slow body's is tiny, a steady upload's is its link's."""
        return self._body_bytes / max(now - self._body_started_at, 1.0)

    def close_now(self) -> None:
        """Close the connection (it is evicted for a newcomer past the cap)."""
        self._cancel_timers()
        if not self.transport.is_closing():
            self.transport.close()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._headers_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_header_timer()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            logger.debug("closing %s: no complete request headers in %g s", self.client, self.limits.header_timeout_s)
            self.transport.close()

    def _reading_resumed(self) -> None:
        # The wait was the server's: the client's time between reads starts again now.
        if self.body_read_at is not None and not self.transport.is_closing():
            self.body_read_at = time.monotonic()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timed_out)

    def _body_timed_out(self) -> None:
        # One timer per body, not one per read: it fires, then waits out what is left since the last read.
        self._body_timer = None
        if self.body_read_at is None or self.transport.is_closing() or self.flow.read_paused:
            return  # complete, closed, or the server is not reading (resuming restarts the timer)
        left = self.body_read_at + self.limits.body_timeout_s - time.monotonic()
        if left > 0:
            self._body_timer = self.loop.call_later(left, self._body_timed_out)
            return
        logger.debug("closing %s: no request body bytes in %g s", self.client, self.limits.body_timeout_s)
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not self.pipeline:
            # The app sees the client gone (its answer would go nowhere); the client sees why.
            cycle.disconnected = True
            cycle.message_event.set()
            self.transport.write(self.body_timeout_answer)
        self.transport.close()


def limited_protocol(limits: ConnectionLimits, connections: OpenConnections | None = None) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class under ``limits`` (``uvicorn.Config(http=...)``), one per server.

    Args:
        limits: The limits.
        connections: The server's open connections (a test reads them); default: a new count.
    """
    attributes = {
        "limits": limits,
        "open_connections": connections or OpenConnections(limits.max_connections),
        "refusal": _refusal(),
        "body_timeout_answer": _body_timeout_answer(limits.body_timeout_s),
    }
    return type("LimitedHttpToolsProtocol", (_LimitedProtocol,), attributes)


def _closing_answer(status: str, body: dict[str, Any], *extra: str) -> bytes:
    """A whole HTTP/1.1 answer that closes its connection, with a JSON body."""
    encoded = msgspec.json.encode(body)
    head = "".join(
        [
            f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(encoded)}\r\n",
            *(f"{line}\r\n" for line in extra),
            "connection: close\r\n\r\n",
        ]
    )
    return head.encode() + encoded


def _refusal() -> bytes:
    """The whole answer to a connection past the cap while every connection is busy: a 503 in the API's error
    shape, with ``Retry-After``, closing the connection (sent before its request is read: there is no room to)."""
    body = error_body(
        503,
        "The server has as many connections open as it takes (server.max_connections), each with a request in "
        "flight; retry shortly.",
        code="too_many_connections",
    )
    return _closing_answer("503 Service Unavailable", body, f"retry-after: {retry_after_header(503, None)}")


def _body_timeout_answer(timeout_s: float) -> bytes:
    """The answer to a request whose body stopped arriving for ``timeout_s`` before anything was answered."""
    body = error_body(
        408,
        f"The request body stopped arriving: no bytes of it for {timeout_s:g} s (server.body_timeout_s).",
        code="request_timeout",
    )
    return _closing_answer("408 Request Timeout", body)
