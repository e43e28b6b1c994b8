"""OpenAI's Responses routes (create, retrieve, cancel): the serving routes with handlers of their own, since they
keep which model (and key) holds each stored response. Every other serving route is an entry of the table of
operations (``server/frontend/operations.py``), built by ``bundle_routes.py``. A model whose tasks lack a route
answers 404 naming the model, as `vllm serve` (which would not register it) does.
``tests/api/test_route_parity.py`` holds the routes equal to vLLM's.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Stream

from server.api.admission import AdmittedRequest, Holder, ServingBundle, hold_background_response, install_abort_hook
from server.api.controllers.bundle_routes import ADMITTED
from server.api.controllers.stored_responses import StoredResponses
from server.api.edge import allowed_model, request_holder, request_scope, visible
from server.api.errors import RESPONSES_API
from server.api.openapi import request_body
from server.api.streaming import answer, respond
from server.engine import EngineManager
from server.frontend import WITHHELD, Operation

__all__ = ["ResponsesController"]


class ResponsesController(Controller):
    """``/v1/responses``: OpenAI's Responses API, with the admitted model's chat template and parsers."""

    path = "/v1/responses"
    tags = ["OpenAI"]

    @post("/", operation_class=request_body("ResponsesRequest"), dependencies=ADMITTED, status_code=200)
    async def create_response(
        self,
        request: Request[Any, Any, Any],
        admitted: NamedDependency[Any],
        stored_responses: NamedDependency[StoredResponses],
    ) -> Response[Any] | Stream:
        """Create a response (``stream: true`` for SSE events); its id is kept to find its model (and key) again.

        A ``background: true`` response holds its model until it ends; a switch ends it as ``failed``.
        ``admitted`` is a ``waiting.AdmittedOrWaiting`` (declared Any: msgspec refuses a union of two dataclasses).
        """
        holder = request_holder(request)

        async def create(admitted: AdmittedRequest) -> Any:
            lease, body = admitted.lease, admitted.body
            previous = body.get("previous_response_id")
            if isinstance(previous, str) and stored_responses.withheld(previous, holder):
                # Another key's response: the bundle checks the body as for any create, then answers as vLLM does
                # an unknown previous id (checked first, a bad body would tell a withheld id from an unknown one).
                body = {**body, WITHHELD: True}
            stored_responses.record(lease.request_id, lease.model, lease.bundle, holder)
            result = await admitted.bundle.call("responses.create", body, lease.request_id)
            hold_background_response(admitted, result)
            return result

        return await answer(admitted, create, RESPONSES_API)

    @get("/{response_id:str}")
    async def retrieve_response(
        self,
        request: Request[Any, Any, Any],
        response_id: FromPath[str],
        manager: NamedDependency[EngineManager[ServingBundle]],
        stored_responses: NamedDependency[StoredResponses],
        starting_after: FromQuery[int | None] = None,
        stream: FromQuery[bool] = False,
    ) -> Response[Any] | Stream:
        """A stored response (``stream=true`` replays its events) from the model that created it."""
        args = {"response_id": response_id, "starting_after": starting_after, "stream": stream}
        return await _on_owner(request, manager, stored_responses, response_id, "responses.retrieve", args)

    @post("/{response_id:str}/cancel", status_code=200)
    async def cancel_response(
        self,
        request: Request[Any, Any, Any],
        response_id: FromPath[str],
        manager: NamedDependency[EngineManager[ServingBundle]],
        stored_responses: NamedDependency[StoredResponses],
    ) -> Response[Any] | Stream:
        """Cancel a background response of the model that created it."""
        args = {"response_id": response_id}
        return await _on_owner(request, manager, stored_responses, response_id, "responses.cancel", args)


async def _on_owner(
    request: Request[Any, Any, Any],
    manager: EngineManager[ServingBundle],
    stored: StoredResponses,
    response_id: str,
    operation: Operation,
    args: dict[str, Any],
) -> Response[Any] | Stream:
    """Run a stored-response operation on the bundle that stores ``response_id``, or 404 saying why it cannot.

    A response of a model the API key may not use, or created with another key, is looked up as an id this
    server never made: the active model's bundle answers vLLM's own "not found" (``withheld``), by the path an
    unknown id takes.
    """
    holder = request_holder(request)
    owner = stored.owner(response_id, holder)
    if owner is not None and not visible(request, owner.model):
        owner = None
    if owner is None and holder is not None:
        args = {**args, **_withheld(response_id)}
    active = manager.active_model
    owner_model = owner.model if owner is not None else None
    name = allowed_model(request, owner_model, owner_model, active, manager.switching_to)
    if owner is not None and owner.model != active:
        # Never load a model just to look something up: its store went with its engine anyway. A key limited to
        # some models is not told the name of an active model outside them.
        shown = f" (the active model is {active!r})" if active is not None and visible(request, active) else ""
        raise NotFoundException(
            f"Response {response_id!r} was created by model {owner.model!r}, which is not loaded now{shown}; "
            "stored responses live in their model's engine and end with it."
        )
    lease = await manager.acquire(name)
    install_abort_hook(lease)
    admitted = AdmittedRequest(manager=manager, lease=lease, body=args, scope=request_scope(request))
    try:
        if owner is not None and owner.bundle() is not lease.bundle:
            raise NotFoundException(
                f"Response {response_id!r} was stored by an earlier engine of model {owner.model!r}; the model "
                "was switched away and reloaded since, and stored responses end with their engine."
            )
        result = await lease.bundle.call(operation, args, lease.request_id)
        return respond(admitted, result, RESPONSES_API)
    finally:
        admitted.let_go(Holder.ROUTE)


def _withheld(response_id: str) -> dict[str, Any]:
    """A stored-response operation's arguments that the bundle answers as for an id vLLM's store lacks."""
    return {"response_id": response_id, WITHHELD: True}
