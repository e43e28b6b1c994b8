"""What differs between the vLLMs the adapter supports (0.26.0 to 0.33.x): the adapter's one table of it.

Three kinds of difference, each a table here and nowhere else:

- `WHERE`: a name that moved between releases, with every module it has lived in, newest first. `moved` returns
  it from the first module of the installed vLLM that has it (feature detection, not version arithmetic, so a
  vLLM-Gaudi build of an in-between commit works too).
- `SINCE`: a feature older vLLMs lack entirely (its route then answers "not supported by this vLLM").
  `optional` returns None for it there.
- `NEWER_KWARGS`: settings a serving class or config accepts only in newer vLLMs. `supported_kwargs` drops one
  the installed callee lacks while it holds its "off" value, and refuses it (`FrontendConfigError`, naming the
  setting) when the profile turned it on: a setting is never silently ignored.

``scripts/vllm_source_check.py`` reads these tables from this file's source (without importing vLLM) and checks
them, and every other vLLM name the adapter and the in-place plugin import, against the 0.26.0 and 0.33.0
wheels.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from server.frontend.settings import FrontendConfigError

__all__ = ["NEWER_KWARGS", "SINCE", "WHERE", "moved", "optional", "supported_kwargs"]

#: Each moved name: the modules it lived in, newest first (0.32 / 0.33 first, 0.26 last).
WHERE: dict[str, tuple[str, ...]] = {
    "FrontendArgs": (
        "vllm.entrypoints.common.cli_args",  # 0.33
        "vllm.entrypoints.launchers.cli_args",  # 0.32
        "vllm.entrypoints.openai.cli_args",  # 0.26 to 0.31
    ),
    "ErrorResponse": ("vllm.entrypoints.serve.engine.protocol", "vllm.entrypoints.openai.engine.protocol"),
    "create_error_response": (
        "vllm.entrypoints.serve.exception_handling.error_response",
        "vllm.entrypoints.serve.utils.error_response",  # 0.26
    ),
    "clean_loc_for_param": (
        "vllm.entrypoints.serve.exception_handling.handlers.validation",
        "vllm.entrypoints.serve.utils.server_utils",  # 0.26
    ),
    "ChatTemplateConfig": ("vllm.renderers.chat_utils", "vllm.entrypoints.chat_utils"),
    "load_chat_template": ("vllm.renderers.chat_utils", "vllm.entrypoints.chat_utils"),
    "StructuredDecisionRequest": ("vllm.entrypoints.generate.structured_decisions.protocol",),
    "ServingStructuredDecisions": ("vllm.entrypoints.generate.structured_decisions.serving",),
    "ReadContext": (
        "vllm.entrypoints.openai.decisions.strategies",  # 0.33
        "vllm.entrypoints.generate.structured_decisions.strategies",  # 0.32
    ),
    "select_read_strategy": (
        "vllm.entrypoints.openai.decisions.strategies",
        "vllm.entrypoints.generate.structured_decisions.strategies",
    ),
    "validate_cache_salt": ("vllm.entrypoints.generate.base.protocol",),
}

#: Names whose feature older vLLMs lack (`optional` gives None there), with the first release that has it.
SINCE: dict[str, str] = {
    "StructuredDecisionRequest": "0.32.0",
    "ServingStructuredDecisions": "0.32.0",
    "ReadContext": "0.32.0",
    "select_read_strategy": "0.32.0",
    # 0.26 checks a salt inside each request model only (``_salted_requests.check_cache_salt`` does it there).
    "validate_cache_salt": "0.27.0",
}

#: Keyword settings some callees take only in newer vLLMs (0.26 to 0.31 lack them), by callee class name, each
#: with its off value: the profile default, which a vLLM without the setting behaves as.
_STRICT_OFF = {"tool_strict_level": "auto"}
NEWER_KWARGS: dict[str, dict[str, Any]] = {
    "OpenAIServingChat": _STRICT_OFF,
    "OpenAIServingChatBatch": _STRICT_OFF,
    "OnlineRenderer": {**_STRICT_OFF, "trust_request_mm_kwargs": False},
    "AnthropicServingMessages": {
        **_STRICT_OFF,
        "enable_log_outputs": False,
        "enable_log_deltas": True,
        "disabled_thinking_effort": "auto",
    },
    "OpenAIServingResponses": {**_STRICT_OFF, "enable_per_request_metrics": False},
    "ChatTemplateConfig": {"trust_request_mm_kwargs": False},
}


def _lookup(name: str) -> Any | None:
    for module_name in WHERE[name]:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # this vLLM has no such module: try the next home
            raise  # the module is there but one of its own imports is missing: not ours to hide
        if hasattr(module, name):
            return getattr(module, name)
    return None


def moved(name: str) -> Any:
    """The vLLM object `name` (a key of `WHERE`) from wherever the installed vLLM keeps it.

    Raises:
        ImportError: No module of its `WHERE` entry has it (a vLLM outside the supported range).
    """
    found = _lookup(name)
    if found is None:
        raise ImportError(f"vLLM has no {name} in any of {', '.join(WHERE[name])}")
    return found


def optional(name: str) -> Any | None:
    """Like `moved`, but None where the installed vLLM predates the feature (`SINCE`)."""
    found = _lookup(name)
    if found is None and name not in SINCE:
        raise ImportError(f"vLLM has no {name} in any of {', '.join(WHERE[name])}")
    return found


def supported_kwargs(callee: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`kwargs` less the `NEWER_KWARGS` of `callee` that the installed vLLM's `callee` does not take.

    A dropped setting must hold its off value (the `NEWER_KWARGS` entry), which is how that vLLM behaves.

    Raises:
        FrontendConfigError: The profile turned on a setting this vLLM's `callee` does not have.
    """
    newer = NEWER_KWARGS.get(getattr(callee, "__name__", ""), {})
    if not newer:
        return dict(kwargs)
    accepted = inspect.signature(callee).parameters
    kept: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in accepted or key not in newer:
            kept[key] = value
        elif value != newer[key]:
            import vllm

            raise FrontendConfigError(
                f"{key}={value!r} needs a newer vLLM than the installed {vllm.__version__} (it has no such setting)"
            )
    return kept
