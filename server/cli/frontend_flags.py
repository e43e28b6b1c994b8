"""What ``turnout serve`` does with each of vLLM's frontend flags (the `FrontendArgs` of `vllm serve`).

Every field of vLLM's `FrontendArgs` is in exactly one table (``tests/cli/test_frontend_flags.py`` reads vLLM to
hold that, so a vLLM upgrade that adds a flag fails until it is placed):

- `TURNOUT_OPTIONS`: ``turnout serve`` has the option itself, with the same meaning.
- `SERVER_FLAGS`: applied to the one HTTP server (TLS, CORS, root path, middleware, uvicorn, parser plugins).
- `MODEL_FLAGS`: the default of a `FrontendSettings` field for every model; most are also profile keys, and a
  model's own key wins.
- `REFUSED`: a flag that cannot apply to a multi-model server, or that Turnout does not implement yet; giving it
  is a usage error that says which and why.
"""

from __future__ import annotations

import importlib
import inspect
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from server.cli.key_options import API_KEY_ALTERNATIVES

__all__ = [
    "MODEL_FLAGS",
    "REFUSED",
    "SERVER_FLAGS",
    "TURNOUT_OPTIONS",
    "FrontendFlagError",
    "FrontendFlags",
    "split_frontend_flags",
    "wrap_middleware",
]

#: ``turnout serve``'s own options (click parses them before vLLM's parser sees the rest).
TURNOUT_OPTIONS: Final = {
    "host": "--host: the address to bind",
    "port": "--port: the port to bind",
    "chat_template": "--chat-template: the default chat template of models whose profile sets none",
    "enable_auto_tool_choice": "--enable-auto-tool-choice: the default for models whose profile leaves it unset",
    "tool_call_parser": "--tool-call-parser: the default tool parser of models whose profile sets none",
}

#: Flags applied to the server as a whole, with what each does.
SERVER_FLAGS: Final = {
    "ssl_keyfile": "TLS: the server's private key file (uvicorn)",
    "ssl_certfile": "TLS: the server's certificate file (uvicorn)",
    "ssl_ca_certs": "TLS: CA certificates to verify client certificates with (uvicorn)",
    "ssl_cert_reqs": "TLS: whether a client certificate is required (ssl.CERT_NONE=0, OPTIONAL=1, REQUIRED=2)",
    "ssl_ciphers": "TLS: the cipher list (uvicorn)",
    "enable_ssl_refresh": "TLS: reload the certificate chain (and CA bundle) when its files change",
    "allowed_origins": "CORS: allowed origins (JSON list); CORS is on only when given (no default '*'; an explicit "
    "'[\"*\"]' is taken, with a warning)",
    "allowed_methods": "CORS: allowed methods (JSON list; default all)",
    "allowed_headers": "CORS: allowed headers (JSON list; default all)",
    "allow_credentials": "CORS: allow credentials",
    "root_path": "the ASGI root path, behind a proxy that strips a path prefix",
    "middleware": "ASGI middleware by import path, outermost last: a class taking the app, or an "
    "`async def (request, call_next)` function (Starlette's HTTP middleware), as vLLM's --middleware",
    "uvicorn_log_level": "uvicorn's log level (default: --log-level)",
    "disable_uvicorn_access_log": "no uvicorn access log",
    "sse_keep_alive_interval": "SSE: a ': keep-alive' comment whenever a stream is idle this many seconds (every "
    "streamed route); also the interval of the ': waiting for NAME to load' comments",
    "tool_parser_plugin": "a tool parser plugin file, imported before the profile is validated, so its parsers "
    "are valid tool_call_parser names (turnout validate takes it too)",
    "uds": "serve on this Unix domain socket instead of --host/--port (uvicorn)",
    "disable_access_log_for_endpoints": "comma-separated paths whose requests the access log leaves out",
    "enable_request_id_headers": "every answer carries X-Request-Id: the request's own, or a new random one",
    "enable_tokenizer_info_endpoint": "serve GET /tokenizer_info: the active model's tokenizer configuration",
    "fingerprint_mode": "system_fingerprint of every model's answers: full, hash, custom or none (each model's "
    "fingerprint hashes its own engine config)",
    "fingerprint_value": "the system_fingerprint of --fingerprint-mode custom",
}

