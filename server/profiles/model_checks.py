"""Checking one entry of ``models``: its keys and types, then the rules that span keys and files."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Any, Final

from ruamel.yaml.comments import CommentedMap

from server.profiles.check_context import Context, Finding
from server.profiles.engine_args import check_engine_value, did_you_mean
from server.profiles.field_checks import check_value, describe_value, field_types
from server.profiles.lora_checks import check_lora_modules
from server.profiles.model_path import resolve_model
from server.profiles.quant_checks import check_quant_config
from server.profiles.schema import CHAT_FRONTEND_KEYS, REQUEST_BOUND_KEYS, RESIDENCY_KEYS, ModelProfile
from server.profiles.template_checks import check_chat_template
from server.profiles.yaml_tree import key_pos, node_pos, value_pos
from server.profiles.yaml_values import quiet_plain, reject_tag, to_plain

__all__ = ["MODEL_KEYS", "check_model"]

#: Keys Turnout reads itself; ``engine_args`` is where the rest go, not a key of the file.
_FIELD_TYPES: Final = {name: typ for name, typ in field_types(ModelProfile).items() if name != "engine_args"}
MODEL_KEYS: Final = frozenset(_FIELD_TYPES)


def check_model(ctx: Context, models: CommentedMap, name: Any) -> ModelProfile | None:
    """Check ``models[name]`` and build its ``ModelProfile``.

    Args:
        ctx: The validation context; every problem goes to ``ctx.report``.
        models: The ``models`` mapping (for positions).
        name: The model's name, a key of ``models``.

    Returns:
        The resolved model, or ``None`` when it has any error.
    """
    report = ctx.report
    entry = models[name]
    if not isinstance(name, str) or not name.strip():
        report.error(key_pos(models, name), f"a model name must be a non-empty string, got {describe_value(name)}")
        return None
    label = f"model {name!r}"
    if not isinstance(entry, CommentedMap):
        shown = describe_value(quiet_plain(entry))
        report.error(value_pos(models, name), f"{label} must be a mapping with at least a 'model' key, got {shown}")
        return None
    errors_before = report.error_count
    reject_tag(entry, value_pos(models, name), report)
    values, engine_args = _check_keys(ctx, entry, label)
    if "model" not in entry:
        report.error(key_pos(models, name), f"{label} has no 'model' key (a local model folder or a hub id)")
    _check_tools(ctx, entry, values, label)
    model = _check_paths(ctx, entry, values, engine_args, label)
    lora_modules = check_lora_modules(ctx, entry, engine_args, label)
    if report.error_count > errors_before or model is None:
        return None
    chat: dict[str, Any] = {key: values.get(key) for key in CHAT_FRONTEND_KEYS}
    residency: dict[str, Any] = {key: values[key] for key in (*RESIDENCY_KEYS, *REQUEST_BOUND_KEYS) if key in values}
    return ModelProfile(
        model=model,
        enable_auto_tool_choice=values.get("enable_auto_tool_choice"),
        tool_call_parser=values.get("tool_call_parser") or None,
        chat_template=values.get("chat_template"),
        reasoning_parser=values.get("reasoning_parser") or None,
        quant_config=values.get("quant_config"),
        engine_args=engine_args,
        served_model_name=values.get("served_model_name"),
        lora_modules=lora_modules,
        **chat,
        **residency,
    )


def _check_keys(ctx: Context, entry: CommentedMap, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Type-check every key; split Turnout's own settings from the engine arguments."""
    report, fields = ctx.report, ctx.engine_fields
    values: dict[str, Any] = {}
    engine_args: dict[str, Any] = {}
    for key, raw in entry.items():
        pos = value_pos(entry, key)
        if not isinstance(key, str):
            report.error(key_pos(entry, key), f"{label}: key {describe_value(key)} must be a string")
            continue
        # Without vLLM (fields is None) engine argument names cannot be checked; that is warned once.
        if key == "lora_modules":
            continue  # an adapter mapping with paths to resolve: lora_checks.py checks it whole
        if key not in _FIELD_TYPES and fields is not None and key not in fields:
            report.error(key_pos(entry, key), _unknown_key(label, key, fields))
            continue
        before = report.error_count
        value = to_plain(raw, pos, report)
        if report.error_count > before:  # the value itself is unusable (a custom tag, say): already reported
            continue
        if key in _FIELD_TYPES:
            converted, problem = check_value(value, _FIELD_TYPES[key])
            if problem:
                report.error(pos, f"{label}: {key} {problem}")
            else:
                values[key] = converted
        elif fields is not None and (wrong := check_engine_value(value, fields[key])):
            expected, declared = wrong
            shown = describe_value(value)
            report.error(pos, f"{label}: engine argument {key} must be {expected}, got {shown} (vLLM's {declared})")
        else:
            engine_args[key] = value
    return values, engine_args


