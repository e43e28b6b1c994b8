"""Per-model OpenAI frontends over vLLM's serving classes.

`build_bundle(model_name, engine, settings)` gives a `FrontendBundle` with the model's chat, completion,
embedding and tokenization handlers. Only `server.frontend.vllm_adapter` imports vLLM's frontend; the settings
and result types here are plain, so importing this package is cheap until `FrontendBundle` or `build_bundle`
is first used.

A layer above ``profiles`` and beside ``engine`` (see ``server/__init__.py``): it imports neither the engine nor
a web framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from server.frontend.openai_errors import error_body
from server.frontend.profile_settings import build_bundle_for_profile, settings_for_model
from server.frontend.results import BundleResult, JsonResult, StreamResult
from server.frontend.settings import ChatTemplateContentFormat, FrontendConfigError, FrontendSettings

if TYPE_CHECKING:
    from server.frontend.bundle import FrontendBundle, build_bundle

__all__ = [
    "BundleResult",
    "ChatTemplateContentFormat",
    "FrontendBundle",
    "FrontendConfigError",
    "FrontendSettings",
    "JsonResult",
    "StreamResult",
    "build_bundle",
    "build_bundle_for_profile",
    "error_body",
    "settings_for_model",
]

_LAZY = {"FrontendBundle", "build_bundle"}


def __getattr__(name: str) -> Any:
    # The bundle module imports vLLM (seconds); API fakes and `turnout validate` need only the types above.
    if name in _LAZY:
        from server.frontend import bundle

        return getattr(bundle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
