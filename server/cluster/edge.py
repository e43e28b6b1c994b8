"""The production edge builder: the profile's app settings and models, as ``turnout serve`` reads them.

Light on purpose (no engine, no vLLM import): the ingress builds its gate from it, and each node its app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.api import ServingFlags, api_settings, secret_env, withhold_secrets
from server.cluster.parts import EdgeParts
from server.profiles import Profile, load_profile

__all__ = ["edge_parts", "profile_edge"]


def edge_parts(profile: Profile, options: Mapping[str, Any]) -> EdgeParts:
    """``profile``'s edge: its settings from this process's environment, ``options["dev"]`` and the ingress's
    bind address ``options["host"]`` (the nodes and the ingress default ``server.allowed_hosts`` by it alike: a
    loopback-bound cluster answers loopback names only).

    Raises:
        KeyNotSet: A ``server.api_keys`` item's variable is unset (the replica does not start).
    """
    host = options.get("host")
    flags = ServingFlags(dev=bool(options.get("dev", False)), host=str(host) if host is not None else None)
    settings = api_settings(profile, flags, secret_env())
    # Read: now out of os.environ, so the node's engine processes do not inherit them (server/api/withheld_env.py).
    withhold_secrets(profile)
    return EdgeParts(settings=settings, models=profile.models, default_model=profile.default_model)


async def profile_edge(options: Mapping[str, Any]) -> EdgeParts:
    """``options["profile"]``'s edge (the ingress's builder). The profile is checked without vLLM's parser
    registry: the ingress never renders a chat, and each node checks the parser names as it starts.

    Raises:
        ProfileInvalid: The profile has errors; Ray shows them in the deployment's status.
    """
    return edge_parts(load_profile(str(options["profile"])), options)
