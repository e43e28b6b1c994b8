"""The Litestar app factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext

from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin

from server import __version__
from server.api.admission import ServingBundle
from server.api.auth import AdminGuard, ApiKeyGuard
from server.api.controllers import (
    AdminController,
    OpenAIController,
    OpsController,
    SwitchController,
    TokenizeController,
)
from server.api.errors import EXCEPTION_HANDLERS
from server.api.metrics import metrics_registry
from server.api.settings import ApiSettings
from server.engine import EngineManager

__all__ = ["create_app"]

logger = logging.getLogger("turnout.api")


def _no_status(_: str) -> AbstractContextManager[None]:
    return nullcontext()


def create_app(
    manager: EngineManager[ServingBundle],
    settings: ApiSettings,
    *,
    default_model: str | None = None,
    loading_status: Callable[[str], AbstractContextManager[None]] | None = None,
) -> Litestar:
    """Build the app around ``manager``.

    Args:
        manager: Owns the engines; the app only reads its published bundle through admission.
        settings: Secrets, dev mode and timeouts.
        default_model: Loaded at start-up (lifespan) and the engines are shut down at exit; None when the caller
            manages the manager's life itself.
        loading_status: Shows progress while the default model loads (the CLI's rich spinner).
    """

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        if default_model is not None:
            with (loading_status or _no_status)(default_model):
                await manager.initialize(default_model)
        try:
            yield
        finally:
            if default_model is not None:
                await manager.shutdown()

    registry = metrics_registry(manager)
    openai_routes = Router(
        path="/", route_handlers=[OpenAIController, TokenizeController], guards=[ApiKeyGuard(settings)]
    )
    admin_routes = Router(path="/", route_handlers=[SwitchController, AdminController], guards=[AdminGuard(settings)])
    return Litestar(
        route_handlers=[openai_routes, admin_routes, OpsController],
        dependencies={
            "manager": Provide(lambda: manager, sync_to_thread=False),
            "metrics_registry": Provide(lambda: registry, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=[lifespan],
        state=State({"manager": manager}),
        openapi_config=OpenAPIConfig(
            title="Turnout",
            version=__version__,
            path="/docs",
            render_plugins=[SwaggerRenderPlugin(path="/")],
        ),
        debug=False,
    )
