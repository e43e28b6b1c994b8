"""Guards: the admin bearer token and the optional API keys, compared as SHA-256 digests in constant time.

The secrets live only in :class:`ApiSettings` (``repr=False``) and the :class:`KeyRing`, and are never logged. An
API key is compared with every configured key, with no early exit (``key_ring.py``), so the time a check takes
does not say which key (if any) matched. The guards are coroutines: Litestar runs a sync guard in a worker thread,
a thread hop on every request for a check that takes microseconds.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any, Final

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from server.api.edge.cache_salts import record_cache_salt
from server.api.edge.key_ring import NO_MATCH, KeyRing, digest
from server.api.edge.key_scopes import record_holder, record_scope
from server.api.settings import ApiSettings

__all__ = ["AdminGuard", "ApiKeyGuard", "Viewer", "check_metrics_token", "is_admin", "provide_viewer"]

#: What an unauthenticated caller of a server with keys may see of the models: nothing.
NOTHING: Final[frozenset[str]] = frozenset()


def _bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(given: str | None, expected: str) -> bool:
    return hmac.compare_digest(digest(given or ""), digest(expected)) and given is not None


def _given_keys(connection: ASGIConnection[Any, Any, Any, Any]) -> tuple[str | None, str | None]:
    return _bearer(connection), connection.headers.get("x-api-key")


def check_metrics_token(connection: ASGIConnection[Any, Any, Any, Any], settings: ApiSettings, *, keyed: bool) -> None:
    """``/metrics``: the bearer token of ``server.metrics_token_env`` or the admin token, when a metrics token is
    set or the server has keys (``keyed``: its labels name the models a key may not see) and the profile does not
    make it public (``server.metrics_public``).

    Raises:
        NotAuthorizedException: the request carries neither token.
    """
    token = settings.metrics_token
    if token is None and (not keyed or settings.metrics_public):
        return
    if (token is not None and _matches(_bearer(connection), token)) or is_admin(connection, settings):
        return
    raise NotAuthorizedException(
        "Missing or invalid metrics token: send 'Authorization: Bearer <token>' with the metrics token "
        "(server.metrics_token_env) or the admin token."
    )


def is_admin(connection: ASGIConnection[Any, Any, Any, Any], settings: ApiSettings) -> bool:
    """Whether the connection may see admin details: a valid admin token, or dev mode without a token."""
    if settings.admin_token is None:
        return settings.dev_mode
    return _matches(_bearer(connection), settings.admin_token)


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who calls an unguarded route (``/health``, ``/ready``, ``/status``), as far as model names go.

    Attributes:
        admin: The admin token was sent (or dev mode runs without one).
        scope: The models it may see named: None for every model (no key is configured, the admin, or a key that
            may use every model); a limited key's own; none for anyone else.
    """

    admin: bool
    scope: frozenset[str] | None

    def sees(self, model: str | None) -> bool:
        """Whether ``model`` may be named to this caller."""
        return model is not None and (self.scope is None or model in self.scope)


async def provide_viewer(
    request: Request[Any, Any, Any], api_settings: NamedDependency[ApiSettings], key_ring: NamedDependency[KeyRing]
) -> Viewer:
    """The :class:`Viewer` of ``request`` (a dependency of the unguarded routes)."""
    admin = is_admin(request, api_settings)
    if not key_ring.keyed or admin:
        return Viewer(admin=admin, scope=None)
    matched = key_ring.match(_given_keys(request))
    return Viewer(admin=False, scope=NOTHING if matched is NO_MATCH else matched.models)


class AdminGuard:
    """Admin routes: a valid bearer token; 403 when no token is configured (unless dev mode)."""

    def __init__(self, settings: ApiSettings) -> None:
        self._settings = settings

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        settings = self._settings
        if settings.admin_token is None:
            if settings.dev_mode:
                return
            raise PermissionDeniedException(
                f"Admin routes are disabled: set the {settings.admin_token_env} environment variable (its name "
                "comes from the profile's server.admin_token_env) and send 'Authorization: Bearer <token>', or "
                "start the server with --dev (or VLLM_SERVER_DEV_MODE=1) on a trusted network."
            )
        if not _matches(_bearer(connection), settings.admin_token):
            raise NotAuthorizedException("Missing or invalid admin token: send 'Authorization: Bearer <token>'.")


class ApiKeyGuard:
    """Serving routes: the API keys, when any is configured (the single one as vLLM's ``--api-key``).

    Accepted as OpenAI's clients send them (``Authorization: Bearer <key>``) and as Anthropic's do (``x-api-key``),
    on every serving route: a client picks its header by SDK, not by path. The single key may use every model;
    a key of ``server.api_keys`` only its own, which the guard records for the routes (``key_scopes.py``), with
    the salt of the key's cache group (``cache_salts.py``) and the key's identity (``key_scopes.request_holder``:
    a stored response is its key's alone). The keys are the ring's as of this request: a reload
    that revokes one applies from the next request.
    """

    def __init__(self, keys: KeyRing) -> None:
        self._keys = keys

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not self._keys.keyed:
            return
        matched = self._keys.match(_given_keys(connection))
        if matched is not NO_MATCH:
            record_scope(connection, matched.models)
            record_cache_salt(connection, matched.cache_salt)
            record_holder(connection, matched.holder)
            return
        raise NotAuthorizedException(
            "Missing or invalid API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')."
        )
