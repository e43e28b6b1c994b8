"""Every route a node serves, with its guards: the one list a new controller joins (a serving route of vLLM's is an
entry of the table of operations instead, ``server/frontend/operations.py``, which ``operation_routes`` serves).

The app serves it (``server/api/app.py``) and the Ray ingress checks a request against the same list before it places
it (``server/api/route_table.py``).
"""

from __future__ import annotations

from litestar import Router
from litestar.types import ControllerRouterHandler

from server.api.controllers.admin import AdminController, SwitchController
from server.api.controllers.bundle_routes import operation_routes
from server.api.controllers.openai import OpenAIController, tokenizer_info
from server.api.controllers.ops import OpsController
from server.api.controllers.reload import ReloadController
from server.api.controllers.serving_routes import ResponsesController
from server.api.controllers.status_page import StatusPageController
from server.api.edge import AdminGuard, ApiKeyGuard, KeyRing
from server.api.openapi import ADMIN_SECURITY, API_KEY_SECURITY
from server.api.settings import ApiSettings

__all__ = ["node_routes"]


def node_routes(
    settings: ApiSettings, keys: KeyRing, *, reloadable_keys: bool = False
) -> list[ControllerRouterHandler]:
    """Every route of a node's app, with its guards: the app serves them, and the Ray ingress checks a request
    against them before it places it (``server/api/route_table.py``).

    ``reloadable_keys``: ``keys`` may gain keys by a reload, so the serving routes get the key guard even while
    none is configured.
    """
    # Without an API key there is nothing to check; Litestar copies the handler per guard per request, so the
    # OpenAI routes get the guard only when a key is set, or may be set by a reload (a shared ring).
    keyed = settings.keyed
    openai_routes = Router(
        path="/",
        route_handlers=[
            OpenAIController,
            # The serving routes: one per entry of the table of operations (server/frontend/operations.py).
            *operation_routes(),
            ResponsesController,
            # vLLM registers it only when asked: it shows the tokenizer's configuration to any client.
            *([tokenizer_info] if settings.enable_tokenizer_info_endpoint else []),
        ],
        guards=[ApiKeyGuard(keys)] if keyed or reloadable_keys else None,
        security=API_KEY_SECURITY if keyed else None,
    )
    admin_routes = Router(
        path="/",
        route_handlers=[SwitchController, AdminController, ReloadController],
        guards=[AdminGuard(settings)],
        security=ADMIN_SECURITY,
    )
    return [openai_routes, admin_routes, OpsController, StatusPageController]
