"""``server.api_keys``: keys limited to some models, checked item by item with the position of each problem.

The section's other keys are env var names checked by the loader's generic section check; this list needs the
models (a key may name a model or one of its aliases), so it is checked after them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from server.profiles.check_context import Context
from server.profiles.engine_args import did_you_mean
from server.profiles.field_checks import describe_value
from server.profiles.schema import ApiKeyScope, ModelProfile
from server.profiles.yaml_tree import item_pos, key_pos, value_pos
from server.profiles.yaml_values import quiet_plain, to_plain

__all__ = ["API_KEYS", "ENV_NAME", "check_api_keys"]

#: The key of ``server`` this module checks (the generic section check leaves it alone).
API_KEYS: Final = "api_keys"
#: What an environment variable's name may be (the server section's env keys follow it too).
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ITEM_KEYS: Final = ("key_env", "models")
#: The optional keys of an item.
_OPTIONAL_KEYS: Final = ("cache_group",)


def check_api_keys(ctx: Context, tree: CommentedMap, models: Mapping[str, ModelProfile]) -> list[ApiKeyScope]:
    """The valid items of ``server.api_keys``; every problem is reported at its position.

    An env var that is unset here is a warning (``turnout validate`` may run where the secrets are not); the
    server refuses to start without it.
    """
    server = tree.get("server")
    if not isinstance(server, CommentedMap) or API_KEYS not in server:
        return []
    node = server[API_KEYS]
    if not isinstance(node, CommentedSeq):
        shown = describe_value(quiet_plain(node))
        message = f"server.api_keys must be a list of {{key_env, models}}, got {shown}"
        ctx.report.error(value_pos(server, API_KEYS), message)
        return []
    names = _client_names(models)
    scopes: list[ApiKeyScope] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(node):
        scope = _check_item(ctx, node, index, item, names)
        if scope is None:
            continue
        if scope.key_env in seen:
            ctx.report.error(
                value_pos(item, "key_env"),
                f"server.api_keys[{index}].key_env {scope.key_env!r} is already item {seen[scope.key_env]}'s",
            )
            continue
        seen[scope.key_env] = index
        if not ctx.env.get(scope.key_env):
            ctx.report.warning(
                value_pos(item, "key_env"),
                f"server.api_keys[{index}].key_env: ${scope.key_env} is not set here; turnout serve refuses to "
                "start without it",
            )
        scopes.append(scope)
    return scopes


def _client_names(models: Mapping[str, ModelProfile]) -> dict[str, str]:
    """Every name a client may send (a model's own and its aliases) to the model it names."""
    names = {name: name for name in models}
    for name, model in models.items():
        for alias in model.aliases:
            names.setdefault(alias, name)
    return names


def _check_item(ctx: Context, seq: CommentedSeq, index: int, item: Any, names: Mapping[str, str]) -> ApiKeyScope | None:
    report = ctx.report
    where = f"server.api_keys[{index}]"
    if not isinstance(item, CommentedMap):
        shown = describe_value(quiet_plain(item))
        report.error(item_pos(seq, index), f"{where} must be a mapping {{key_env, models}}, got {shown}")
        return None
    before = report.error_count
    allowed = (*_ITEM_KEYS, *_OPTIONAL_KEYS)
    for key in item:
        if key not in allowed:
            hint = did_you_mean(key, allowed) if isinstance(key, str) else ""
            message = f"unknown key {describe_value(key)} in {where}{hint} (allowed: {', '.join(allowed)})"
            report.error(key_pos(item, key), message)
    for key in _ITEM_KEYS:
        if key not in item:
            report.error(item_pos(seq, index), f"{where} has no {key!r}")
    key_env = to_plain(item.get("key_env"), value_pos(item, "key_env"), report) if "key_env" in item else None
    if key_env is not None and not (isinstance(key_env, str) and ENV_NAME.fullmatch(key_env)):
        shown = describe_value(key_env)
        report.error(value_pos(item, "key_env"), f"{where}.key_env must be an environment variable name, got {shown}")
    models = _check_models(ctx, item, where, names) if "models" in item else None
    cache_group = None
    if "cache_group" in item:
        cache_group = to_plain(item["cache_group"], value_pos(item, "cache_group"), report)
    if cache_group is not None and not (isinstance(cache_group, str) and cache_group):
        shown = describe_value(cache_group)
        report.error(value_pos(item, "cache_group"), f"{where}.cache_group must be a non-empty name, got {shown}")
    if report.error_count > before or not isinstance(key_env, str) or models is None:
        return None
    return ApiKeyScope(key_env=key_env, models=models, cache_group=cache_group)


def _check_models(ctx: Context, item: CommentedMap, where: str, names: Mapping[str, str]) -> list[str] | None:
    report = ctx.report
    node = item["models"]
    if not isinstance(node, CommentedSeq) or not node:
        shown = describe_value(quiet_plain(node))
        report.error(value_pos(item, "models"), f"{where}.models must be a non-empty list of model names, got {shown}")
        return None
    chosen: list[str] = []
    for index, raw in enumerate(node):
        pos = item_pos(node, index)
        value = to_plain(raw, pos, report)
        if not isinstance(value, str):
            report.error(pos, f"{where}.models[{index}] must be a model name, got {describe_value(value)}")
        elif value not in names:
            hint = did_you_mean(value, list(names)) or ""
            report.error(pos, f"{where}.models[{index}] {value!r} is not a model or alias of this profile{hint}")
        else:
            chosen.append(value)
    return chosen if len(chosen) == len(node) else None