def _unknown_key(label: str, key: str, fields: Collection[str]) -> str:
    text = f"{label}: unknown key {key!r}: not a model setting nor a field of vLLM's AsyncEngineArgs"
    return text + did_you_mean(key, set(fields) | MODEL_KEYS)


def _check_tools(ctx: Context, entry: CommentedMap, values: dict[str, Any], label: str) -> None:
    """Auto tool choice needs a parser; parser names must be registered in vLLM."""
    # The one place this rule lives: the frontend and the CLI rely on it (the CLI passes its defaults here).
    tool_parser = values.get("tool_call_parser")
    no_parser = entry.get("tool_call_parser") in (None, "") and not ctx.default_tool_call_parser
    hint = "add the tool parser that matches the model's chat template (for example hermes)"
    if values.get("enable_auto_tool_choice") and no_parser:
        ctx.report.error(
            key_pos(entry, "enable_auto_tool_choice"),
            f"{label}: enable_auto_tool_choice is true but no tool_call_parser is set; {hint}",
        )
    elif values.get("enable_auto_tool_choice") is None and ctx.default_enable_auto_tool_choice and no_parser:
        ctx.report.error(
            node_pos(entry),
            f"{label}: the server's --enable-auto-tool-choice applies but no tool_call_parser is set; {hint}, "
            "or pass --tool-call-parser",
        )
    if ctx.parsers is None:
        return
    checks = (
        ("tool_call_parser", tool_parser, ctx.tool_parser_names, "tool parser"),
        ("reasoning_parser", values.get("reasoning_parser"), ctx.reasoning_parser_names, "reasoning parser"),
    )
    for key, name, known, kind in checks:
        if name and name not in known:
            hint = did_you_mean(name, known) or "."
            text = f"{label}: {key} {name!r} is not a {kind} registered in vLLM{hint}"
            ctx.report.error(value_pos(entry, key), f"{text} Valid names: {', '.join(sorted(known))}")


def _check_paths(
    ctx: Context, entry: CommentedMap, values: dict[str, Any], engine_args: dict[str, Any], label: str
) -> str | None:
    """Resolve and check the template, quant config and model paths; return the model to hand vLLM."""
    prefix = f"{label}: "
    uses_tools = bool(values.get("tool_call_parser") or values.get("enable_auto_tool_choice"))
    for key in ("chat_template", "quant_config"):
        shown = values.get(key)
        if shown is None:
            continue
        pos = value_pos(entry, key)
        if not shown.strip():
            ctx.report.error(pos, f"{prefix}{key} must not be empty")
            continue
        path = _resolve_file(shown, ctx.profile_dir)
        values[key] = str(path)
        check = (
            partial(check_chat_template, path, shown, uses_tools=uses_tools)
            if key == "chat_template"
            else partial(check_quant_config, path, shown, ctx.cwd)
        )
        findings = _guarded(check, key, shown)
        ctx.report.extend(pos, findings, prefix)
    raw = values.get("model")
    if raw is None:
        return None
    pos = value_pos(entry, "model")
    if not raw.strip():
        ctx.report.error(pos, f"{prefix}model must not be empty")
        return None
    download_dir = engine_args.get("download_dir")
    try:
        model, findings = resolve_model(
            raw, ctx.profile_dir, ctx.cwd, ctx.env, download_dir if isinstance(download_dir, str) else None
        )
    except (OSError, ValueError) as exc:
        model, findings = raw, [("error", f"model path {raw!r} cannot be checked: {exc}")]
    ctx.report.extend(pos, findings, prefix)
    return model


def _resolve_file(shown: str, profile_dir: Path) -> Path:
    """Relative paths resolve against the profile's folder, as vLLM-Gaudi resolved them."""
    path = Path(os.path.expanduser(shown))
    return Path(os.path.abspath(path if path.is_absolute() else profile_dir / path))


def _guarded(check: Callable[[], list[Finding]], key: str, shown: str) -> list[Finding]:
    # A path with a NUL byte or a name too long for the OS makes pathlib raise; report it like any bad path.
    try:
        return check()
    except (OSError, ValueError) as exc:
        return [("error", f"{key} {shown!r} cannot be checked: {exc}")]
