"""``X-Request-Id`` on every answer (vLLM's ``--enable-request-id-headers``): the request's own, or a new one."""

from __future__ import annotations

import uuid

from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from server.profiles import REQUEST_ID

__all__ = ["add_request_id_header", "request_id_in_logs"]


def request_id_in_logs(app: ASGIApp) -> ASGIApp:
    """Middleware: the request's id (its ``X-Request-Id``, otherwise a new uuid4) in :data:`REQUEST_ID` while it is
    served, so that the JSON log lines it causes carry it (``--log-format json``); the header sent back is the
    same id."""

    async def with_request_id(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        token = REQUEST_ID.set(Headers.from_scope(scope).get("x-request-id") or uuid.uuid4().hex)
        try:
            await app(scope, receive, send)
        finally:
            REQUEST_ID.reset(token)

    return with_request_id


async def add_request_id_header(message: Message, scope: Scope) -> None:
    """An app-level ``before_send`` hook: it sees every answer, an unrouted 404 and an error included.

    As vLLM's ``XRequestIdMiddleware``: a request's ``X-Request-Id`` is echoed, otherwise a random uuid4 (hex) is
    sent, so a client or a proxy can match its logs with the server's.
    """
    if message["type"] != "http.response.start":
        return
    request_id = Headers.from_scope(scope).get("x-request-id") or REQUEST_ID.get() or uuid.uuid4().hex
    MutableScopeHeaders.from_message(message).add("X-Request-Id", request_id)
