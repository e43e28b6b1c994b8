"""The ingress's gate: a request passes the edge checks, is authenticated, its body bounded and its model name
resolved before the ingress places it on a replica (Ray's multiplexing loads, and may evict, the model it is placed
by).

Every check is the node's own: its edge checks (``Host``, cross-site, content type: ``EdgePolicy``, with the body
kind of the node's route), its route table and guards (``server/api/route_table.py``), its key scopes
(``key_scopes.allowed_model``) and its name resolver (``model_names``), over the same settings and models the node
is built from (``EdgeParts``). An unknown, hidden or unauthenticated name is answered here and touches no replica.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request

from server.api import EdgePolicy, RouteTable, allowed_model, check_request_bounds, resolve_model_name
from server.cluster.parts import EdgeParts
from server.engine import ModelNotFound

__all__ = ["IngressGate", "Placement"]

#: The media types a speech route's form comes in (the rest are JSON bodies).
_FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the ingress sends an admitted request.

    Attributes:
        model: The multiplexed model id: the model's own name, or "" for a request that needs no model (an admin
            or ops route, a path the node does not have, a body the node will refuse as malformed).
        body: The request's body, read within its route's limit.
    """

    model: str
    body: bytes


class _Unreadable(Exception):
    """The body names its model in no readable way: the node answers it (400) without a model."""


class IngressGate:
    """Checks a request as the node that answers it would, before the ingress places it."""

    def __init__(self, edge: EdgeParts) -> None:
        self._edge = edge
        self._routes = RouteTable(edge.settings)
        self._policy = EdgePolicy.of(edge.settings)

    async def admit(self, request: Request[Any, Any, Any], path: str) -> Placement:
        """Authenticate ``request`` (as for the node's route at ``path``), read its body within the route's limit,
        and resolve the model it is served by.

        Raises:
            PermissionDeniedException: A ``Host`` the node does not answer to, a browser's cross-site request, or
                an admin route with admin routes disabled: 403.
            HTTPException: A body of another content type than the node's route reads: 415.
            NotAuthorizedException: No valid key (or admin token, on an admin route): 401.
            RequestEntityTooLarge: The body is past the route's limit (413), refused before it is read whole.
            ModelNotFound: The name is no model's, or not one the key may use (the same 404 for both).
            NoModelForKey: The body names no model, and the key may not use the default one.
            RequestOutOfBounds: The body asks its model for more than the model's bounds allow (400), so that no
                replica loads a model for a request it would refuse.
        """
        route = self._routes.route(path, request.method)
        self._policy.check(request.scope, route.body_kind if route is not None else None)
        if route is None:
            return Placement("", b"")  # the node answers 404/405 (or its docs) without a body or a model
        bound = route.bind(request)
        await route.authorize(bound)
        body = await bound.body()
        if not route.admits_model:
            return Placement("", body)
        try:
            requested, fields = await _requested_model(bound, body)
        except _Unreadable:
            return Placement("", body)
        model = self._model(bound, requested)
        if model:
            check_request_bounds(fields, self._edge.models[model])
        return Placement(model, body)

    def _model(self, request: Request[Any, Any, Any], requested: str | None) -> str:
        models, default = self._edge.models, self._edge.default_model
        name = resolve_model_name(models, requested)
        target = allowed_model(request, requested, name, default) or default
        if target is None:
            return ""
        if target not in models:
            raise ModelNotFound(str(requested), models)
        return target


async def _requested_model(request: Request[Any, Any, Any], body: bytes) -> tuple[str | None, Mapping[str, Any]]:
    """The model a body names (None: none), and the body's fields; a speech route's form's ``model`` field, else
    the JSON body's."""
    media_type, _ = request.content_type
    if media_type in _FORMS:
        decoded: Any = await request.form()
        model = decoded.get("model")
    else:
        try:
            decoded = msgspec.json.decode(body)
        except msgspec.DecodeError:  # an empty body too
            raise _Unreadable from None
        if not isinstance(decoded, dict):
            raise _Unreadable
        model = decoded.get("model")
    if model is not None and not isinstance(model, str):
        raise _Unreadable
    return model or None, decoded
