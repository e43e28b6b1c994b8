"""The production edge builder: the profile's app settings and models, as ``turnout serve`` reads them.

Light on purpose (no engine, no vLLM import): the ingress builds its gate from it, and each node its app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.api import ApiSettings, ServingFlags, edge_settings
from server.cluster.parts import EdgeParts
from server.profiles import Profile, load_profile

__all__ = ["edge_flags", "edge_of", "edge_parts", "profile_edge"]


def edge_flags(options: Mapping[str, Any]) -> ServingFlags:
    """The command line's part of a replica's settings: ``options["dev"]`` and the ingress's bind address
    ``options["host"]`` (the nodes and the ingress default ``server.allowed_hosts`` by it alike: a loopback-bound
    cluster answers loopback names only)."""
    host = options.get("host")
    return ServingFlags(dev=bool(options.get("dev", False)), host=str(host) if host is not None else None)


def edge_of(profile: Profile, settings: ApiSettings) -> EdgeParts:
    """``profile``'s edge with the app's ``settings``."""
    return EdgeParts(settings=settings, models=profile.models, default_model=profile.default_model)


def edge_parts(profile: Profile, options: Mapping[str, Any]) -> EdgeParts:
    """``profile``'s edge: its settings (``edge_settings``, as a node's assembly reads them) from this process's
    environment and :func:`edge_flags`; the secrets then leave ``os.environ``.

    Raises:
        KeyNotSet: A ``server.api_keys`` item's variable is unset (the replica does not start).
    """
    return edge_of(profile, edge_settings(profile, edge_flags(options)))


async def profile_edge(options: Mapping[str, Any]) -> EdgeParts:
    """``options["profile"]``'s edge (the ingress's builder). The profile is checked without vLLM's parser
    registry: the ingress never renders a chat, and each node checks the parser names as it starts.

    Raises:
        ProfileInvalid: The profile has errors; Ray shows them in the deployment's status.
    """
    return edge_parts(load_profile(str(options["profile"])), options)
