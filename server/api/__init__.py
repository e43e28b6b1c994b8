"""The Litestar OpenAI-compatible API: thin controllers over the engine manager's bundles.

It sits above ``engine`` and ``frontend`` and below ``cluster`` and ``cli`` (see ``server/__init__.py``).

This face is all other packages import (``tests/test_layers.py``): the app (:func:`create_app`) and its settings,
the one path from a profile file to its serving stack that ``turnout serve``, a reload and a Ray node all take
(:class:`StackSource`, in ``server/api/stack/``), and the edge pieces the CLI and the Ray ingress build the same way
``turnout serve`` does (the keys and their scopes, model names, guards, error shapes, the reloader and the profile
watch). The modules behind it are the API's own to move.
"""

from server.api.app import create_app
from server.api.auth import AdminGuard, ApiKeyGuard, is_admin
from server.api.connection_limits import ConnectionLimits, OpenConnections, limited_protocol
from server.api.edge import EDGE_CHECKED_ELSEWHERE, LOOPBACK_HOSTS, EdgeChecks, EdgePolicy
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
from server.api.key_ring import KeyRing, read_keys
from server.api.key_scopes import KeyNotSet, allowed_model, visible
from server.api.model_cards import model_card, served_names
from server.api.model_names import resolve_model_name
from server.api.profile_watch import watch_profile
from server.api.reloader import Reloader, ReloadUnavailable
from server.api.request_admission import ServingBundle, check_serves_form
from server.api.request_bounds import RequestOutOfBounds, check_request_bounds
from server.api.route_table import RouteTable
from server.api.serving_settings import ServingFlags, api_settings
from server.api.settings import ApiSettings
from server.api.stack import (
    ServingStack,
    SourceOptions,
    StackOptions,
    StackSource,
    assemble_stack,
    without_preloads,
)
from server.api.withheld_env import (
    FILE_SUFFIX,
    SecretSourceInvalid,
    check_secret_sources,
    secret_env,
    secret_names,
    secrets_as_files,
    withhold_secrets,
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
