"""Turnout replicas on Ray Serve: node replicas that each run an engine manager over the profile, an OpenAI
ingress that routes by model (Ray's model multiplexing), and the cluster view (``/v1/models``, ``/admin/status``).

Needs the ``ray`` extra (``pip install -e '.[ray]'``). The layer sits above ``api``: a node serves requests
through Turnout's own app, and only the CLI imports this package.

This face is all the CLI imports (``tests/test_layers.py``). It does not import Ray: the application's options and
defaults are plain, and :func:`build_application`, :func:`node_application` and :func:`ingress_app` (which import
Ray) are looked up on first use. A Ray Serve config
file names ``server.cluster.application:app_builder`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from server.cluster.application_options import (
    ACCELERATOR,
    MAX_ONGOING_REQUESTS,
    MAX_QUEUED_REQUESTS,
    PROFILE_EDGE,
    node_options,
)

if TYPE_CHECKING:
    from server.cluster.application import build_application, node_application
    from server.cluster.ingress import ingress_app

__all__ = [
    "ACCELERATOR",
    "MAX_ONGOING_REQUESTS",
    "MAX_QUEUED_REQUESTS",
    "PROFILE_EDGE",
    "build_application",
    "ingress_app",
    "node_application",
    "node_options",
]


def __getattr__(name: str) -> Any:
    if name in ("build_application", "node_application"):
        from server.cluster import application

        return getattr(application, name)
    if name == "ingress_app":
        from server.cluster.ingress import ingress_app

        return ingress_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
