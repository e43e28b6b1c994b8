"""Node and edge builders for the Ray tests: the real manager and app over fake engines, with a switch delay.

Options (the same for the nodes and the ingress, as in production): ``models`` (names; the first is the default),
``host`` (the HTTP proxy's bind address: ``server.allowed_hosts`` defaults by it, as ``profile_edge`` does),
``strategy`` (``stop`` or ``keep``), ``max_active`` (keep's residency limit) and ``switch_delay_s`` (each engine
load takes that long, so a switch costs time as a real one does).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from server.api import ApiSettings
from server.api.edge.checks import default_allowed_hosts
from server.cluster.parts import EdgeParts, NodeParts
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy, StopStrategy
from server.profiles.schema import ModelProfile, Switching
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader, fake_models

__all__ = ["ADMIN_TOKEN", "FakeMultiplexer", "fake_edge", "fake_node", "fake_tasks"]

ADMIN_TOKEN = "cluster-admin-token"


async def fake_edge(options: Mapping[str, Any]) -> EdgeParts:
    names = list(options["models"])
    hosts = default_allowed_hosts(options.get("host"), None)
    settings = ApiSettings(admin_token=ADMIN_TOKEN, allowed_hosts=hosts)
    return EdgeParts(settings=settings, models=fake_models(*names), default_model=names[0])


def fake_tasks(_: str, model: ModelProfile) -> frozenset[str]:
    """The fakes' tasks, as the fake bundles decide them: a path naming whisper transcribes, the rest chat."""
    return frozenset({"transcription"}) if "whisper" in model.model else frozenset({"generate"})


async def fake_node(options: Mapping[str, Any]) -> NodeParts:
    edge = await fake_edge(options)
    loader = FakeLoader(delay_s=float(options.get("switch_delay_s", 0.0)))
    max_active = options.get("max_active")
    strategy = (
        KeepStrategy(loader, max_resident=max_active) if options.get("strategy") == "keep" else StopStrategy(loader)
    )
    manager: EngineManager[Any] = EngineManager(
        edge.models,
        strategy,
        build_fake_serving_bundle,
        switching=Switching(max_active=max_active),
        abort_grace=0.2,
        memory_probe=lambda: 1.0,
        admission_timeout=10.0,
        model_tasks=fake_tasks,
    )
    return NodeParts(
        manager=manager,
        edge=edge,
        counters=lambda: {"engine_loads": list(loader.loads), "engine_unloads": list(loader.unloads)},
    )


class FakeMultiplexer:
    """Ray Serve's model multiplexing without a replica, as ``ray/serve/multiplex.py`` (``_ModelMultiplexWrapper.
    load_model`` and ``unload_model_lru``, Ray 2.x) does it: an LRU of at most ``capacity`` models; a hit moves the
    model to the end and returns it without a load; a miss first evicts the least recently used model when the LRU
    is full (popped, then its ``__del__`` awaited and replaced), then loads; a failed load caches nothing.

    Attributes:
        models: What Ray holds, least recently used first.
    """

    def __init__(self, load: Callable[[str], Awaitable[Any]], capacity: int) -> None:
        self._load = load
        self._capacity = capacity
        self.models: OrderedDict[str, Any] = OrderedDict()

    async def __call__(self, name: str) -> Any:
        if name in self.models:
            self.models.move_to_end(name)
            return self.models[name]
        if len(self.models) >= self._capacity:
            _, model = self.models.popitem(last=False)
            await model.__del__()
            model.__del__ = lambda _: None
        self.models[name] = await self._load(name)
        return self.models[name]
