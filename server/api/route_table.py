"""A node's routes and their guards, without a manager: what the Ray ingress checks a request against before it
places it on a replica.

The table is the node app's own route list (``controllers/routes.py``: ``node_routes``) registered on a bare
Litestar app, so a route's guards (the admin token, the API keys), its body limit and whether it admits a request
to a model are the node's, read from one place: a route added to the node is gated at the ingress the same way,
with no second list. So is the kind of body it reads, which the edge checks (``edge/checks.py``) hold the content
type to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from litestar import Litestar, Request
from litestar.connection import ASGIConnection
from litestar.di import Provide
from litestar.exceptions import MethodNotAllowedException, NotFoundException
from litestar.handlers.http_handlers import HTTPRouteHandler

from server.api.app import APP_DEPENDENCIES, REQUEST_DEPENDENCIES
from server.api.controllers import node_routes
from server.api.edge import FORM_BODY, BodyKind, KeyRing
from server.api.settings import ApiSettings

__all__ = ["NodeRoute", "RouteTable"]

#: The dependency of every route that admits a request to a model (``controllers/bundle_routes.py``).
_ADMITTED = "admitted"


def _not_here() -> Provide:
    # One provider per name: Litestar refuses one provider under two keys.
    def provide() -> NoReturn:
        raise RuntimeError("the route table only routes; its handlers never run")

    return Provide(provide, sync_to_thread=False)


@dataclass(frozen=True, slots=True)
class NodeRoute:
    """One route of a node's app, as the ingress sees it.

    Attributes:
        handler: The node's route handler (never called here).
    """

    handler: HTTPRouteHandler

    @property
    def admits_model(self) -> bool:
        """Whether the route serves a request with a model (its body names it, or the active one serves it)."""
        return _ADMITTED in self.handler.resolve_dependencies()

    @property
    def body_kind(self) -> BodyKind:
        """What the route's body must be (``edge.EdgePolicy.check``): a form route's multipart form, else JSON."""
        return "form" if self.handler.opt.get(FORM_BODY) else "json"

    @property
    def form_api(self) -> str | None:
        """A form route's API (``Transcriptions``): its model must have ``forms.FORM_TASK``; None for the rest."""
        api: str | None = self.handler.opt.get(FORM_BODY)
        return api

    @property
    def body_limit(self) -> int | None:
        """The most bytes of body the route takes (None: no limit)."""
        return self.handler.resolve_request_max_body_size()

    def bind(self, request: Request[Any, Any, Any]) -> Request[Any, Any, Any]:
        """``request`` as this route gets it: reading its body enforces this route's limit, as Litestar does on the
        node (a ``Content-Length`` past it is refused before a byte is read, a longer stream as soon as it passes
        it: 413 either way)."""
        return Request({**request.scope, "route_handler": self.handler}, request.receive, request.send)

    async def authorize(self, connection: ASGIConnection[Any, Any, Any, Any]) -> None:
        """Run the route's guards on ``connection``, as the node's app does (a key's scope is recorded on it).

        Raises:
            NotAuthorizedException: A missing or invalid key or admin token (401).
            PermissionDeniedException: Admin routes without a configured token (403).
        """
        for guard in self.handler.resolve_guards():
            outcome = guard(connection, self.handler)  # Litestar made each one async: an awaitable
            if outcome is not None:
                await outcome


class RouteTable:
    """The node app's routes for ``settings`` (the same guards, built by the same function)."""

    def __init__(self, settings: ApiSettings) -> None:
        self._app = Litestar(
            route_handlers=node_routes(settings, KeyRing.of(settings)),
            dependencies={name: _not_here() for name in (*APP_DEPENDENCIES, *REQUEST_DEPENDENCIES)},
            openapi_config=None,
            debug=False,
        )

    def admitting_routes(self) -> list[tuple[str, NodeRoute]]:
        """Every route of the node that admits a request to a model, with its path (its path template)."""
        return [
            (route.path, NodeRoute(handler))
            for route in self._app.routes
            for handler in getattr(route, "route_handlers", ())
            if isinstance(handler, HTTPRouteHandler) and NodeRoute(handler).admits_model
        ]

    def route(self, path: str, method: str) -> NodeRoute | None:
        """The node's route for ``method path``; None where the node has none (or not for that method)."""
        try:
            _, handler, *_ = self._app.asgi_router.handle_routing(path=path, method=method)
        except (NotFoundException, MethodNotAllowedException):
            return None
        if not isinstance(handler, HTTPRouteHandler):
            return None
        return NodeRoute(handler)
