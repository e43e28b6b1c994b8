"""The production node builder: a replica's engine manager over the profile, as ``turnout serve`` builds it
(vLLM's engine checks, the KV-cache budget, the real frontend bundles), and its edge as the ingress builds it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.cluster.edge import edge_parts
from server.cluster.parts import NodeParts
from server.engine import build_manager, prepare_profile
from server.frontend import FrontendSettings, build_bundle_for_profile, build_renderer, parser_registry
from server.profiles import load_profile

__all__ = ["profile_node"]


async def profile_node(options: Mapping[str, Any]) -> NodeParts:
    """``options["profile"]``'s manager, and the edge from its environment variables.

    Raises:
        ProfileInvalid: The profile has errors; Ray shows them in the deployment's status.
    """
    profile = load_profile(str(options["profile"]), parsers=parser_registry())
    edge = edge_parts(profile, options)
    profile, plan = prepare_profile(profile)
    defaults = FrontendSettings()

    async def build_bundle(name: str, model: Any, engine: Any) -> Any:
        return await build_bundle_for_profile(name, model, engine, defaults)

    manager = build_manager(profile, build_bundle, build_renderer=build_renderer, memory_plan=plan)
    return NodeParts(manager=manager, edge=edge)
