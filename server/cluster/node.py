"""The node deployment: one replica owns one accelerator set and runs Turnout's engine manager and app on it.

Ray's multiplexer decides which models a replica holds (``max_num_models_per_replica``: the most models that fit
in the memory budget together, or the strategy's count); its loader makes the model active or resident through the
manager, its eviction calls the manager's unload (``replica_models.py``). Inside the replica Turnout keeps its own
drain, memory budget and switch policy: requests go through Turnout's own app (``asgi_bridge``), as they do under
``turnout serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import msgspec
from ray import serve

from server.api import (
    ReloadUnavailable,
    RouteTable,
    RouteUnsupported,
    check_serves_form,
    create_app,
    engine_error_body,
    retry_after_header,
)
from server.cluster.asgi_bridge import ForwardedRequest, call_app, response_start
from server.cluster.parts import NodeParts, import_builder
from server.cluster.registry import registry_handle
from server.cluster.replica_models import HeldModel, ReplicaModels
from server.engine import EngineError
from server.frontend import unsupported_route_body

__all__ = ["TurnoutNode", "error_items"]

#: A replica holds no profile of its own to reload: Ray Serve built every replica from the deployed options, and a
#: reload here would change one replica of many. The whole application is redeployed instead.
REPLICA_RELOAD: Final = ReloadUnavailable(
    reason="A Ray Serve replica cannot reload its profile: redeploy the application with the changed profile "
    "(serve deploy with the new config, or restart turnout ray-serve)."
)

logger = logging.getLogger("turnout.cluster")

#: Seconds between a replica's reports to the registry (also its inbox's long-poll).
REPORT_EVERY_S = 0.5


def error_items(error: EngineError) -> list[dict[str, Any]]:
    """A Turnout error as a node's response items (OpenAI's shape; a 503 with ``Retry-After``)."""
    headers = [(b"content-type", b"application/json")]
    wait = retry_after_header(error.status_code, error.retry_after)
    if wait is not None:
        headers.append((b"retry-after", wait.encode()))
    body = msgspec.json.encode(engine_error_body(error))
    return [response_start(error.status_code, headers), {"body": body}]


class TurnoutNode:
    """A Ray Serve deployment class (``serve.deployment`` is applied in ``application.py``).

    Args:
        builder: ``module:function`` building the replica's :class:`NodeParts` from ``options``.
        options: Plain data for the builder (the profile path, the fakes' switch delay).
    """

    # Ray Serve awaits an async constructor (the replica is ready once the builder ran); mypy knows no such thing.
    async def __init__(self, builder: str, options: Mapping[str, Any]) -> None:  # type: ignore[misc]
        parts: NodeParts = await import_builder(builder)(options)
        self._parts = parts
        manager = parts.manager
        self._manager = manager
        self._models = models = ReplicaModels(manager)
        self._app = create_app(manager, parts.edge.settings, reloader=REPLICA_RELOAD, key_ring=parts.key_ring)
        self._routes = RouteTable(parts.edge.settings)
        context = serve.get_replica_context()
        self._replica = context.replica_id.unique_id

        # A plain function, not the bound method: Ray keeps its LRU as an attribute of the decorated callable.
        async def hold(name: str) -> HeldModel:
            return await models.load(name)

        self._model = serve.multiplexed(max_num_models_per_replica=models.capacity)(hold)
        self._registry = registry_handle(context.app_name)
        self._loop = asyncio.create_task(self._report_loop())

    # -- requests -------------------------------------------------------------------------------------------

    async def handle(self, request: ForwardedRequest) -> AsyncIterator[dict[str, Any]]:
        """Serve one forwarded request for the handle's multiplexed model: the status and headers, then the
        body chunks as the app sends them (a stream's events one by one)."""
        model = serve.get_multiplexed_model_id()
        if model:
            refused = await self._form_refusal(request, model)
            if refused is not None:
                for item in refused:
                    yield item
                return
            try:
                await self._models.activate(model, self._model)
            except EngineError as error:
                for item in error_items(error):
                    yield item
                return
        async for item in call_app(self._app, request):
            yield item

    async def _form_refusal(self, request: ForwardedRequest, model: str) -> list[dict[str, Any]] | None:
        """The 404 of a form for a model that cannot serve it, before Ray's multiplexer loads the model (the node
        app's own check comes after the load: a form naming a chat model would move this replica's device)."""
        route = self._routes.route(request["path"], request["method"])
        if route is None or route.form_api is None:
            return None
        try:
            await check_serves_form(self._manager, model, route.form_api)
        except RouteUnsupported as unsupported:
            body = msgspec.json.encode(unsupported_route_body(unsupported.model, unsupported.api))
            return [response_start(404, [(b"content-type", b"application/json")]), {"body": body}]
        return None

    async def switch(self, model: str) -> dict[str, Any]:
        """The admin switch on this replica: through Ray's multiplexer, so that its LRU and routing agree."""
        try:
            await self._models.activate(model, self._model)
        except EngineError as error:
            return {"status": error.status_code, "body": error_items(error)[1]["body"].decode()}
        return {"status": 200, "body": msgspec.json.encode(self.state()).decode()}

    # -- the cluster view -----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """This replica's report: what Ray holds on it, the manager's state, and the counters."""
        snapshot = self._manager.snapshot()
        return {
            "replica": self._replica,
            "pid": os.getpid(),
            **self._models.report(snapshot),
            "manager": msgspec.to_builtins(snapshot),
            "models": {name: profile.model for name, profile in self._manager.models.items()},
            "aliases": {name: list(profile.aliases) for name, profile in self._manager.models.items()},
            "counters": dict(self._parts.counters()),
        }

    async def _report_loop(self) -> None:
        """Report every ``REPORT_EVERY_S`` and answer the registry's commands, until the replica stops."""
        registry = self._registry
        while True:
            try:
                await registry.report.remote(self._replica, self.state())
                command = await registry.next_command.remote(self._replica, REPORT_EVERY_S)
                if command is not None:
                    answer = await self.switch(command["args"]["model"])
                    await registry.complete.remote(command["id"], answer)
            except asyncio.CancelledError:
                raise
            except Exception:  # the registry restarting must not end the reports; it is logged
                logger.exception("replica %s: report to the cluster registry failed", self._replica)
                await asyncio.sleep(REPORT_EVERY_S)

    async def __del__(self) -> None:
        """Ray Serve's shutdown hook: stop reporting, leave the view, release the engines."""
        if not hasattr(self, "_loop"):
            return  # the constructor failed (a bad profile): nothing was started
        self._loop.cancel()
        with contextlib.suppress(BaseException):
            await self._loop
        with contextlib.suppress(Exception):
            await self._registry.forget.remote(self._replica)
        await self._manager.shutdown()
