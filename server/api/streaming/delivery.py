"""How a response or a stream leaves the server: the one module every serving route answers through.

:func:`answer` turns what a route asked of its bundle into a Litestar response: a JSON body (a switch's or a dead
engine's error in its place), or an SSE stream. A stream holds the request's lease until its last event
(:func:`leased_stream`: Litestar runs a yield dependency's cleanup before it sends a streamed body), ends with
the API's error event when a switch or the engine's death cut it short, is ended when its client takes nothing
for the stall timeout, and gets vLLM's keep-alive comment when idle (:func:`with_keep_alive`). A stream still
waiting for its model (``waiting.py``) is framed here too, and joins the same path once admitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from litestar import MediaType, Response
from litestar.response import Stream

from server.api.admission import AdmittedRequest, Holder
from server.api.errors import OPENAI_API, ApiShape, ClientLeft
from server.api.streaming.disconnects import unless_client_leaves
from server.api.streaming.stall_timer import StallTimer
from server.engine import EngineError
from server.frontend import JsonResult, StreamResult

if TYPE_CHECKING:
    from server.api.streaming.waiting import WaitingRequest

__all__ = [
    "KEEP_ALIVE_COMMENT",
    "SSE_HEADERS",
    "BundleCall",
    "answer",
    "event_stream",
    "leased_stream",
    "respond",
    "with_keep_alive",
]

logger = logging.getLogger("turnout.api")

#: vLLM's keep-alive comment (``vllm.entrypoints.serve.utils.sse_keep_alive``).
KEEP_ALIVE_COMMENT: Final = ": keep-alive\n\n"
#: Headers of every SSE response: no caching, and no buffering by nginx (which would hold the comments back).
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
#: How vLLM's serving classes start the error event that ends a stream that failed (``json.dumps`` of an
#: ``ErrorResponse``, in ``create_streaming_error_response``).
_ERROR_EVENT = 'data: {"error": '

#: What a route asks of the bundle its request was admitted to.
BundleCall = Callable[[AdmittedRequest], Awaitable[Any]]


async def answer(
    admission: AdmittedRequest | WaitingRequest, call: BundleCall, api: ApiShape
) -> Response[Any] | Stream:
    """The response to an admission: ``call``'s result, or for a stream still waiting, an SSE body that waits."""
    if not isinstance(admission, AdmittedRequest):
        return _sse(admission.events(call, api))
    try:
        result = await unless_client_leaves(admission.receive, call(admission))
    except ClientLeft:
        # Its engine request is aborted now (a cancelled vLLM call may leave it to the engine's next step), and
        # the lease ends as the route returns.
        lease = admission.lease
        await admission.bundle.abort(lease.request_id)
        logger.info("request %s to model %s cancelled: its client left", lease.request_id, lease.model)
        raise
    return respond(admission, result, api)


def respond(
    admitted: AdmittedRequest, result: JsonResult | StreamResult, api: ApiShape = OPENAI_API
) -> Response[Any] | Stream:
    """A JSON response, or an SSE stream that owns the lease until its last event; errors in ``api``'s shape."""
    if isinstance(result, StreamResult):
        return _sse(event_stream(admitted, result, api))
    # A non-streaming request cut short by a switch gets the switch error (503, Retry-After), not a partial answer;
    # one whose engine died gets 503 engine_died rather than vLLM's 500.
    admitted.lease.raise_if_aborted()
    failure = admitted.manager.failure_of(admitted.lease) if result.status_code >= 500 else None
    if failure is not None:
        raise failure
    if result.status_code >= 400 and api.translate_error is not None:
        return Response(api.translate_error(result.status_code, result.payload), status_code=result.status_code)
    body = result.body if admitted.asked_as is None else admitted.as_asked(result.body.decode()).encode()
    return Response(body, status_code=result.status_code, media_type=MediaType.JSON)


