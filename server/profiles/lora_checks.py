"""Checking a model's ``lora_modules``: adapter names, adapter folders, and the LoRA engine arguments they need.

A model's ``lora_modules`` maps an adapter name (what a request's ``model`` says) to a PEFT adapter folder, as
vLLM's ``--lora-modules name=path`` does for its one model. vLLM would only find a bad adapter when the engine
is up (or at the adapter's first request), so what can be seen in the files is checked here, at ``file:line:col``:
the folder holds ``adapter_config.json`` and adapter weights, its rank fits ``max_lora_rank``, and the model
sets ``enable_lora``. Across models, every name a client may send reaches one model only
(:func:`check_adapter_names`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ruamel.yaml.comments import CommentedMap

from server.profiles.check_context import Context
from server.profiles.field_checks import describe_value
from server.profiles.schema import ModelProfile
from server.profiles.yaml_tree import key_pos, value_pos
from server.profiles.yaml_values import to_plain

__all__ = ["ADAPTER_CONFIG", "DEFAULT_MAX_LORA_RANK", "check_adapter_names", "check_lora_modules"]

#: The file vLLM (and PEFT) read an adapter's rank and target modules from.
ADAPTER_CONFIG: Final = "adapter_config.json"
#: The weight files vLLM's LoRA loader accepts, in the order it looks for them.
_ADAPTER_WEIGHTS: Final = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")
#: vLLM 0.32's ``LoRAConfig.max_lora_rank`` default.
DEFAULT_MAX_LORA_RANK: Final = 16
_TRUE_TEXT: Final = frozenset({"1", "true", "yes", "on", "t", "y"})


def check_lora_modules(
    ctx: Context, entry: CommentedMap, engine_args: Mapping[str, Any], label: str
) -> dict[str, str] | None:
    """Check ``entry["lora_modules"]`` and resolve each adapter's folder.

    Args:
        ctx: The validation context; every problem goes to ``ctx.report``.
        entry: The model's mapping (for positions).
        engine_args: The model's engine arguments (``enable_lora``, ``max_lora_rank``).
        label: ``model 'name'``, the prefix of every message.

    Returns:
        Adapter name to its absolute folder, or ``None`` when the key is absent or has any error.
    """
    if "lora_modules" not in entry:
        return None
    report = ctx.report
    node = entry["lora_modules"]
    errors_before = report.error_count
    value = to_plain(node, value_pos(entry, "lora_modules"), report)
    if report.error_count > errors_before:
        return None
    if not isinstance(node, CommentedMap) or not isinstance(value, dict) or not value:
        report.error(
            value_pos(entry, "lora_modules"),
            f"{label}: lora_modules must be a mapping of adapter name to adapter folder (as vLLM's "
            f"--lora-modules name=path), got {describe_value(value)}",
        )
        return None
    if not _is_true(engine_args.get("enable_lora")):
        report.error(
            key_pos(entry, "lora_modules"),
            f"{label}: lora_modules needs the engine argument enable_lora: true (vLLM starts the engine without "
            "LoRA support otherwise)",
        )
    max_rank = _as_int(engine_args.get("max_lora_rank"), DEFAULT_MAX_LORA_RANK)
    adapters: dict[str, str] = {}
    for name, path in value.items():
        if not isinstance(name, str) or not name.strip():
            report.error(
                key_pos(node, name), f"{label}: an adapter name must be a non-empty string, got {describe_value(name)}"
            )
            continue
        if not isinstance(path, str) or not path.strip():
            report.error(
                value_pos(node, name),
                f"{label}: adapter {name!r} must name an adapter folder, got {describe_value(path)}",
            )
            continue
        folder = _resolve(path, ctx.profile_dir)
        problem = _adapter_problem(folder, path, max_rank)
        if problem is not None:
            report.error(value_pos(node, name), f"{label}: adapter {name!r}: {problem}")
            continue
        adapters[name] = str(folder)
    return adapters if report.error_count == errors_before else None


def check_adapter_names(ctx: Context, node: CommentedMap, models: Mapping[str, ModelProfile]) -> None:
    """No adapter name is a model's name, an alias, or another model's adapter (a request would be ambiguous)."""
    taken: dict[str, str] = {name: f"the name of model {name!r}" for name in models}
    for name, model in models.items():
        for alias in model.aliases:
            taken.setdefault(alias, f"a served_model_name of model {name!r}")
    for name, model in models.items():
        for adapter in model.lora_modules or {}:
            if adapter in taken:
                where = key_pos(node[name]["lora_modules"], adapter)
                ctx.report.error(where, f"model {name!r}: adapter {adapter!r} is already {taken[adapter]}")
            else:
                taken[adapter] = f"an adapter of model {name!r}"


def _adapter_problem(folder: Path, shown: str, max_rank: int) -> str | None:
    """What keeps vLLM from loading the adapter in ``folder``, or ``None``."""
    try:
        if not folder.is_dir():
            resolved = f" (resolved to {folder})" if shown != str(folder) else ""
            return f"adapter folder {shown!r} does not exist{resolved}"
        config_file = folder / ADAPTER_CONFIG
        if not config_file.is_file():
            return f"{shown!r} has no {ADAPTER_CONFIG}: not a PEFT LoRA adapter folder"
        if not any((folder / weights).is_file() for weights in _ADAPTER_WEIGHTS):
            return f"{shown!r} has no adapter weights ({', '.join(_ADAPTER_WEIGHTS)})"
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"{shown!r} cannot be read: {exc}"
    if not isinstance(config, dict):
        return f"{ADAPTER_CONFIG} in {shown!r} is not a JSON object"
    rank = config.get("r")
    if isinstance(rank, int) and rank > max_rank:
        return f"its rank r={rank} is above max_lora_rank ({max_rank}); raise the engine argument max_lora_rank"
    return None


def _resolve(shown: str, profile_dir: Path) -> Path:
    """A relative folder resolves against the profile's folder, as the model's other files do."""
    path = Path(os.path.expanduser(shown))
    return Path(os.path.abspath(path if path.is_absolute() else profile_dir / path))


def _is_true(value: Any) -> bool:
    # As leniently as vLLM's pydantic config reads a bool (the engine-argument check already vetted the type).
    if isinstance(value, str):
        return value.strip().lower() in _TRUE_TEXT
    return value is True or (isinstance(value, int) and value == 1)


def _as_int(value: Any, default: int) -> int:
    try:
        return default if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return default