#: Flags that give every model a frontend default (`FrontendSettings` field of the same name).
MODEL_FLAGS: Final = {
    "chat_template_content_format": "how message content reaches the template (profile key too)",
    "response_role": "the role of generated messages (profile key too)",
    "default_chat_template_kwargs": "keyword arguments for every template render (profile key too)",
    "trust_request_chat_template": "accept a request's own chat template (profile key too)",
    "return_tokens_as_token_ids": "logprobs name tokens as token_id:N (profile key too)",
    "exclude_tools_when_tool_choice_none": "leave tools out of the prompt for tool_choice none (profile key too)",
    "enable_prompt_tokens_details": "report cached prompt tokens in usage (profile key too)",
    "enable_force_include_usage": "usage in every response, streams too (profile key too)",
    "max_log_len": "the longest prompt the request log prints (with the engine flag --enable-log-requests)",
    "trust_request_mm_kwargs": "accept a request's mm_processor_kwargs and media_io_kwargs (profile key too)",
    "tool_strict_level": "the floor of structural-tag tool calling (profile key too)",
    "enable_per_request_metrics": "per-request timing metrics in answers (profile key too)",
    "enable_log_outputs": "log generated outputs (needs --enable-log-requests; profile key too)",
    "enable_log_deltas": "with --enable-log-outputs, log streamed deltas too (profile key too)",
    "anthropic_disabled_thinking_effort": "reasoning effort of a Messages request with thinking disabled "
    "(profile key too)",
    "enable_flash_late_interaction": "fused MaxSim scoring of late-interaction models, in the frontend and (off) "
    "in every engine's pooler config",
    "tool_server": "the Responses API's tool server (MCP host:port pairs, or demo), opened once and shared by "
    "every generate model, as vLLM shares it",
}

#: Flags ``turnout serve`` refuses, with why.
REFUSED: Final = {
    "api_key": API_KEY_ALTERNATIVES,
    "lora_modules": "LoRA adapters belong to one model: set lora_modules in its profile",
    "enable_server_load_tracking": "a load counter of one engine's API server; Turnout reports /admin/status",
    "cohere_is_reasoning_model": "Cohere's chat API (VLLM_ENABLE_COHERE_API): not served by Turnout",
    "cohere_format": "Cohere's chat API (VLLM_ENABLE_COHERE_API): not served by Turnout",
    "log_error_stack": "Turnout always logs a failed request's traceback on the server and never sends it",
    "tokens_only": "a render-only frontend for one engine (scale-out); Turnout owns its engines",
    "enable_scale_out": "scale-out routes of one engine for an external router; Turnout is the router",
    "grpc_port": "vLLM's gRPC server of one engine: not offered",
    "data_parallel_supervisor_port": "data-parallel API server supervision of one engine",
    "dp_supervisor_probe_interval_s": "data-parallel API server supervision of one engine",
    "dp_supervisor_probe_timeout_s": "data-parallel API server supervision of one engine",
    "dp_supervisor_probe_failure_threshold": "data-parallel API server supervision of one engine",
    "disable_fastapi_docs": "FastAPI's docs; Turnout's Litestar docs are at /docs and always on",
    "enable_offline_docs": "FastAPI's docs; Turnout's Litestar docs are at /docs and always on",
    "h11_max_incomplete_event_size": "an h11 limit; Turnout serves HTTP with httptools",
    "h11_max_header_count": "an h11 limit; Turnout serves HTTP with httptools",
}


class FrontendFlagError(ValueError):
    """A frontend flag that ``turnout serve`` refuses, with the reason."""


