"""The production node builder: a replica's engine manager over the profile, as ``turnout serve`` builds it
(vLLM's engine checks, the KV-cache budget, the real frontend bundles)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from server.api import ApiSettings
from server.cluster.parts import NodeParts
from server.engine.factory import build_manager, prepare_profile
from server.frontend import FrontendSettings, build_bundle_for_profile
from server.frontend.vllm_adapter import build_renderer, parser_registry
from server.profiles import Profile, validate_profile

__all__ = ["ProfileInvalid", "profile_node", "serving_profile"]


class ProfileInvalid(RuntimeError):
    """The profile has errors: the replica does not start (Ray shows this message in the deployment's status)."""


def serving_profile(path: str) -> Profile:
    """The validated profile at ``path``; raises :class:`ProfileInvalid` listing every error."""
    result = validate_profile(path, parsers=parser_registry())
    if result.profile is None:
        raise ProfileInvalid("; ".join(str(issue) for issue in result.errors))
    return result.profile


async def profile_node(options: Mapping[str, Any]) -> NodeParts:
    """``options["profile"]``'s manager and the app settings from its environment variables."""
    profile, plan = prepare_profile(serving_profile(str(options["profile"])))
    defaults = FrontendSettings()

    async def build_bundle(name: str, model: Any, engine: Any) -> Any:
        return await build_bundle_for_profile(name, model, engine, defaults)

    manager = build_manager(profile, build_bundle, build_renderer=build_renderer, memory_plan=plan)
    server = profile.server
    settings = ApiSettings(
        admin_token=os.environ.get(server.admin_token_env) or None,
        admin_token_env=server.admin_token_env,
        api_key=os.environ.get(server.api_key_env) or None,
        dev_mode=bool(options.get("dev", False)),
        stream_stall_timeout_s=server.stream_stall_timeout_s,
    )
    return NodeParts(manager=manager, settings=settings, max_active=profile.switching.max_active)