def event_stream(admitted: AdmittedRequest, result: StreamResult, api: ApiShape) -> AsyncIterator[str]:
    """The SSE events of a bundle's stream: it takes the lease over from the route (:func:`leased_stream`), with
    keep-alive comments when idle."""
    admitted.hand_to_stream()
    stream = leased_stream(admitted, result.chunks, result.aclose, api)
    return with_keep_alive(stream, admitted.keep_alive_s)


def _sse(events: AsyncIterator[str]) -> Stream:
    return Stream(events, media_type="text/event-stream", headers=SSE_HEADERS)


async def leased_stream(
    admitted: AdmittedRequest, chunks: AsyncIterator[str], close: Any, api: ApiShape = OPENAI_API
) -> AsyncIterator[str]:
    """Forward a bundle's SSE chunks while holding the lease; end with the switch error if one aborted it.

    The error event and the end marker are ``api``'s (OpenAI's ``data:`` error and ``[DONE]`` by default).
    """
    lease = admitted.lease
    stall = StallTimer(admitted.stall_timeout_s, lambda: _end_stalled(admitted))
    try:
        try:
            async for chunk in chunks:
                if stall.stalled:
                    return  # its client took nothing for the stall timeout: nothing more is sent
                if lease.aborted_by is not None:
                    break  # the rest (an 'abort' finish) would hide why the stream ended
                if chunk.startswith(_ERROR_EVENT) and (failure := admitted.manager.failure_of(lease)) is not None:
                    # vLLM's own error event for a dead engine ("EngineCore encountered an issue", a 500) says
                    # neither why nor that a retry helps: the manager's error (engine_died, 503) replaces it.
                    for event in api.error_ending(admitted.shown(failure)):
                        yield event
                    return
                stall.arm()
                yield admitted.as_asked(chunk)
                stall.disarm()
        except Exception as exc:  # the engine died under the stream: end it with an error event, not a reset
            logger.warning("stream %s failed: %s", lease.request_id, type(exc).__name__)
            failure = admitted.manager.failure_of(lease)
            for event in api.error_ending(
                admitted.shown(failure or EngineError("The stream failed; see the server log."))
            ):
                yield event
            return
        if lease.aborted_by is not None:
            for event in api.error_ending(admitted.shown(lease.aborted_by)):
                yield event
    finally:
        stall.close()
        # Closing aborts the engine request when the client went away before the end.
        await close()
        admitted.let_go(Holder.STREAM)


async def _end_stalled(admitted: AdmittedRequest) -> None:
    """A stream's client took no bytes for its stall timeout: abort its engine request and end its lease now."""
    lease = admitted.lease
    logger.warning(
        "stream %s of model %s ended: its client took no bytes for %g s (server.stream_stall_timeout_s)",
        lease.request_id,
        lease.model,
        admitted.stall_timeout_s,
    )
    await admitted.bundle.abort(lease.request_id)
    admitted.let_go(Holder.STREAM)


def with_keep_alive(chunks: AsyncIterator[str], interval_s: float) -> AsyncIterator[str]:
    """``chunks``, with :data:`KEEP_ALIVE_COMMENT` whenever none came for ``interval_s`` (0: ``chunks`` itself, with
    no generator in between: a layer every chunk would pass through for nothing)."""
    if not 0 < interval_s < float("inf"):
        return chunks
    return _keep_alive(chunks, interval_s)


async def _keep_alive(chunks: AsyncIterator[str], interval_s: float) -> AsyncIterator[str]:
    """As vLLM's ``with_sse_keep_alive``: one retained ``anext`` task, observed with ``asyncio.wait`` so that a
    timeout never cancels the stream mid-step."""
    iterator = aiter(chunks)
    step: asyncio.Future[str] = asyncio.ensure_future(anext(iterator))
    try:
        while True:
            done, _ = await asyncio.wait({step}, timeout=interval_s)
            if not done:
                yield KEEP_ALIVE_COMMENT
                continue
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
            step = asyncio.ensure_future(anext(iterator))
    finally:
        step.cancel()
        with contextlib.suppress(BaseException):
            await step
        close = getattr(iterator, "aclose", None)
        if close is not None:
            with contextlib.suppress(BaseException):
                await close()
