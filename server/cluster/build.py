"""The production node builder: a replica's serving stack through the one assembly ``turnout serve`` uses
(``server.api.assemble_stack``: vLLM's engine checks, the KV-cache budget, the frontend and engine defaults, the
real frontend bundles, the app's settings), with the options ``turnout ray-serve`` gave, and the edge the ingress
builds alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.api import StackOptions, assemble_stack
from server.cluster.edge import edge_flags, edge_of
from server.cluster.parts import NodeParts
from server.frontend import parser_registry
from server.profiles import load_profile

__all__ = ["profile_node"]


async def profile_node(options: Mapping[str, Any]) -> NodeParts:
    """``options["profile"]``'s stack, assembled with ``options["stack"]`` (the command line's
    :class:`StackOptions`; none: the defaults), and its edge from its environment variables.

    Raises:
        ProfileInvalid: The profile has errors; Ray shows them in the deployment's status.
    """
    stack_options: StackOptions = options.get("stack") or StackOptions()
    defaults = stack_options.frontend_settings()
    profile = load_profile(
        str(options["profile"]),
        parsers=parser_registry(),
        default_tool_call_parser=defaults.tool_call_parser,
        default_enable_auto_tool_choice=defaults.enable_auto_tool_choice,
    )
    stack = assemble_stack(profile, stack_options, edge_flags(options))
    # The edge from the profile as loaded, as the ingress builds it (the served profile's engine defaults and
    # budgets are the node's own business).
    return NodeParts(manager=stack.manager, edge=edge_of(profile, stack.settings))
