"""The Litestar app factory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any, Final

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from server import __version__
from server.api.admission import ServingBundle
from server.api.controllers import StoredResponses, node_routes
from server.api.edge import (
    EdgeChecks,
    EdgePolicy,
    KeyRing,
    add_request_id_header,
    provide_viewer,
    request_id_in_logs,
)
from server.api.errors import EXCEPTION_HANDLERS
from server.api.metrics import HTTP_METRICS, metrics_registry
from server.api.openapi import document_request_bodies, security_components
from server.api.reload import NO_PROFILE_FILE, Reloader, ReloadUnavailable
from server.api.settings import ApiSettings
from server.engine import EngineManager

__all__ = ["APP_DEPENDENCIES", "REQUEST_DEPENDENCIES", "BackgroundTask", "create_app"]

#: Runs while the server serves (after the default model loaded); cancelled at shutdown. ``serve --watch`` uses it.
BackgroundTask = Callable[[], Awaitable[None]]
_TEMPLATES = Path(__file__).parent / "templates"
#: The app-wide dependencies the routes name (``create_app`` gives their values; the ingress's route table none).
APP_DEPENDENCIES: Final = (
    "manager",
    "metrics_registry",
    "reloader",
    "reload_unavailable",
    "api_settings",
    "key_ring",
    "stored_responses",
)
#: The per-request dependencies: who asks an unguarded route, for the model names it may see.
REQUEST_DEPENDENCIES: Final = {"viewer": provide_viewer}

logger = logging.getLogger("turnout.api")


def _no_status(_: str) -> AbstractContextManager[None]:
    return nullcontext()


def create_app(
    manager: EngineManager[ServingBundle],
    settings: ApiSettings,
    *,
    default_model: str | None = None,
    loading_status: Callable[[str], AbstractContextManager[None]] | None = None,
    reloader: Reloader | ReloadUnavailable | None = None,
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
        reloader: Applies changed profiles (``POST /admin/reload``); a :class:`ReloadUnavailable` says why this
            server cannot (a Ray replica), None that it has no profile file.
        background: Tasks that run while the app serves (the profile watcher); cancelled at exit.
        request_schemas: The request bodies' JSON Schemas for ``/openapi.json`` (vLLM's request models, from
            ``vllm_adapter.request_body_schemas``); None documents them as plain JSON objects.
        key_ring: The API keys (the assembled stack's), shared with ``reloader`` so that a reload applies changed
            keys at once; None: ``settings``' keys, for the app's life.
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
    keys = key_ring or KeyRing.of(settings)
    # A reload goes to the reloader; where there is none, the refusal says why (two values: Litestar checks a
    # dependency's type, and a union of two classes is not one it can check).
    reloads = reloader if isinstance(reloader, Reloader) else None
    refusal = reloader if isinstance(reloader, ReloadUnavailable) else NO_PROFILE_FILE
    parts = (manager, registry, reloads, refusal, settings, keys, stored_responses)
    values = dict(zip(APP_DEPENDENCIES, parts, strict=True))
    app = Litestar(
        route_handlers=node_routes(settings, keys, reloadable_keys=reloads is not None and key_ring is not None),
        # Constants for the app's life: resolved once, then served from Litestar's cache on every request.
        dependencies={
            **{name: _constant(value) for name, value in values.items()},
            **{name: Provide(provider) for name, provider in REQUEST_DEPENDENCIES.items()},
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
        # Outermost: a request the edge checks refuse is counted too.
        middleware=[HTTP_METRICS.middleware, EdgeChecks(EdgePolicy.of(settings)), request_id_in_logs],
        before_send=[add_request_id_header] if settings.enable_request_id_headers else [],
        debug=False,
    )
    document_request_bodies(app, request_schemas)
    return app


def _constant(value: Any) -> Provide:
    return Provide(lambda: value, sync_to_thread=False, use_cache=True)


async def _logged(run: BackgroundTask) -> None:
    try:
        await run()
    except asyncio.CancelledError:
        raise
    except Exception:  # a background task failing must not take the server down, but it must be seen
        logger.exception("background task %s failed", getattr(run, "__name__", run))