@dataclass(frozen=True, kw_only=True)
class FrontendFlags:
    """vLLM frontend flags given to ``turnout serve``, split by where they apply.

    Attributes:
        server: `SERVER_FLAGS` given, by field name.
        model_defaults: `MODEL_FLAGS` given, by `FrontendSettings` field name.
    """

    server: Mapping[str, Any]
    model_defaults: Mapping[str, Any]

    def uvicorn_options(self) -> dict[str, Any]:
        """The ``uvicorn.Config`` keyword arguments the TLS, root-path and log flags make."""
        server = self.server
        options: dict[str, Any] = {
            key: server[key] for key in ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "ssl_ciphers") if key in server
        }
        if "ssl_cert_reqs" in server:
            options["ssl_cert_reqs"] = ssl.VerifyMode(int(server["ssl_cert_reqs"]))
        if "root_path" in server:
            options["root_path"] = server["root_path"]
        if "uds" in server:
            options["uds"] = server["uds"]
        if server.get("disable_uvicorn_access_log"):
            options["access_log"] = False
        if "uvicorn_log_level" in server:
            options["log_level"] = server["uvicorn_log_level"]
        return options

    def access_log_exclusions(self) -> frozenset[str]:
        """The paths ``--disable-access-log-for-endpoints`` leaves out of the access log (split as vLLM splits)."""
        given = str(self.server.get("disable_access_log_for_endpoints") or "")
        return frozenset(path.strip() for path in given.split(",") if path.strip())

    def cors(self) -> dict[str, Any] | None:
        """CORS settings, or None when ``--allowed-origins`` was not given.

        Only the origins ``--allowed-origins`` lists may cross (the edge's cross-site check lets an origin CORS
        allows through): no default ``*`` (older vLLM's, which Turnout once filled in for any CORS flag) lets any
        site's page use the models. The other flags keep vLLM's defaults.
        """
        if "allowed_origins" not in self.server:
            return None
        return {
            "allow_origins": list(self.server["allowed_origins"]),
            "allow_methods": list(self.server.get("allowed_methods", ["*"])),
            "allow_headers": list(self.server.get("allowed_headers", ["*"])),
            "allow_credentials": bool(self.server.get("allow_credentials", False)),
        }

    def cors_warnings(self) -> list[str]:
        """What to warn about at start: CORS flags that do nothing without ``--allowed-origins``, and an origin
        list that lets every site's pages in."""
        others = [key for key in _CORS_DETAIL_FLAGS if key in self.server]
        if "allowed_origins" not in self.server:
            if not others:
                return []
            named = ", ".join(f"--{key.replace('_', '-')}" for key in others)
            return [
                f"{named} without --allowed-origins: CORS stays off and no other site's page may use the server "
                "(the origins do not default to '*'); list them with --allowed-origins."
            ]
        if "*" in self.server["allowed_origins"]:
            return [
                "--allowed-origins includes '*': a page of any web site the server's users open may use and change "
                "its models (the cross-site check lets every origin through); list the origins that need it instead."
            ]
        return []


#: The CORS flags besides ``--allowed-origins``: they shape what a listed origin may do.
_CORS_DETAIL_FLAGS: Final = ("allowed_methods", "allowed_headers", "allow_credentials")


def split_frontend_flags(given: Mapping[str, Any]) -> FrontendFlags:
    """Sort the frontend flags given (vLLM's field names) into the tables; refuse the `REFUSED` ones.

    Raises:
        FrontendFlagError: A refused flag, naming it and the reason.
    """
    refused = [f"--{key.replace('_', '-')}: {REFUSED[key]}" for key in given if key in REFUSED]
    if refused:
        raise FrontendFlagError("not accepted by turnout serve: " + "; ".join(refused))
    return FrontendFlags(
        server={key: value for key, value in given.items() if key in SERVER_FLAGS},
        model_defaults={key: value for key, value in given.items() if key in MODEL_FLAGS},
    )


def wrap_middleware(app: Any, import_paths: list[str]) -> Any:
    """``app`` inside the ASGI middleware named by ``import_paths`` (``package.module.name``), as vLLM wraps it.

    Raises:
        FrontendFlagError: A path that does not import, or names neither a class nor a coroutine function.
    """
    for path in import_paths:
        module_name, _, name = path.rpartition(".")
        try:
            middleware = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise FrontendFlagError(f"--middleware {path!r} cannot be imported: {exc}") from None
        if inspect.isclass(middleware):
            wrapper: Any = middleware
            app = wrapper(app)
        elif inspect.iscoroutinefunction(middleware):
            from starlette.middleware import base

            http_middleware: Any = base.BaseHTTPMiddleware  # (app, dispatch): Starlette's HTTP middleware
            app = http_middleware(app, dispatch=middleware)
        else:
            raise FrontendFlagError(f"--middleware {path!r} is neither a class nor an async function")
    return app
