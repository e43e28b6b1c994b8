"""The OpenAI ingress: a Litestar app that gates each request as a node would (``gate.py``: the edge checks, key
or admin token, body limit, the model's name resolved and in the key's scope), then calls the node deployment with
the model as the multiplexed model id (Ray routes to a replica that holds the model), streaming the answer through.

It also serves the cluster view (``/v1/models``, ``/admin/status``) and the admin switch, which can name a
replica. ``turnout ray-serve`` serves the app from its own HTTP server (:func:`ingress_app`); behind Ray's HTTP
proxy it is a deployment (:class:`TurnoutIngress`, whose lifespan Ray Serve runs). Past the node deployment's
``max_queued_requests`` a request gets 503 with ``Retry-After`` (``ReplicasBusy``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response, get, post, route
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.params import JSONBody
from litestar.response import Stream
from ray import serve
from ray.serve.exceptions import BackPressureError

from server.api import (
    ANTHROPIC_API,
    ANTHROPIC_EXCEPTION_HANDLERS,
    EDGE_CHECKED_ELSEWHERE,
    EXCEPTION_HANDLERS,
    OPENAI_API,
    RESPONSES_API,
    AdminGuard,
    ApiKeyGuard,
    ApiShape,
    EdgeChecks,
    EdgePolicy,
    KeyRing,
    error_response,
    is_admin,
    resolve_model_name,
    visible,
)
from server.cluster.application_options import PROFILE_EDGE
from server.cluster.asgi_bridge import ForwardedRequest
from server.cluster.errors import ReplicaLost, ReplicasBusy, ReplicaUnknown
from server.cluster.gate import IngressGate
from server.cluster.parts import EdgeParts, import_builder
from server.cluster.registry import registry_handle
from server.cluster.view import merged_models, replica_summaries
from server.engine import EngineError, ModelNotFound

__all__ = ["TurnoutIngress", "build_ingress_app", "ingress_app"]

logger = logging.getLogger("turnout.cluster")

#: A replica whose last report is older than this is left out of the view (it reports every 0.5 s).
STALE_S = 3.0
#: Most seconds the admin switch waits for a named replica.
SWITCH_TIMEOUT_S = 600.0
#: Response headers a streamed copy must not repeat: the ingress's server frames the body itself.
_HOP_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"connection"})
_METHODS: list[Any] = ["GET", "POST", "PUT", "DELETE", "PATCH"]


def _shape(path: str) -> ApiShape:
    if path.startswith("/v1/messages"):
        return ANTHROPIC_API
    if path.startswith("/v1/responses"):
        return RESPONSES_API
    return OPENAI_API


async def ingress_app(app: str, options: Mapping[str, Any], edge_builder: str = PROFILE_EDGE) -> Litestar:
    """The ingress app of the Serve application ``app`` (its node deployment: ``node_application``) for a server
    outside Ray's (``turnout ray-serve``'s, in the driver): the edge built by ``edge_builder`` from ``options``
    here, as each node builds its own, and the nodes called through their deployment handle."""
    edge: EdgeParts = await import_builder(edge_builder)(options)
    return build_ingress_app(serve.get_app_handle(app), edge, app)


def build_ingress_app(node: Any, edge: EdgeParts, app: str) -> Litestar:
    """The ingress app around the node deployment's handle, gating by ``edge`` (what the nodes are built from);
    ``app`` is the Serve application's name (its cluster registry's)."""
    settings = edge.settings
    gate = IngressGate(edge)
    key_guards = [ApiKeyGuard(KeyRing.of(settings))] if settings.keyed else None

    @asynccontextmanager
    async def lifespan(litestar: Litestar) -> AsyncIterator[None]:
        litestar.state.registry = registry_handle(app)
        litestar.state.started_at = time.time()
        logger.info("turnout ingress started")
        try:
            yield
        finally:
            litestar.state.stopped = True

    async def reports(state: State) -> dict[str, dict[str, Any]]:
        view: dict[str, dict[str, Any]] = await state.registry.view.remote(STALE_S)
        return view

    @get("/health")
    async def health(state: State) -> dict[str, Any]:
        return {"status": "ok", "replicas": len(await reports(state))}

    @get("/v1/models", guards=key_guards)
    async def models(request: Request[Any, Any, Any], state: State) -> dict[str, Any]:
        # A key limited to some models sees only those, and only the admin the folders, as on one node.
        return merged_models(
            await reports(state),
            int(time.time()),
            sees=lambda name: visible(request, name),
            admin=is_admin(request, settings),
        )

    @get("/admin/status", guards=[AdminGuard(settings)])
    async def status(state: State) -> dict[str, Any]:
        return {
            "ingress": {"lifespan_started": "started_at" in state, "started_at": state.get("started_at")},
            "replicas": replica_summaries(await reports(state)),
        }

    @post("/v1/models/switch", guards=[AdminGuard(settings)], status_code=200)
    async def switch(data: JSONBody[dict[str, Any]], state: State) -> Response[Any]:
        requested, replica = data.get("model"), data.get("replica")
        if not isinstance(requested, str):
            return error_response(400, "model is required (a string)", param="model")
        model = resolve_model_name(edge.models, requested) or requested
        if model not in edge.models:
            raise ModelNotFound(requested, edge.models)  # before Ray's multiplexer tries to load the name
        if replica is None:
            try:
                answer = await node.options(multiplexed_model_id=model).switch.remote(model)
            except BackPressureError as busy:
                raise _busy(busy) from None
        elif replica not in await reports(state):
            raise ReplicaUnknown(str(replica))
        else:
            try:
                answer = await state.registry.command.remote(replica, "switch", {"model": model}, SWITCH_TIMEOUT_S)
            except TimeoutError:
                raise ReplicaUnknown(str(replica)) from None
        return Response(answer["body"].encode(), status_code=answer["status"], media_type="application/json")

    # The gate runs the edge checks with the body kind of the node's route (this route's own would be wrong).
    @route("/{path:path}", http_method=_METHODS, opt={EDGE_CHECKED_ELSEWHERE: True})
    async def forward(request: Request[Any, Any, Any]) -> Response[Any]:
        # The node's app is mounted at its root: the application's route prefix (ASGI's root_path) goes.
        full, root = request.scope["path"], request.scope.get("root_path", "")
        own_path = full[len(root) :] if root and full.startswith(root) else full
        try:
            placed = await gate.admit(request, own_path)
        except (EngineError, HTTPException) as refused:
            return _refusal(request, own_path, refused)
        forwarded: ForwardedRequest = {
            "method": request.method,
            "path": own_path,
            "query_string": request.scope["query_string"],
            "headers": list(request.scope["headers"]),
            "body": placed.body,
        }
        handle = node.options(stream=True, multiplexed_model_id=placed.model)
        items = handle.handle.remote(forwarded)
        try:
            start = await items.__anext__()
        except BackPressureError as busy:
            raise _busy(busy) from None
        except Exception:
            logger.exception("a replica failed before it answered")
            raise ReplicaLost() from None
        headers = {k.decode(): v.decode() for k, v in start["headers"] if k.lower() not in _HOP_HEADERS}
        return Stream(
            _rest(items, _shape(own_path), headers.get("content-type", "")),
            status_code=start["status"],
            headers=headers,
        )

    return Litestar(
        route_handlers=[health, models, status, switch, forward],
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[EdgeChecks(EdgePolicy.of(settings))],
        debug=False,
    )


def _busy(refused: BackPressureError) -> ReplicasBusy:
    """Ray's refusal past the node deployment's ``max_queued_requests`` in Turnout's error (a 503 with
    ``Retry-After``); its arguments are the queued count and the bound (``BackPressureError.__init__``)."""
    limit = refused.args[1] if len(refused.args) > 1 and isinstance(refused.args[1], int) else None
    return ReplicasBusy(limit)


def _refusal(request: Request[Any, Any, Any], path: str, refused: Exception) -> Response[Any]:
    """A request the gate refused, answered in its route's API shape (Anthropic's on the Messages routes)."""
    handlers = ANTHROPIC_EXCEPTION_HANDLERS if _shape(path) is ANTHROPIC_API else EXCEPTION_HANDLERS
    # The handler of the most specific kind (a bound's 400 names its parameter), as Litestar picks one.
    kind = next(kind for kind in type(refused).__mro__ if kind in handlers)
    response: Response[Any] = handlers[kind](request, refused)
    return response


async def _rest(items: Any, shape: ApiShape, content_type: str) -> AsyncIterator[bytes]:
    """The body chunks as the replica yields them; a stream whose replica dies ends with the API's retryable
    error event (and its end marker), never silently."""
    try:
        async for item in items:
            yield item["body"]
    except Exception:
        logger.exception("the replica serving a stream failed")
        if content_type.startswith("text/event-stream"):
            yield shape.error_event(ReplicaLost()).encode()
            if shape.done is not None:
                yield shape.done.encode()


class TurnoutIngress:
    """The ingress deployment (``serve.ingress()`` builds its app on the replica, then Ray runs its lifespan).

    Args:
        node: The node deployment's handle.
        edge_builder: The ``module:function`` that builds the edge (the nodes' builder builds theirs the same way).
        options: The options the nodes are built from (``profile``, ``dev``).
    """

    # Ray Serve awaits an async constructor (the edge builder is a coroutine); mypy knows no such thing.
    async def __init__(self, node: Any, edge_builder: str, options: Mapping[str, Any]) -> None:  # type: ignore[misc]
        self._node = node
        self._edge: EdgeParts = await import_builder(edge_builder)(options)
        self._app = serve.get_replica_context().app_name

    def __serve_build_asgi_app__(self) -> Litestar:
        return build_ingress_app(self._node, self._edge, self._app)


TurnoutIngressDeployment = serve.ingress()(TurnoutIngress)
