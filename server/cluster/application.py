"""The Ray Serve application: the node deployment (N replicas, one accelerator set each) behind the ingress.

``app_builder`` is what a Ray Serve config file names (``import_path: server.cluster.application:app_builder``);
``turnout ray-serve`` and the tests call :func:`build_application` directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray import serve
from ray.serve import Application

from server.api import StackOptions
from server.cluster.application_options import MAX_ONGOING_REQUESTS, node_options
from server.cluster.ingress import TurnoutIngressDeployment
from server.cluster.node import TurnoutNode

__all__ = ["PROFILE_BUILDER", "PROFILE_EDGE", "app_builder", "build_application"]

#: The production node builder.
PROFILE_BUILDER = "server.cluster.build:profile_node"
#: The production edge builder (the ingress's; the node builder builds its edge with the same function).
PROFILE_EDGE = "server.cluster.edge:profile_edge"


def build_application(
    *,
    replicas: int,
    options: Mapping[str, Any],
    builder: str = PROFILE_BUILDER,
    edge: str = PROFILE_EDGE,
    num_gpus: float = 0.0,
    resources: Mapping[str, float] | None = None,
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    autoscaling: Mapping[str, Any] | None = None,
) -> Application:
    """The application: ``replicas`` node replicas (or an autoscaling range), each with ``num_gpus`` and
    ``resources`` (one accelerator set: Ray sets each replica's visible devices), behind the ingress.

    The nodes (``builder``) and the ingress (``edge``) are built from the same ``options`` (``profile``, ``dev``),
    so that the ingress checks a request with the settings and models of the node that answers it.

    ``max_ongoing_requests`` bounds a replica's concurrent requests; past it Ray routes a model's requests to a
    second replica (which loads the model).
    """
    actor_options: dict[str, Any] = {"num_cpus": 0}
    if num_gpus:
        actor_options["num_gpus"] = num_gpus
    if resources:
        actor_options["resources"] = dict(resources)
    scale: dict[str, Any] = (
        {"autoscaling_config": dict(autoscaling)} if autoscaling is not None else {"num_replicas": replicas}
    )
    node = serve.deployment(
        name="TurnoutNode", ray_actor_options=actor_options, max_ongoing_requests=max_ongoing_requests, **scale
    )(TurnoutNode).bind(builder, dict(options))
    ingress = serve.deployment(name="TurnoutIngress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)(
        TurnoutIngressDeployment
    )
    return ingress.bind(node, edge, dict(options))


def app_builder(args: Mapping[str, Any]) -> Application:
    """A Ray Serve config file's application: ``args`` are ``profile``, ``replicas``, ``num_gpus`` (per
    replica), ``resources``, ``max_ongoing_requests``, ``dev``, ``host`` (the HTTP proxy's bind address, which
    ``server.allowed_hosts`` defaults by) and ``stack``: the fields of ``server.api.StackOptions`` (for example
    ``{frontend_defaults: {tool_call_parser: hermes}, engine_defaults: {max_model_len: 4096}}``), the defaults
    ``turnout serve``'s flags would give."""
    host = args.get("host")
    stack = args.get("stack")
    return build_application(
        replicas=int(args.get("replicas", 1)),
        options=node_options(
            str(args["profile"]),
            dev=bool(args.get("dev", False)),
            host=str(host) if host is not None else None,
            stack=StackOptions(**stack) if stack is not None else None,
        ),
        num_gpus=float(args.get("num_gpus", 0.0)),
        resources=args.get("resources"),
        max_ongoing_requests=int(args.get("max_ongoing_requests", MAX_ONGOING_REQUESTS)),
    )
