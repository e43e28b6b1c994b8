"""A ``background: true`` Response holds its model like any request until it ends, and a switch ends it visibly.

vLLM answers a background create at once (status ``queued``; with ``stream: true``, a stream that reads the
response's events as they come) and generates in a task of the model's Responses serving object. Were its lease
released with that answer (or with the end of that stream), a switch would neither wait for it nor stop it: the
response would go on generating on a model no longer active (or die with its engine, its status still
``queued``). So the lease stays held until the background task ends, whoever reads it: a streaming reader that
goes away (or stalls) only stops reading, as in OpenAI's and vLLM's semantics, and the response can be retrieved
whole. Its abort hook, which a switch whose drain timeout ran out (or an unload, or the engine's death) calls,
ends the response as ``failed`` with that error as OpenAI's ``error`` object, visible to
``GET /v1/responses/{id}`` (while the model's engine lives); so does a cancel.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from server.api.admission.request_admission import AdmittedRequest, Holder, ServingBundle
from server.engine import EngineError
from server.frontend import BundleResult, JsonResult

__all__ = ["hold_background_response"]

logger = logging.getLogger("turnout.api")

#: The watchers of background responses still running (a task is kept only while it runs).
_watchers: set[asyncio.Task[None]] = set()


def _error_object(error: EngineError | None) -> dict[str, Any]:
    if error is None:
        return {"code": "engine_error", "message": "The response was ended by the server."}
    return {"code": error.code, "message": error.message}


def hold_background_response(admitted: AdmittedRequest, result: BundleResult) -> bool:
    """Keep ``admitted``'s lease until its background response ends, when ``result`` started one.

    A streamed background response (``stream: true`` too) keeps it past its stream: the stream's end leaves it.

    Returns:
        Whether the response's watcher holds the lease too (the lease then ends with the response, at the latest).
    """
    background = isinstance(admitted.body, dict) and admitted.body.get("background") is True
    if not background or (isinstance(result, JsonResult) and result.status_code != 200):
        return False  # not a background response, or one vLLM refused
    lease = admitted.lease
    bundle: ServingBundle = lease.bundle
    response_id = lease.request_id  # vLLM's response id is the request id it was given

    async def end_with_error() -> None:
        # Lease.abort sets aborted_by before it calls the hook.
        if await bundle.fail_background(response_id, _error_object(lease.aborted_by)):
            logger.info("background response %s ended: %s", response_id, lease.aborted_by)
        await bundle.abort(response_id)  # a streamed one's engine requests, as for any stream

    lease.abort_hook = end_with_error

    async def watch() -> None:
        try:
            await bundle.background_finished(response_id)
        finally:
            admitted.let_go(Holder.BACKGROUND)

    admitted.hold_for(Holder.BACKGROUND)
    watcher = asyncio.create_task(watch(), name=f"background-{response_id}")
    _watchers.add(watcher)
    watcher.add_done_callback(_watchers.discard)
    return True
