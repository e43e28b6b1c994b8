"""What a node replica is built from, and how many models Ray may place on it."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from server.api import ApiSettings
from server.api.admission import ServingBundle
from server.engine import EngineManager

__all__ = ["NodeBuilder", "NodeParts", "import_builder"]

#: Strategies that hold one engine at a time: a replica serves one model, and Ray's LRU has room for one.


@dataclass(frozen=True, kw_only=True)
class NodeParts:
    """One replica's engine manager and app settings.

    Attributes:
        manager: Not initialized yet: the replica's first multiplexed load starts it with the requested model.
        settings: The app's secrets and dev mode.
        max_active: The profile's residency limit (``switching.max_active``); None: unset.
        counters: Extra figures for the replica's report (the fakes' load counts); empty in production.
    """

    manager: EngineManager[ServingBundle]
    settings: ApiSettings
    max_active: int | None = None
    counters: Callable[[], Mapping[str, Any]] = field(default=lambda: {})


#: Builds a replica's parts from the deployment's ``options`` (plain data: it comes from a Ray Serve config file).
NodeBuilder = Callable[[Mapping[str, Any]], Awaitable[NodeParts]]


def import_builder(path: str) -> NodeBuilder:
    """The builder named ``module:function`` (a name, so that a Ray Serve config file can give it)."""
    module, _, attribute = path.partition(":")
    if not module or not attribute:
        raise ValueError(f"a node builder is named 'module:function', got {path!r}")
    builder: NodeBuilder = getattr(importlib.import_module(module), attribute)
    return builder
