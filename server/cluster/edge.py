"""The production edge builder: the profile's app settings and models, as ``turnout serve`` reads them.

Light on purpose (no engine, no vLLM import): the ingress builds its gate from it, and each node its app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.api import ApiSettings, ServingFlags, SourceOptions, StackSource
from server.cluster.parts import EdgeParts
from server.profiles import Profile

__all__ = ["edge_flags", "edge_of", "profile_edge"]


def edge_flags(options: Mapping[str, Any]) -> ServingFlags:
    """The command line's part of a replica's settings: ``options["dev"]`` and the ingress's bind address
    ``options["host"]`` (the nodes and the ingress default ``server.allowed_hosts`` by it alike: a loopback-bound
    cluster answers loopback names only)."""
    host = options.get("host")
    return ServingFlags(dev=bool(options.get("dev", False)), host=str(host) if host is not None else None)


def edge_of(profile: Profile, settings: ApiSettings) -> EdgeParts:
    """``profile``'s edge with the app's ``settings``."""
    return EdgeParts(settings=settings, models=profile.models, default_model=profile.default_model)


async def profile_edge(options: Mapping[str, Any]) -> EdgeParts:
    """``options["profile"]``'s edge (the ingress's builder), through the stack source (``StackSource.edge``). The
    profile is checked without vLLM's parser registry: the ingress never renders a chat, and each node checks the
    parser names as it starts.

    Raises:
        ProfileInvalid: The profile has errors; Ray shows them in the deployment's status.
        KeyNotSet: A ``server.api_keys`` item's variable is unset (the replica does not start).
    """
    profile, settings = StackSource(SourceOptions(path=str(options["profile"]), flags=edge_flags(options))).edge()
    return edge_of(profile, settings)
