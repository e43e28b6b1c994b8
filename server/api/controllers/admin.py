"""Admin routes: the switch route (vLLM-Gaudi compatible) and the manager's status."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from server.api.admission import ServingBundle
from server.engine import EngineManager, ManagerSnapshot, SwitchReport

__all__ = ["AdminController", "SwitchController", "SwitchRequest"]


class SwitchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM-Gaudi's ``ModelSwitchRequest``: the target and how long to drain (seconds, default: the profile's)."""

    model: str
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
