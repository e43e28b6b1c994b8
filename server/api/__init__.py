"""The Litestar OpenAI-compatible API: thin controllers over the engine manager's bundles.

It sits above ``engine`` and ``frontend`` and below ``cluster`` and ``cli`` (see ``server/__init__.py``).

This face is all other packages import (``tests/test_layers.py``): the app (:func:`create_app`) and its settings,
the one path from a profile file to its serving stack that ``turnout serve``, a reload and a Ray node all take
(:class:`StackSource`, in ``server/api/stack/``), and the edge pieces the CLI and the Ray ingress build the same way
``turnout serve`` does (the keys and their scopes, model names, guards, error shapes, the reloader and the profile
watch). The modules behind it are the API's own to move.

Inside, the packages go by role, each entered through its ``__init__``, lowest first: ``edge`` (what a request
meets first), ``admission``, ``reload``, ``streaming`` (how an answer leaves), ``controllers`` (the routes) and
``stack``; the app, its settings, the error shapes, the metrics and the OpenAPI document stay at the top
(``docs/design.md``, "API packages").
"""

from server.api.admission import ConnectionLimits, OpenConnections, ServingBundle, check_serves_form, limited_protocol
from server.api.app import create_app
from server.api.controllers import model_card, served_names
from server.api.edge import (
    EDGE_CHECKED_ELSEWHERE,
    FILE_SUFFIX,
    LOOPBACK_HOSTS,
    AdminGuard,
    ApiKeyGuard,
    EdgeChecks,
    EdgePolicy,
    KeyNotSet,
    KeyRing,
    RequestOutOfBounds,
    SecretSourceInvalid,
    allowed_model,
    check_request_bounds,
    check_secret_sources,
    every_model_key,
    is_admin,
    read_keys,
    resolve_model_name,
    secret_env,
    secret_names,
    secrets_as_files,
    visible,
    withhold_secrets,
)
from server.api.errors import (
    ANTHROPIC_API,
    ANTHROPIC_EXCEPTION_HANDLERS,
    EXCEPTION_HANDLERS,
    OPENAI_API,
    RESPONSES_API,
    ApiShape,
    RouteUnsupported,
    engine_error_body,
    error_response,
    retry_after_header,
)
from server.api.reload import Reloader, ReloadUnavailable, watch_profile
from server.api.route_table import RouteTable
from server.api.settings import ApiSettings
from server.api.stack import (
    ServingFlags,
    ServingStack,
    SourceOptions,
    StackOptions,
    StackSource,
    api_settings,
    assemble_stack,
    without_preloads,
)

__all__ = [
    "ANTHROPIC_API",
    "ANTHROPIC_EXCEPTION_HANDLERS",
    "EDGE_CHECKED_ELSEWHERE",
    "EXCEPTION_HANDLERS",
    "FILE_SUFFIX",
    "LOOPBACK_HOSTS",
    "OPENAI_API",
    "RESPONSES_API",
    "AdminGuard",
    "ApiKeyGuard",
    "ApiSettings",
    "ApiShape",
    "ConnectionLimits",
    "EdgeChecks",
    "EdgePolicy",
    "KeyNotSet",
    "KeyRing",
    "OpenConnections",
    "ReloadUnavailable",
    "Reloader",
    "RequestOutOfBounds",
    "RouteTable",
    "RouteUnsupported",
    "SecretSourceInvalid",
    "ServingBundle",
    "ServingFlags",
    "ServingStack",
    "SourceOptions",
    "StackOptions",
    "StackSource",
    "allowed_model",
    "api_settings",
    "assemble_stack",
    "check_request_bounds",
    "check_secret_sources",
    "check_serves_form",
    "create_app",
    "engine_error_body",
    "error_response",
    "every_model_key",
    "is_admin",
    "limited_protocol",
    "model_card",
    "read_keys",
    "resolve_model_name",
    "retry_after_header",
    "secret_env",
    "secret_names",
    "secrets_as_files",
    "served_names",
    "visible",
    "watch_profile",
    "withhold_secrets",
    "without_preloads",
]
