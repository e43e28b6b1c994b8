"""What a node replica and the ingress are built from."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from server.api import ApiSettings, KeyRing, ServingBundle
from server.engine import EngineManager
from server.profiles import ModelProfile

__all__ = ["EdgeBuilder", "EdgeParts", "NodeBuilder", "NodeParts", "import_builder"]


@dataclass(frozen=True, kw_only=True)
class EdgeParts:
    """What every replica (node and ingress alike) serves requests by: built once per replica by the edge builder,
    so that the ingress gates a request exactly as the node that answers it would.

    Attributes:
        settings: The app's settings (``server.api.stack.serving_settings.api_settings``): keys, admin token, dev mode.
        models: The profile's models, whose names, aliases and adapters the ingress resolves a request's name by.
        default_model: The model a request that names none goes to.
    """

    settings: ApiSettings
    models: Mapping[str, ModelProfile]
    default_model: str | None


@dataclass(frozen=True, kw_only=True)
class NodeParts:
    """One replica's engine manager and what its app serves by.

    Attributes:
        manager: Not initialized yet: the replica's first multiplexed load starts it with the requested model.
        edge: The same parts the ingress is built from (its app uses ``edge.settings``).
        key_ring: The assembled stack's key ring, which the replica's app checks keys by (None: one of
            ``edge.settings``' keys, as the fakes build it).
        counters: Extra figures for the replica's report (the fakes' load counts); empty in production.
    """

    manager: EngineManager[ServingBundle]
    edge: EdgeParts
    key_ring: KeyRing | None = None
    counters: Callable[[], Mapping[str, Any]] = field(default=lambda: {})


#: Builds the edge (or a replica's parts) from the deployment's ``options`` (plain data: it comes from a Ray Serve
#: config file, and is the same for the node and the ingress).
EdgeBuilder = Callable[[Mapping[str, Any]], Awaitable[EdgeParts]]
NodeBuilder = Callable[[Mapping[str, Any]], Awaitable[NodeParts]]


def import_builder(path: str) -> Callable[[Mapping[str, Any]], Awaitable[Any]]:
    """The builder named ``module:function`` (a name, so that a Ray Serve config file can give it)."""
    module, _, attribute = path.partition(":")
    if not module or not attribute:
        raise ValueError(f"a builder is named 'module:function', got {path!r}")
    builder: Callable[[Mapping[str, Any]], Awaitable[Any]] = getattr(importlib.import_module(module), attribute)
    return builder
