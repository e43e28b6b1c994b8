"""The Ray Serve application: the node deployment (N replicas, one accelerator set each), alone or behind the
ingress deployment.

``turnout ray-serve`` runs :func:`node_application` and serves the ingress app itself (``ingress_app``: Ray's HTTP
proxy takes no header timeout or connection cap); ``app_builder`` is what a Ray Serve config file names
(``import_path: server.cluster.application:app_builder``): :func:`build_application`, behind Ray's proxy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray import serve
from ray.serve import Application

from server.api import StackOptions
from server.cluster.application_options import (
    MAX_ONGOING_REQUESTS,
    MAX_QUEUED_REQUESTS,
    PROFILE_BUILDER,
    PROFILE_EDGE,
    node_options,
)
from server.cluster.ingress import TurnoutIngressDeployment
from server.cluster.node import TurnoutNode

__all__ = ["NODE_DEPLOYMENT", "app_builder", "build_application", "node_application"]

#: The node deployment's name.
NODE_DEPLOYMENT = "TurnoutNode"


def node_application(
    *,
    replicas: int,
    options: Mapping[str, Any],
    builder: str = PROFILE_BUILDER,
    num_gpus: float = 0.0,
    resources: Mapping[str, float] | None = None,
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    max_queued_requests: int = MAX_QUEUED_REQUESTS,
    autoscaling: Mapping[str, Any] | None = None,
) -> Application:
    """The node deployment alone: ``replicas`` node replicas (or an autoscaling range), each with ``num_gpus`` and
    ``resources`` (one accelerator set: Ray sets each replica's visible devices). ``turnout ray-serve`` runs it
    with Ray's HTTP proxy off and serves the ingress app itself (``ingress_app``), under one node's connection
    limits.

    ``max_ongoing_requests`` bounds a replica's concurrent requests; past it Ray routes a model's requests to a
    second replica (which loads the model). ``max_queued_requests`` bounds the requests a caller (the ingress)
    queues while every replica is at that bound; past it the call fails at once (``ReplicasBusy``: 503).
    """
    actor_options: dict[str, Any] = {"num_cpus": 0}
    if num_gpus:
        actor_options["num_gpus"] = num_gpus
    if resources:
        actor_options["resources"] = dict(resources)
    scale: dict[str, Any] = (
        {"autoscaling_config": dict(autoscaling)} if autoscaling is not None else {"num_replicas": replicas}
    )
    return serve.deployment(
        name=NODE_DEPLOYMENT,
        ray_actor_options=actor_options,
        max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests,
        **scale,
    )(TurnoutNode).bind(builder, dict(options))


def build_application(
    *,
    replicas: int,
    options: Mapping[str, Any],
    builder: str = PROFILE_BUILDER,
    edge: str = PROFILE_EDGE,
    num_gpus: float = 0.0,
    resources: Mapping[str, float] | None = None,
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    max_queued_requests: int = MAX_QUEUED_REQUESTS,
    autoscaling: Mapping[str, Any] | None = None,
) -> Application:
    """The node deployment (:func:`node_application`) behind the ingress deployment, for Ray Serve's HTTP proxy
    (a Ray Serve config file's application). That proxy has no header timeout and no connection cap: put a
    reverse proxy with them in front of it (docs/deploy.md).

    The nodes (``builder``) and the ingress (``edge``) are built from the same ``options`` (``profile``, ``dev``),
    so that the ingress checks a request with the settings and models of the node that answers it. The ingress
    deployment queues at most ``max_queued_requests`` too (Ray's proxy is its caller).
    """
    node = node_application(
        replicas=replicas,
        options=options,
        builder=builder,
        num_gpus=num_gpus,
        resources=resources,
        max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests,
        autoscaling=autoscaling,
    )
    ingress = serve.deployment(
        name="TurnoutIngress",
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=1000,
        max_queued_requests=max_queued_requests,
    )(TurnoutIngressDeployment)
    return ingress.bind(node, edge, dict(options))


def app_builder(args: Mapping[str, Any]) -> Application:
    """A Ray Serve config file's application: ``args`` are ``profile``, ``replicas``, ``num_gpus`` (per
    replica), ``resources``, ``max_ongoing_requests``, ``dev``, ``host`` (the HTTP proxy's bind address, which
    ``server.allowed_hosts`` defaults by) and ``stack``: the fields of ``server.api.StackOptions`` (for example
    ``{frontend_defaults: {tool_call_parser: hermes}, engine_defaults: {max_model_len: 4096}}``), the defaults
    ``turnout serve``'s flags would give; ``max_queued_requests`` too."""
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
        max_queued_requests=int(args.get("max_queued_requests", MAX_QUEUED_REQUESTS)),
    )
