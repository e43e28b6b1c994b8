"""The Litestar app factory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

from litestar import Litestar, Router
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from server import __version__
from server.api.admission import ServingBundle
from server.api.auth import AdminGuard, ApiKeyGuard, provide_viewer
from server.api.controllers import (
    AdminController,
    MessagesController,
    OpenAIController,
    OpsController,
    ReloadController,
    ResponsesController,
    ServingController,
    SpeechController,
    StatusPageController,
    SwitchController,
    TokenizeController,
    tokenizer_info,
)
from server.api.edge import EdgeChecks
from server.api.errors import EXCEPTION_HANDLERS
from server.api.key_ring import KeyRing, KeySet
from server.api.metrics import metrics_registry
from server.api.openapi import ADMIN_SECURITY, API_KEY_SECURITY, document_request_bodies, security_components
from server.api.reloader import Reloader
from server.api.request_id import add_request_id_header
from server.api.settings import ApiSettings
from server.api.stored_responses import StoredResponses
from server.engine import EngineManager

__all__ = ["BackgroundTask", "create_app"]

#: Runs while the server serves (after the default model loaded); cancelled at shutdown. ``serve --watch`` uses it.
BackgroundTask = Callable[[], Awaitable[None]]
_TEMPLATES = Path(__file__).parent / "templates"

logger = logging.getLogger("turnout.api")


def _no_status(_: str) -> AbstractContextManager[None]:
    return nullcontext()


def create_app(
    manager: EngineManager[ServingBundle],
    settings: ApiSettings,
    *,
    default_model: str | None = None,
    loading_status: Callable[[str], AbstractContextManager[None]] | None = None,
    reloader: Reloader | None = None,
    background: Sequence[BackgroundTask] = (),
    request_schemas: Mapping[str, Mapping[str, Any]] | None = None,
    key_ring: KeyRing | None = None,
) -> Litestar:
    """Build the app around ``manager``.

    Args:
        manager: Owns the engines; the app only reads its published bundle through admission.
        settings: Secrets, dev mode and timeouts.
        default_model: Loaded at start-up (lifespan) and the engines are shut down at exit; None when the caller
            manages the manager's life itself.
        loading_status: Shows progress while the default model loads (the CLI's rich spinner).
        reloader: Applies changed profiles (``POST /admin/reload``); None when the server has no profile file.
        background: Tasks that run while the app serves (the profile watcher); cancelled at exit.
        request_schemas: The request bodies' JSON Schemas for ``/openapi.json`` (vLLM's request models, from
            ``vllm_adapter.request_body_schemas``); None documents them as plain JSON objects.
        key_ring: The API keys, shared with ``reloader`` so that a reload applies changed keys at once; None:
            ``settings``' keys, for the app's life.
    """

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        if default_model is not None:
            with (loading_status or _no_status)(default_model):
                await manager.initialize(default_model)
        tasks = [asyncio.create_task(_logged(run)) for run in background]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
            if default_model is not None:
                await manager.shutdown()

    registry = metrics_registry(manager)
    stored_responses = StoredResponses()
    keys = key_ring or KeyRing(KeySet(api_key=settings.api_key, scoped=settings.scoped_keys))
    # Without an API key there is nothing to check; Litestar copies the handler per guard per request, so the
    # OpenAI routes get the guard only when a key is set, or may be set by a reload (a shared ring).
    keyed = settings.keyed
    openai_routes = Router(
        path="/",
        route_handlers=[
            OpenAIController,
            TokenizeController,
            ResponsesController,
            MessagesController,
            ServingController,
            SpeechController,
            # vLLM registers it only when asked: it shows the tokenizer's configuration to any client.
            *([tokenizer_info] if settings.enable_tokenizer_info_endpoint else []),
        ],
        guards=[ApiKeyGuard(keys)] if keyed or key_ring is not None else None,
        security=API_KEY_SECURITY if keyed else None,
    )
    admin_routes = Router(
        path="/",
        route_handlers=[SwitchController, AdminController, ReloadController],
        guards=[AdminGuard(settings)],
        security=ADMIN_SECURITY,
    )
    app = Litestar(
        route_handlers=[openai_routes, admin_routes, OpsController, StatusPageController],
        # Constants for the app's life: resolved once, then served from Litestar's cache on every request.
        dependencies={
            "manager": Provide(lambda: manager, sync_to_thread=False, use_cache=True),
            "metrics_registry": Provide(lambda: registry, sync_to_thread=False, use_cache=True),
            "reloader": Provide(lambda: reloader, sync_to_thread=False, use_cache=True),
            "api_settings": Provide(lambda: settings, sync_to_thread=False, use_cache=True),
            "key_ring": Provide(lambda: keys, sync_to_thread=False, use_cache=True),
            # Per request: who asks an unguarded route, for the model names it may see.
            "viewer": Provide(provide_viewer),
            "stored_responses": Provide(lambda: stored_responses, sync_to_thread=False, use_cache=True),
        },
        template_config=TemplateConfig(directory=_TEMPLATES, engine=JinjaTemplateEngine),
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=[lifespan],
        state=State({"manager": manager}),
        openapi_config=OpenAPIConfig(
            title="Turnout",
            version=__version__,
            path="/docs",
            render_plugins=[SwaggerRenderPlugin(path="/")],
            components=security_components(),
        ),
        cors_config=CORSConfig(**settings.cors) if settings.cors is not None else None,
        middleware=[EdgeChecks(settings.allowed_hosts)],
        before_send=[add_request_id_header] if settings.enable_request_id_headers else [],
        debug=False,
    )
    document_request_bodies(app, request_schemas)
    return app


async def _logged(run: BackgroundTask) -> None:
    try:
        await run()
    except asyncio.CancelledError:
        raise
    except Exception:  # a background task failing must not take the server down, but it must be seen
        logger.exception("background task %s failed", getattr(run, "__name__", run))
