"""The edge: what a request meets before a model sees it, the same on a node and at the Ray ingress.

Public names, by the module that owns them: the guards and the viewer (``auth.py``); the API keys, held as
digests and swapped whole by a reload (``key_ring.py``); which models a key may use (``key_scopes.py``) and its
prefix-cache salt (``cache_salts.py``); the ``Host``, cross-site and content-type checks (``checks.py``); the
speech routes' forms (``forms.py``); the one resolver of a request's model name (``model_names.py``); how much one
request may ask (``request_bounds.py``); ``X-Request-Id`` (``request_id.py``); and the secrets that leave the
process environment once read (``withheld_env.py``). It imports only the app's settings from the rest of
``server.api``; admission, streaming, the routes and the stack build on it.
"""

from server.api.edge.auth import AdminGuard, ApiKeyGuard, Viewer, check_metrics_token, is_admin, provide_viewer
from server.api.edge.cache_salts import request_cache_salt, route_salted, salted
from server.api.edge.checks import (
    EDGE_CHECKED_ELSEWHERE,
    LOOPBACK_HOSTS,
    BodyKind,
    EdgeChecks,
    EdgePolicy,
    default_allowed_hosts,
)
from server.api.edge.forms import FORM_BODY, FORM_TASK, form_body_limit, read_form_object
from server.api.edge.key_ring import KeyEntries, KeyRing, every_model_key, read_keys
from server.api.edge.key_scopes import (
    KeyNotSet,
    allowed_model,
    request_holder,
    request_scope,
    shown_to,
    visible,
)
from server.api.edge.model_names import resolve_model_name
from server.api.edge.request_bounds import RequestOutOfBounds, check_request_bounds
from server.api.edge.request_id import add_request_id_header, request_id_in_logs
from server.api.edge.withheld_env import (
    FILE_SUFFIX,
    SecretSourceInvalid,
    check_secret_sources,
    secret_env,
    secret_names,
    secrets_as_files,
    withhold_secrets,
)

__all__ = [
    "EDGE_CHECKED_ELSEWHERE",
    "FILE_SUFFIX",
    "FORM_BODY",
    "FORM_TASK",
    "LOOPBACK_HOSTS",
    "AdminGuard",
    "ApiKeyGuard",
    "BodyKind",
    "EdgeChecks",
    "EdgePolicy",
    "KeyEntries",
    "KeyNotSet",
    "KeyRing",
    "RequestOutOfBounds",
    "SecretSourceInvalid",
    "Viewer",
    "add_request_id_header",
    "allowed_model",
    "check_metrics_token",
    "check_request_bounds",
    "check_secret_sources",
    "default_allowed_hosts",
    "every_model_key",
    "form_body_limit",
    "is_admin",
    "provide_viewer",
    "read_form_object",
    "read_keys",
    "request_cache_salt",
    "request_holder",
    "request_id_in_logs",
    "request_scope",
    "resolve_model_name",
    "route_salted",
    "salted",
    "secret_env",
    "secret_names",
    "secrets_as_files",
    "shown_to",
    "visible",
    "withhold_secrets",
]
