"""Slow and many clients at ``turnout serve``'s HTTP server: a header read timeout and a cap on open connections.

uvicorn times out an idle keep-alive connection (``timeout_keep_alive``) but not one that is sending a request's
line and headers: a client that sends half a request line and then a byte every few seconds holds its connection
for ever, and enough of them (a slow-loris) hold every file descriptor. uvicorn's ``limit_concurrency`` answers 503
to everything past its count, health checks and clients already served included, so an attacker who holds the
connections starves those too.

:func:`limited_protocol` gives uvicorn's httptools protocol (the one ``turnout serve`` runs) two rules:

- **Header timeout.** From the moment a connection opens, and from the first byte of each next request, the
  request line and headers must be complete within ``server.header_timeout_s``; otherwise the connection is
  closed. Bodies are not timed here (a slow body is the app's to read), nor are answers.
- **Connection cap.** At most ``server.max_connections`` connections are open. A new connection past the cap
  closes one that has served nothing: first the oldest that never completed a request's headers (a slow-loris,
  or a client that connected and said nothing), then the one idle longest between two requests (HTTP lets a
  server close an idle keep-alive connection; its client opens a new one). Connections with a request in flight
  are never closed for a newcomer; when all are, the newcomer gets a 503 with ``Retry-After`` and is closed.

So a flood of half-open connections only ever evicts its own kind: a health check on a new connection gets in
(evicting the oldest of them) and has until the flood has replaced every other half-open connection to send its
headers, and a client that was served keeps its connection while it has a request in flight. A reverse proxy in
front adds per-client limits that one process cannot: see the README's deployment notes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.api import retry_after_header
from server.frontend import error_body

if TYPE_CHECKING:
    import asyncio

__all__ = ["ConnectionLimits", "limited_protocol"]

logger = logging.getLogger("turnout.cli")

#: Seconds between two warnings about the cap (a flood would otherwise log a line per connection).
_WARN_EVERY_S = 10.0


@dataclass(eq=False)
class ConnectionLimits:
    """The server's open connections, oldest first, and the limits they live by (one per server).

    Attributes:
        header_timeout_s: Seconds a request's line and headers may take to arrive (``server.header_timeout_s``).
        max_connections: Most connections open at once (``server.max_connections``).
    """

    header_timeout_s: float
    max_connections: int
    _open: dict[_LimitedProtocol, None] = field(default_factory=dict, init=False)  # oldest first
    _evicted: int = field(default=0, init=False)
    _refused: int = field(default=0, init=False)
    _warned_at: float = field(default=float("-inf"), init=False)

    @property
    def open_count(self) -> int:
        """How many connections are open now."""
        return len(self._open)

    def opened(self, connection: _LimitedProtocol) -> bool:
        """Count ``connection`` in; False when the cap leaves it no room (every connection has a request in
        flight): the caller refuses it."""
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
        """The connection a newcomer past the cap replaces: the oldest that never completed a request's headers,
        else the one idle longest between requests; None when every connection has a request in flight."""
        idle: list[_LimitedProtocol] = []
        for connection in self._open:  # oldest first
            if not connection.completed_headers:
                return connection
            if connection.idle_since is not None:
                idle.append(connection)
        return min(idle, key=lambda connection: connection.idle_since or 0.0, default=None)

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned_at < _WARN_EVERY_S:
            return
        self._warned_at = now
        logger.warning(
            "%d connections open (server.max_connections): %d closed that had served nothing, %d refused with "
            "503 (every connection busy) since the last such warning",
            len(self._open),
            self._evicted,
            self._refused,
        )
        self._evicted = self._refused = 0


class _LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under :class:`ConnectionLimits` (made by :func:`limited_protocol`)."""

    limits: ConnectionLimits
    #: The answer to a connection past the cap while every connection is busy (set by :func:`limited_protocol`).
    refusal: bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        #: Whether a request's headers ever arrived whole on this connection.
        self.completed_headers = False
        #: When its last answer was sent, while it waits idle for the next request (None: not idle).
        self.idle_since: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.limits.opened(self):
            self.transport.write(self.refusal)
            self.transport.close()
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.limits.closed(self)
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.idle_since = None
        super().data_received(data)
        # Bytes between requests that begin none (blank lines) must not hold the connection either: uvicorn's
        # keep-alive timer is off from the first byte, so the header timer takes over until headers complete.
        between_requests = self.cycle is None or self.cycle.response_complete
        if between_requests and self.timeout_keep_alive_task is None and not self.transport.is_closing():
            self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self.completed_headers = True
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline and not self.transport.is_closing():
            self.idle_since = time.monotonic()

    def handle_websocket_upgrade(self) -> None:
        # The connection becomes a WebSocket's (its own protocol and limits): it leaves these.
        self.limits.closed(self)
        self._cancel_header_timer()
        super().handle_websocket_upgrade()

    def close_now(self) -> None:
        """Close the connection (it is evicted for a newcomer past the cap)."""
        self._cancel_header_timer()
        if not self.transport.is_closing():
            self.transport.close()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._headers_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            logger.debug("closing %s: no complete request headers in %g s", self.client, self.limits.header_timeout_s)
            self.transport.close()


def limited_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class under ``limits`` (``uvicorn.Config(http=...)``)."""
    return type("LimitedHttpToolsProtocol", (_LimitedProtocol,), {"limits": limits, "refusal": _refusal()})


def _refusal() -> bytes:
    """The whole answer to a connection past the cap while every connection is busy: a 503 in the API's error
    shape, with ``Retry-After``, closing the connection (sent before its request is read: there is no room to)."""
    body = msgspec.json.encode(
        error_body(
            503,
            "The server has as many connections open as it takes (server.max_connections), each with a request in "
            "flight; retry shortly.",
            code="too_many_connections",
        )
    )
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: {retry_after_header(503, None)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body
