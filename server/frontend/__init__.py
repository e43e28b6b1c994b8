"""Per-model OpenAI frontends over vLLM's serving classes.

`build_bundle(model_name, engine, settings)` gives a `FrontendBundle` with the model's chat, completion,
embedding and tokenization handlers. Only `server.frontend.vllm_adapter` imports vLLM's frontend; the settings,
operation and result types here are plain, so importing this package is cheap until a name of vLLM's side is
first used: `FrontendBundle`, `build_bundle` and the adapter's functions the CLI and the Ray node call (the
parser registry, the renderer, the request body schemas, the frontend flags) are looked up lazily, on first use.

This face is all other packages import (``tests/test_layers.py``); ``vllm_adapter`` and the other modules behind
it are the frontend's own. A layer above ``profiles`` and beside ``engine`` (see ``server/__init__.py``): it
imports neither the engine nor a web framework.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from server.frontend.openai_errors import error_body, unsupported_route_body
from server.frontend.operations import OPERATION_SPECS, WITHHELD, AudioUpload, Operation, OperationSpec
from server.frontend.probe import ProbeAnswer, probe_bundle
from server.frontend.profile_settings import build_bundle_for_profile, settings_for_model
from server.frontend.results import BundleResult, JsonResult, StreamResult
from server.frontend.settings import FrontendConfigError, FrontendSettings

if TYPE_CHECKING:
    from server.frontend.bundle import FrontendBundle, build_bundle
    from server.frontend.vllm_adapter import (
        build_renderer,
        load_parser_plugins,
        parse_frontend_flags,
        parser_registry,
        request_body_schemas,
        set_fingerprint_mode,
    )

__all__ = [
    "OPERATION_SPECS",
    "WITHHELD",
    "AudioUpload",
    "BundleResult",
    "FrontendBundle",
    "FrontendConfigError",
    "FrontendSettings",
    "JsonResult",
    "Operation",
    "OperationSpec",
    "ProbeAnswer",
    "StreamResult",
    "build_bundle",
    "build_bundle_for_profile",
    "build_renderer",
    "error_body",
    "load_parser_plugins",
    "parse_frontend_flags",
    "parser_registry",
    "probe_bundle",
    "request_body_schemas",
    "set_fingerprint_mode",
    "settings_for_model",
    "unsupported_route_body",
]

#: The names behind vLLM's import (seconds), by the module that holds them: API fakes and `turnout validate`
#: need only the types above.
_LAZY = {
    "FrontendBundle": "bundle",
    "build_bundle": "bundle",
    "build_renderer": "vllm_adapter",
    "load_parser_plugins": "vllm_adapter",
    "parse_frontend_flags": "vllm_adapter",
    "parser_registry": "vllm_adapter",
    "request_body_schemas": "vllm_adapter",
    "set_fingerprint_mode": "vllm_adapter",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
