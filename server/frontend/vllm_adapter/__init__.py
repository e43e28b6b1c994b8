"""Turnout's one adapter over vLLM's OpenAI frontend: serving classes, protocol models, renderers, frontend flags,
and the tool and reasoning parser registries. No other package imports vLLM's entrypoints.

This ``__init__`` is the package's one face: the rest of Turnout imports these names from
``server.frontend.vllm_adapter`` and never its underscore modules (``tests/frontend/test_boundaries.py`` holds
both rules). The modules, one job each:

- ``_frontend``: `VllmFrontend`, vLLM's serving objects for one model (as `vllm serve`'s ``init_app_state``),
  and `build_renderer`, the renderer the engine layer's in-place swap rebuilds.
- ``_operations``: the serving objects of vLLM's other routes (Responses, Messages, pooling, scoring, ...).
- ``_calls``: how a serving call becomes a `JsonResult` or `StreamResult`, and request body validation.
- ``_schemas``: vLLM's request models as JSON Schema, for the OpenAPI document.
- ``_parsers``: the parser registries' names, and custom parser plugin files loaded into them.
- ``_flags``: vLLM's frontend flags (`FrontendArgs`), parsed by vLLM.
- ``_tool_server``: the Responses API's tool server, opened once per process.
- ``_moved``: what differs between the supported vLLMs (0.26.0 to 0.33.x): the one table of moved names,
  features older vLLMs lack, and settings only newer ones take.

Developed on vLLM 0.32.0; the version check (``server/profiles/vllm_version.py``) refuses a vLLM outside the
supported range before the imports below can fail obscurely. Importing this package pulls in vLLM (seconds):
import it lazily.
"""

from __future__ import annotations

# Before any other vLLM import: importing this package is the version check (its modules import it first).
from server.profiles.vllm_version import check_vllm_version

check_vllm_version()

# isort: split
from server.frontend.vllm_adapter._flags import frontend_flag_names, parse_frontend_flags, set_fingerprint_mode
from server.frontend.vllm_adapter._frontend import VllmFrontend, build_renderer
from server.frontend.vllm_adapter._operations import OPERATIONS_VLLM_LACKS
from server.frontend.vllm_adapter._parsers import load_parser_plugins, parser_registry
from server.frontend.vllm_adapter._schemas import request_body_schemas

__all__ = [
    "OPERATIONS_VLLM_LACKS",
    "VllmFrontend",
    "build_renderer",
    "frontend_flag_names",
    "load_parser_plugins",
    "parse_frontend_flags",
    "parser_registry",
    "request_body_schemas",
    "set_fingerprint_mode",
]
