"""Runs one forwarded HTTP request through an ASGI app in-process and yields its response piece by piece.

A node replica serves through Turnout's own app (guards, admission, error shapes, stream framing), not a copy of
it; httpx's ASGI transport would buffer the whole body, so a stream would reach the ingress only at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypedDict

from litestar.types import ASGIApp, Message

__all__ = ["ForwardedRequest", "call_app", "response_start"]

#: Seconds the app gets to finish after it sent the last body chunk.
_FINISH_S = 5.0


class ForwardedRequest(TypedDict):
    """What the ingress forwards of a request (plain data: it crosses Ray's object store)."""

    method: str
    path: str
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


def response_start(status: int, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The first item a node yields: the status and headers."""
    return {"status": status, "headers": headers}


async def call_app(app: ASGIApp, request: ForwardedRequest) -> AsyncIterator[dict[str, Any]]:
    """Yield ``{"status", "headers"}`` once, then ``{"body": bytes}`` per chunk the app sends.

    When the consumer stops early (the client went away, the ingress died), the app sees ``http.disconnect``
    and its task is cancelled, so the request's lease ends as it does for a client of ``turnout serve``.
    """
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request["method"],
        "scheme": "http",
        "path": request["path"],
        "raw_path": request["path"].encode(),
        "root_path": "",
        "query_string": request["query_string"],
        "headers": request["headers"],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    sent: asyncio.Queue[Message | None] = asyncio.Queue()
    disconnected = asyncio.Event()
    body_given = False

    async def receive() -> dict[str, Any]:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": request["body"], "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await sent.put(message)

    async def run() -> None:
        try:
            await app(scope, receive, send)  # type: ignore[arg-type]  # plain dicts, as ASGI's messages are
        finally:
            await sent.put(None)

    task = asyncio.create_task(run())
    complete = False
    try:
        while (message := await sent.get()) is not None:
            if message["type"] == "http.response.start":
                yield response_start(message["status"], [(bytes(k), bytes(v)) for k, v in message["headers"]])
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    yield {"body": bytes(message["body"])}
                if not message.get("more_body", False):
                    complete = True
                    break
    finally:
        disconnected.set()
        if not complete:
            task.cancel()
        # A finished response's task only has its after-response hooks left: give them a moment, bounded.
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, _FINISH_S)
