"""Admin routes: the switch route (vLLM-Gaudi compatible), the manager's status, the measured reload costs, and
loading or unloading a model without switching to it."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from server.api.admission import ServingBundle
from server.engine import CostsDocument, EngineManager, ManagerSnapshot, ResidencyReport, SwitchReport

__all__ = ["AdminController", "SwitchController", "SwitchRequest", "UnloadRequest"]


class SwitchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM-Gaudi's ``ModelSwitchRequest``: the target and how long to drain (seconds, default: the profile's)."""

    model: str
    drain_timeout: Annotated[float, msgspec.Meta(ge=0)] | None = None


class UnloadRequest(msgspec.Struct, frozen=True, kw_only=True):
    """An unload's options: ``force`` unloads the active model in manual mode too (its requests get the switch's
    retryable errors and no model is active); ``drain_timeout`` bounds its drain (seconds, default: the profile's)."""

    force: bool = False
    drain_timeout: Annotated[float, msgspec.Meta(ge=0)] | None = None


class SwitchController(Controller):
    """``POST /v1/models/switch``."""

    path = "/v1/models"
    tags = ["Admin"]

    @post("/switch", status_code=200)
    async def switch(
        self, data: JSONBody[SwitchRequest], manager: NamedDependency[EngineManager[ServingBundle]]
    ) -> SwitchReport:
        """Switch the active model; returns vLLM-Gaudi's response fields plus drain and strategy details."""
        return await manager.switch(data.model, drain_timeout=data.drain_timeout)


class AdminController(Controller):
    """``/admin``: what the manager is doing."""

    path = "/admin"
    tags = ["Admin"]

    @get("/status")
    async def status(self, manager: NamedDependency[EngineManager[ServingBundle]]) -> ManagerSnapshot:
        """Every slot's state, the active model, the switch under way and the last switch's report."""
        return manager.snapshot()

    @get("/costs")
    async def costs(self, manager: NamedDependency[EngineManager[ServingBundle]]) -> CostsDocument:
        """What bringing each model up cost, per model and path (``in_place``, ``warm``, ``cold``), as the switches
        measured it (``docs/residency.md`` has its JSON Schema)."""
        return manager.costs

    @post("/models/{name:str}/load", status_code=200)
    async def load(
        self, name: FromPath[str], manager: NamedDependency[EngineManager[ServingBundle]]
    ) -> ResidencyReport:
        """Make a model resident without activating it (``keep``: within ``max_active`` and memory); 409 says why
        when the strategy cannot hold it next to the active model."""
        return await manager.load(name)

    @post("/models/{name:str}/unload", status_code=200)
    async def unload(
        self,
        name: FromPath[str],
        manager: NamedDependency[EngineManager[ServingBundle]],
        data: JSONBody[UnloadRequest | None] = None,
    ) -> ResidencyReport:
        """Free a model's engine; the active one in manual mode only with ``force`` (else 409)."""
        options = data or UnloadRequest()
        return await manager.unload(name, force=options.force, drain_timeout=options.drain_timeout)
