"""Loading a profile: decode, check every part (collecting all errors), resolve, build the Structs.

The order follows the file's structure: the document, the top-level keys, the ``switching`` and ``server``
sections, each model, then the rules across sections (the default model). Nothing stops at the first error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec
from ruamel.yaml.comments import CommentedMap

from server.profiles.budget_checks import check_memory_budget
from server.profiles.check_context import Collector, Context
from server.profiles.engine_args import did_you_mean
from server.profiles.field_checks import check_value, describe_value, field_types
from server.profiles.issues import ProfileInvalid, ProfileIssue, ValidationResult
from server.profiles.key_checks import API_KEYS, ENV_NAME, check_api_keys
from server.profiles.lora_checks import check_adapter_names
from server.profiles.model_checks import check_model
from server.profiles.registry import ParserRegistry
from server.profiles.schema import ModelProfile, Profile, ServerSection, Switching
from server.profiles.vllm_source import engine_arg_fields
from server.profiles.yaml_tree import UNREADABLE, key_pos, load_tree, node_pos, value_pos
from server.profiles.yaml_values import plain_text, quiet_plain, reject_tag, to_plain

__all__ = ["CONFIG_ENV", "MODEL_ENV", "load_profile", "validate_profile"]

#: The env var that names the profile when none is given (vLLM-Gaudi's name, kept for compatibility).
CONFIG_ENV: Final = "VLLM_HPU_MULTI_MODEL_CONFIG"
#: The env var that picks the default model when the profile has no ``default_model``.
MODEL_ENV: Final = "MODEL"

_TOP_KEYS: Final = ("default_model", "models", "switching", "server")
#: Top-level keys with this prefix are ignored, so a profile can hold YAML anchors to merge (``<<: *base``).
_EXTENSION_PREFIX: Final = "x-"
_log = logging.getLogger(__name__)
_S = TypeVar("_S", bound=msgspec.Struct)


def validate_profile(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    parsers: ParserRegistry | None = None,
    default_tool_call_parser: str | None = None,
    default_enable_auto_tool_choice: bool = False,
    data: bytes | None = None,
) -> ValidationResult:
    """Check a profile and report every problem with its position; never raises for a bad profile.

    Args:
        path: The profile (YAML or JSON). ``None`` reads the path from ``$VLLM_HPU_MULTI_MODEL_CONFIG``.
        env: The environment to read ``MODEL``, the profile path and the Hugging Face cache location from;
            defaults to ``os.environ``.
        parsers: The registry to check tool and reasoning parser names against. ``None`` skips those two
            checks (everything else still runs); the CLI and the server always pass one.
        default_tool_call_parser: The server's ``--tool-call-parser``, which a model without its own parser
            gets (so ``enable_auto_tool_choice`` without a parser in the profile is fine when it is set).
        default_enable_auto_tool_choice: The server's ``--enable-auto-tool-choice``, which a model that does
            not set ``enable_auto_tool_choice`` gets (it then needs a tool parser too).
        data: The profile file's content, already read by the caller: ``path`` then only names it (in messages,
            and as the folder relative paths start from) and is not opened. A reload passes what it read through
            the one descriptor it checked (``server/api/reload/reload_paths.py``).

    Returns:
        The resolved profile when there is no error, and every error and warning.
    """
    env = os.environ if env is None else env
    if path is None:
        if not env.get(CONFIG_ENV):
            message = "no profile given: name a profile file, for example profiles/demo.yaml"
            issue = ProfileIssue(file="(no profile)", line=1, col=1, message=message)
            return ValidationResult(profile=None, errors=[issue], warnings=[])
        path = env[CONFIG_ENV]
    shown = os.fspath(path)
    report = Collector(shown)
    tree = load_tree(Path(shown), shown, report, data)
    if tree is UNREADABLE:
        return report.result(None)
    ctx = Context(
        report=report,
        profile_dir=Path(os.path.abspath(shown)).parent,
        cwd=Path.cwd(),
        env=env,
        parsers=parsers,
        engine_fields=engine_arg_fields(),
        tool_parser_names=frozenset(parsers.tool_parsers()) if parsers else frozenset(),
        reasoning_parser_names=frozenset(parsers.reasoning_parsers()) if parsers else frozenset(),
        default_tool_call_parser=default_tool_call_parser,
        default_enable_auto_tool_choice=default_enable_auto_tool_choice,
    )
    return report.result(_check_document(ctx, tree, os.path.abspath(shown)))


def load_profile(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    parsers: ParserRegistry | None = None,
    default_tool_call_parser: str | None = None,
    default_enable_auto_tool_choice: bool = False,
) -> Profile:
    """Load a profile, or fail with all of its errors.

    Args:
        path: The profile (YAML or JSON). ``None`` reads the path from ``$VLLM_HPU_MULTI_MODEL_CONFIG``.
        env: As for ``validate_profile``.
        parsers: As for ``validate_profile``.
        default_tool_call_parser: As for ``validate_profile``.
        default_enable_auto_tool_choice: As for ``validate_profile``.

    Returns:
        The resolved profile. Its warnings are logged.

    Raises:
        ProfileInvalid: The profile has at least one error; ``.errors`` holds them all.
    """
    result = validate_profile(
        path,
        env=env,
        parsers=parsers,
        default_tool_call_parser=default_tool_call_parser,
        default_enable_auto_tool_choice=default_enable_auto_tool_choice,
    )
    if result.profile is None:
        raise ProfileInvalid(result.errors, result.warnings)
    for warning in result.warnings:
        _log.warning("%s", warning)
    return result.profile


def _check_document(ctx: Context, tree: Any, absolute: str) -> Profile | None:
    report = ctx.report
    if tree is None:
        report.error((1, 1), "the profile is empty; it needs a 'models' mapping of model name to settings")
        return None
    if not isinstance(tree, CommentedMap):
        shown = describe_value(quiet_plain(tree))
        report.error(node_pos(tree), f"the profile must be a mapping with a 'models' key, got {shown}")
        return None
    reject_tag(tree, node_pos(tree), report)
    for key in tree:
        if key not in _TOP_KEYS and not (isinstance(key, str) and key.startswith(_EXTENSION_PREFIX)):
            report.error(key_pos(tree, key), _unknown(f"top-level key {describe_value(key)}", key, _TOP_KEYS))
    switching = _check_section(ctx, tree, "switching", Switching)
    _check_switching_bounds(ctx, tree, switching)
    server = _check_section(ctx, tree, "server", ServerSection)
    models, names = _check_models(ctx, tree)
    if models is not None:
        server = msgspec.structs.replace(server, api_keys=check_api_keys(ctx, tree, models))
        check_memory_budget(ctx, tree, models, switching)
    default = _check_default(ctx, tree, names)
    if report.error_count or models is None or default is None:
        return None
    return Profile(path=absolute, default_model=default, models=models, switching=switching, server=server)


def _unknown(what: str, key: Any, allowed: tuple[str, ...]) -> str:
    hint = did_you_mean(key, allowed) if isinstance(key, str) else ""
    return f"unknown {what}{hint} (allowed: {', '.join(allowed)})"


def _check_section(ctx: Context, tree: CommentedMap, name: str, struct: type[_S]) -> _S:
    """Check ``switching`` or ``server`` field by field; a section with errors falls back to its defaults."""
    node = tree.get(name)
    if node is None:
        return struct()
    report = ctx.report
    if not isinstance(node, CommentedMap):
        shown = describe_value(quiet_plain(node))
        report.error(value_pos(tree, name), f"{name} must be a mapping, got {shown}")
        return struct()
    reject_tag(node, value_pos(tree, name), report)
    types = field_types(struct)
    values: dict[str, Any] = {}
    for key, raw in node.items():
        pos = value_pos(node, key)
        if key not in types:
            report.error(key_pos(node, key), _unknown(f"key {describe_value(key)} in {name}", key, tuple(types)))
            continue
        if struct is ServerSection and key == API_KEYS:
            continue  # a list checked against the models, once they are known (key_checks.py)
        before = report.error_count
        value = to_plain(raw, pos, report)
        if report.error_count > before:  # the value itself is unusable: already reported
            continue
        converted, problem = check_value(value, types[key])
        if problem:
            report.error(pos, f"{name}.{key} {problem}")
        elif (
            struct is ServerSection
            and key.endswith("_env")
            and converted is not None
            and not ENV_NAME.fullmatch(converted)
        ):
            report.error(pos, f"{name}.{key} must be an environment variable name, got {describe_value(converted)}")
        else:
            values[key] = converted
    return struct(**values)


#: Pairs of ``switching`` fields where the first is a lower bound of the second.
_SWITCHING_BOUNDS: Final = (("min_residency_s", "max_residency_s"), ("failure_backoff_s", "max_failure_backoff_s"))


def _check_switching_bounds(ctx: Context, tree: CommentedMap, switching: Switching) -> None:
    """Bounds that msgspec cannot express: each lower bound is at most its upper bound."""
    node = tree.get("switching")
    if not isinstance(node, CommentedMap):
        return
    for low, high in _SWITCHING_BOUNDS:
        low_value, high_value = getattr(switching, low), getattr(switching, high)
        if low_value > high_value:
            where = high if high in node else low
            ctx.report.error(
                value_pos(node, where),
                f"switching.{high} ({high_value:g}) must be >= switching.{low} ({low_value:g})",
            )


def _check_models(ctx: Context, tree: CommentedMap) -> tuple[dict[str, ModelProfile] | None, list[str]]:
    report = ctx.report
    if "models" not in tree:
        report.error(node_pos(tree), "the profile has no 'models' key (a mapping of model name to settings)")
        return None, []
    node = tree["models"]
    if isinstance(node, CommentedMap) and not node:
        report.error(value_pos(tree, "models"), "models is empty; add at least one model (name: {model: ...})")
        return None, []
    if not isinstance(node, CommentedMap):
        shown = describe_value(quiet_plain(node))
        report.error(value_pos(tree, "models"), f"models must be a mapping of model name to settings, got {shown}")
        return None, []
    reject_tag(node, value_pos(tree, "models"), report)
    if ctx.engine_fields is None:
        report.warning(
            key_pos(tree, "models"),
            "vLLM is not installed here, so engine argument names and types are not checked",
        )
    models: dict[str, ModelProfile] = {}
    names: list[str] = []
    for name in node:
        model = check_model(ctx, node, name)
        # A name written with escapes ("\ud83d\ude00") is stored as the character they spell.
        clean = plain_text(name, key_pos(node, name), report) if isinstance(name, str) else None
        if clean is not None:
            names.append(clean)
            if model is not None:
                models[clean] = model
    _check_aliases(ctx, node, models)
    check_adapter_names(ctx, node, models)
    return models, names


def _check_aliases(ctx: Context, node: CommentedMap, models: dict[str, ModelProfile]) -> None:
    """Every name a client may send (model names and ``served_model_name`` aliases) reaches one model only."""
    owner: dict[str, str] = {name: name for name in models}
    for name, model in models.items():
        for alias in model.aliases:
            other = owner.setdefault(alias, name)
            if other != name:
                entry = node[name]
                ctx.report.error(
                    value_pos(entry, "served_model_name"),
                    f"model {name!r}: served_model_name {alias!r} is already the name of model {other!r}",
                )


def _check_default(ctx: Context, tree: CommentedMap, names: list[str]) -> str | None:
    """``default_model``, else ``$MODEL``, else the first model; an empty value falls through."""
    report = ctx.report
    chosen: Any = None
    if "default_model" in tree:
        before = report.error_count
        chosen = to_plain(tree["default_model"], value_pos(tree, "default_model"), report)
        if report.error_count > before:
            return None
        if chosen is not None and not isinstance(chosen, str):
            shown = describe_value(chosen)
            report.error(value_pos(tree, "default_model"), f"default_model must be a model name, got {shown}")
            return None
    if chosen:
        source, pos = "default_model", value_pos(tree, "default_model")
    elif ctx.env.get(MODEL_ENV):
        chosen = ctx.env[MODEL_ENV]
        source, pos = f"${MODEL_ENV}", key_pos(tree, "models") if "models" in tree else node_pos(tree)
    else:
        return names[0] if names else None
    if names and chosen not in names:
        hint = did_you_mean(chosen, names) or "."
        text = f"default model {chosen!r} (from {source}) is not one of the models{hint}"
        # A name with a line break (YAML's \N is one) must not split the one-line message: such names are quoted.
        listed = (name if name.isprintable() else repr(name) for name in names)
        report.error(pos, f"{text} The models are: {', '.join(listed)}")
        return None
    return chosen if names else None
