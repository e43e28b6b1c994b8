"""Turns a bundle's result into a Litestar response, keeping the request's lease alive for a stream."""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Response
from litestar.response import Stream

from server.api.disconnects import ClientLeft, unless_client_leaves
from server.api.errors import OPENAI_API, ApiShape
from server.api.request_admission import AdmittedRequest, leased_stream
from server.api.waiting import SSE_HEADERS, BundleCall, WaitingRequest, with_keep_alive
from server.frontend import JsonResult, StreamResult

__all__ = ["answer", "respond"]

logger = logging.getLogger("turnout.api")


async def answer(
    admission: AdmittedRequest | WaitingRequest, call: BundleCall, api: ApiShape
) -> Response[Any] | Stream:
    """The response to an admission: ``call``'s result, or for a stream still waiting, an SSE body that waits."""
    if isinstance(admission, WaitingRequest):
        return Stream(admission.events(call, api), media_type="text/event-stream", headers=SSE_HEADERS)
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
        admitted.hand_to_stream()
        stream = leased_stream(admitted, result.chunks, result.aclose, api)
        return Stream(
            with_keep_alive(stream, admitted.keep_alive_s), media_type="text/event-stream", headers=SSE_HEADERS
        )
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
