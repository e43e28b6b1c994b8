"""The production node builder: a replica's serving stack through the stack source ``turnout serve`` uses
(``server.api.StackSource``: the profile loaded and validated with the command line's defaults, vLLM's engine
checks, the KV-cache budget, the frontend and engine defaults, the real frontend bundles, the app's settings and key
ring), with the options ``turnout ray-serve`` gave, and the edge the ingress builds alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.api import SourceOptions, StackOptions, StackSource
from server.cluster.edge import edge_flags, edge_of
from server.cluster.parts import NodeParts

__all__ = ["profile_node"]


async def profile_node(options: Mapping[str, Any]) -> NodeParts:
    """``options["profile"]``'s stack, assembled with ``options["stack"]`` (the command line's
    :class:`StackOptions`; none: the defaults), and its edge from its environment variables.

    Raises:
        ProfileInvalid: The profile has errors; Ray shows them in the deployment's status.
    """
    stack_options: StackOptions = options.get("stack") or StackOptions()
    source = StackSource(SourceOptions(path=str(options["profile"]), stack=stack_options, flags=edge_flags(options)))
    stack = source.assemble()
    # The edge from the profile as loaded, as the ingress builds it (the served profile's engine defaults and
    # budgets are the node's own business).
    return NodeParts(manager=stack.manager, edge=edge_of(source.require(), stack.settings), key_ring=stack.key_ring)
