"""The OpenAI ingress: a Litestar app that reads ``model`` from the body and calls the node deployment with it as
the multiplexed model id (Ray routes to a replica that holds the model), streaming the answer through.

It also serves the cluster view (``/v1/models``, ``/admin/status``) and the admin switch, which can name a
replica. Ray Serve runs the app's lifespan (``serve.ingress``), where the ingress finds the registry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get, post, route
from litestar.datastructures import State
from litestar.response import Stream
from ray import serve

from server.api import ApiSettings
from server.api.auth import AdminGuard
from server.api.errors import ANTHROPIC_API, EXCEPTION_HANDLERS, OPENAI_API, RESPONSES_API, ApiShape, error_response
from server.api.forms import form_body_limit
from server.cluster.asgi_bridge import ForwardedRequest
from server.cluster.errors import ReplicaLost, ReplicaUnknown
from server.cluster.registry import registry_handle
from server.cluster.view import merged_models, replica_summaries

__all__ = ["TurnoutIngress", "build_ingress_app"]

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


def _model_of(body: bytes, default: str | None) -> str | None:
    """The body's ``model`` (the default model when it names none); None for a body that is not a JSON object."""
    try:
        decoded = msgspec.json.decode(body) if body else None
    except msgspec.DecodeError:
        return default
    model = decoded.get("model") if isinstance(decoded, dict) else None
    return model if isinstance(model, str) and model else default


async def _requested_model(request: Request[Any, Any, Any], body: bytes, default: str | None) -> str | None:
    """The model a POST names: a form's ``model`` field (the speech routes' multipart forms), else the JSON body's."""
    media_type, _ = request.content_type
    if media_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        model = (await request.form()).get("model")  # Litestar parses the body already read
        return model if isinstance(model, str) and model else default
    return _model_of(body, default)


def build_ingress_app(node: Any, settings: ApiSettings, default_model: str | None) -> Litestar:
    """The ingress app around the node deployment's handle."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.registry = registry_handle(serve.get_replica_context().app_name)
        app.state.started_at = time.time()
        logger.info("turnout ingress started")
        try:
            yield
        finally:
            app.state.stopped = True

    async def reports(state: State) -> dict[str, dict[str, Any]]:
        view: dict[str, dict[str, Any]] = await state.registry.view.remote(STALE_S)
        return view

    @get("/health")
    async def health(state: State) -> dict[str, Any]:
        return {"status": "ok", "replicas": len(await reports(state))}

    @get("/v1/models")
    async def models(state: State) -> dict[str, Any]:
        return merged_models(await reports(state), int(time.time()))

    @get("/admin/status", guards=[AdminGuard(settings)])
    async def status(state: State) -> dict[str, Any]:
        return {
            "ingress": {"lifespan_started": "started_at" in state, "started_at": state.get("started_at")},
            "replicas": replica_summaries(await reports(state)),
        }

    @post("/v1/models/switch", guards=[AdminGuard(settings)], status_code=200)
    async def switch(data: dict[str, Any], state: State) -> Response[Any]:
        model, replica = data.get("model"), data.get("replica")
        if not isinstance(model, str):
            return error_response(400, "model is required (a string)", param="model")
        if replica is None:
            answer = await node.options(multiplexed_model_id=model).switch.remote(model)
        elif replica not in await reports(state):
            raise ReplicaUnknown(str(replica))
        else:
            try:
                answer = await state.registry.command.remote(replica, "switch", {"model": model}, SWITCH_TIMEOUT_S)
            except TimeoutError:
                raise ReplicaUnknown(str(replica)) from None
        return Response(answer["body"].encode(), status_code=answer["status"], media_type="application/json")

    # As large as the largest body a node's route takes (a speech upload); each node route applies its own limit.
    @route("/{path:path}", http_method=_METHODS, request_max_body_size=form_body_limit())
    async def forward(request: Request[Any, Any, Any], path: str) -> Response[Any]:
        body = await request.body()
        # The node's app is mounted at its root: the application's route prefix (ASGI's root_path) goes.
        full, root = request.scope["path"], request.scope.get("root_path", "")
        own_path = full[len(root) :] if root and full.startswith(root) else full
        forwarded: ForwardedRequest = {
            "method": request.method,
            "path": own_path,
            "query_string": request.scope["query_string"],
            "headers": list(request.scope["headers"]),
            "body": body,
        }
        model = await _requested_model(request, body, default_model) if request.method == "POST" else None
        handle = node.options(stream=True, multiplexed_model_id=model or "")
        items = handle.handle.remote(forwarded)
        try:
            start = await items.__anext__()
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
        debug=False,
    )


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
        options: ``default_model``, and ``admin_token_env``/``dev`` for the admin routes.
    """

    def __init__(self, node: Any, options: Mapping[str, Any]) -> None:
        import os

        token_env = str(options.get("admin_token_env", "TURNOUT_ADMIN_TOKEN"))
        self._settings = ApiSettings(
            admin_token=os.environ.get(token_env) or None,
            admin_token_env=token_env,
            dev_mode=bool(options.get("dev", False)),
        )
        self._node = node
        self._default = options.get("default_model")

    def __serve_build_asgi_app__(self) -> Litestar:
        return build_ingress_app(self._node, self._settings, self._default)


TurnoutIngressDeployment = serve.ingress()(TurnoutIngress)
