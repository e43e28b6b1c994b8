"""What a Turnout application on Ray Serve is built from, stated once for ``turnout ray-serve`` and a Ray Serve
config file's ``app_builder`` (both build it with :func:`server.cluster.application.build_application`).

Nothing here imports Ray, so the CLI reads its defaults when it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from server.api import StackOptions

__all__ = [
    "ACCELERATOR",
    "MAX_ONGOING_REQUESTS",
    "MAX_QUEUED_REQUESTS",
    "PROFILE_BUILDER",
    "PROFILE_EDGE",
    "node_options",
]

#: The custom resource a replica takes one of where accelerators are not GPUs Ray knows (``--resources``).
ACCELERATOR: Final = "turnout_accel"
#: A replica's concurrent requests by default; past them Ray routes a model's requests to a second replica.
MAX_ONGOING_REQUESTS: Final = 16
#: Requests the ingress queues while every replica is at ``max_ongoing_requests``; past them it answers 503 with
#: ``Retry-After`` (Ray's default queues without bound). ``turnout ray-serve`` gives the profile's
#: ``switching.max_queue``, one node's bound on waiting requests, whose default this is.
MAX_QUEUED_REQUESTS: Final = 256
#: The production node builder.
PROFILE_BUILDER: Final = "server.cluster.build:profile_node"
#: The production edge builder (the ingress's; the node builder builds its edge with the same function).
PROFILE_EDGE: Final = "server.cluster.edge:profile_edge"


def node_options(
    profile: str, *, dev: bool = False, host: str | None = None, stack: StackOptions | None = None
) -> dict[str, Any]:
    """The options the production builders read (``server.cluster.build``, ``server.cluster.edge``): the
    profile's path, dev mode (the admin routes open without a token), the address Ray Serve's HTTP proxy binds
    (``server.allowed_hosts`` defaults by it, as under ``turnout serve``; None: any ``Host``) and, when given, the
    command line's part of each node's serving stack (``server.api.StackOptions``: the frontend and engine
    defaults ``turnout serve`` would apply; Ray pickles it to the replicas)."""
    options: dict[str, Any] = {"profile": profile, "dev": dev, "host": host}
    if stack is not None:
        options["stack"] = stack
    return options
