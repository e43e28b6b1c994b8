"""A non-streaming request whose client leaves is cancelled, as vLLM's own server does (``with_cancellation``).

The body has been read by then, so the next ASGI ``receive`` returns only when the client disconnects
(``http.disconnect``; uvicorn tells at once, when the socket closes). :func:`unless_client_leaves` runs the work
against that: a client that leaves first has its work cancelled, and the caller aborts its engine request and
ends its lease, so nothing generates for nobody and no switch waits for it. A stream needs none of this: Litestar
watches its disconnect itself and closes the stream, whose ``finally`` aborts and releases.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

from litestar.types import Receive

from server.api.errors import ClientLeft

__all__ = ["unless_client_leaves"]

T = TypeVar("T")


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(receive: Receive | None, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client disconnects first: then ``work`` is cancelled and :class:`ClientLeft`
    raised (with ``receive`` None, the work as it is)."""
    if receive is None:
        return await work
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    left: asyncio.Future[Any] = asyncio.ensure_future(_disconnect(receive))
    try:
        await asyncio.wait({task, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        left.cancel()
        with contextlib.suppress(BaseException):
            await left
    if task.cancelled() and left.done() and not left.cancelled() and left.exception() is None:
        raise ClientLeft()
    return task.result()
