"""Node and edge builders for the Ray tests: the real manager and app over fake engines, with a switch delay.

Options (the same for the nodes and the ingress, as in production): ``models`` (names; the first is the default),
``strategy`` (``stop`` or ``keep``), ``max_active`` (keep's residency limit) and ``switch_delay_s`` (each engine
load takes that long, so a switch costs time as a real one does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.api import ApiSettings
from server.cluster.parts import EdgeParts, NodeParts
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy, StopStrategy
from server.profiles.schema import Switching
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader, fake_models

__all__ = ["ADMIN_TOKEN", "fake_edge", "fake_node"]

ADMIN_TOKEN = "cluster-admin-token"


async def fake_edge(options: Mapping[str, Any]) -> EdgeParts:
    names = list(options["models"])
    return EdgeParts(settings=ApiSettings(admin_token=ADMIN_TOKEN), models=fake_models(*names), default_model=names[0])


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
    )
    return NodeParts(
        manager=manager,
        edge=edge,
        max_active=max_active,
        counters=lambda: {"engine_loads": list(loader.loads), "engine_unloads": list(loader.unloads)},
    )
