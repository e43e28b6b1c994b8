"""``X-Request-Id`` on every answer (vLLM's ``--enable-request-id-headers``): the request's own, or a new one."""

from __future__ import annotations

import uuid

from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.types import Message, Scope

__all__ = ["add_request_id_header"]


async def add_request_id_header(message: Message, scope: Scope) -> None:
    """An app-level ``before_send`` hook: it sees every answer, an unrouted 404 and an error included.

    As vLLM's ``XRequestIdMiddleware``: a request's ``X-Request-Id`` is echoed, otherwise a random uuid4 (hex) is
    sent, so a client or a proxy can match its logs with the server's.
    """
    if message["type"] != "http.response.start":
        return
    request_id = Headers.from_scope(scope).get("x-request-id") or uuid.uuid4().hex
    MutableScopeHeaders.from_message(message).add("X-Request-Id", request_id)
