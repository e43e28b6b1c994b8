"""The profile rule across ``switching.memory_budget`` and the models: no model may need more than the budget.

Checked when the budget is a size (a fraction or the default needs the device's memory, which the plan reads:
``turnout validate --plan`` and ``turnout serve``). A model whose files cannot say its footprint (a hub id not in
the local cache) is left to the model path's own warning.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from server.profiles.check_context import Context
from server.profiles.footprint import Footprint, FootprintUnknown, model_footprint
from server.profiles.memory_budget import describe_size, parse_size
from server.profiles.schema import ModelProfile, Switching
from server.profiles.yaml_tree import key_pos

__all__ = ["check_memory_budget", "guess_platform", "too_big"]


def guess_platform() -> str:
    """The platform engines will run on, guessed without importing vLLM or torch: ``hpu``, ``cuda`` or ``cpu``."""
    if importlib.util.find_spec("habana_frameworks") is not None:
        return "hpu"
    return "cuda" if Path("/proc/driver/nvidia/gpus").is_dir() else "cpu"


def too_big(item: Footprint, budget: int) -> str:
    """The error for a model whose footprint alone exceeds ``budget``, with every figure and the fix that can work.

    Only the KV cache shrinks with ``max_model_len``; when the weights and the engine's own memory alone exceed the
    budget, no KV setting fits the model, and the message says which of the two takes more.
    """
    needs = (
        f"model {item.model!r} needs {describe_size(item.total_bytes)} (weights {describe_size(item.weight_bytes)}, "
        f"KV cache {describe_size(item.kv_cache_bytes)}, engine {describe_size(item.overhead_bytes)}), more than "
        f"switching.memory_budget {describe_size(budget)}"
    )
    fixed = item.weight_bytes + item.overhead_bytes
    if fixed < budget:
        return (
            f"{needs}; its KV cache must shrink to at most {describe_size(budget - fixed)}: lower its "
            "max_model_len or max_num_seqs, set its kv_cache_memory_bytes, or raise the budget"
        )
    larger = (
        "the engine's own memory (measured per engine on this platform)"
        if item.overhead_bytes >= item.weight_bytes
        else "its weights (a smaller or quantized model takes less)"
    )
    return (
        f"{needs}; even with no KV cache its weights and its engine take {describe_size(fixed)}, mostly {larger}, "
        f"so lowering max_model_len cannot fit it: raise the budget to at least {describe_size(item.total_bytes)}"
    )


def check_memory_budget(
    ctx: Context, tree: CommentedMap, models: Mapping[str, ModelProfile], switching: Switching
) -> None:
    """Report, at the model's key, each model whose footprint alone exceeds a budget given as a size."""
    if not isinstance(switching.memory_budget, str):
        return
    budget = parse_size(switching.memory_budget)
    platform = guess_platform()
    node = tree.get("models")
    for name, model in models.items():
        try:
            item = model_footprint(name, model, platform=platform, env=ctx.env)
        except FootprintUnknown:
            continue
        if item.total_bytes > budget and isinstance(node, CommentedMap) and name in node:
            ctx.report.error(key_pos(node, name), too_big(item, budget))
