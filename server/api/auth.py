"""Guards: the admin bearer token and the optional API keys, compared in constant time.

The secrets live only in :class:`ApiSettings` (``repr=False``) and are never logged. An API key is compared with
every configured key, with no early exit, so the time a check takes does not say which key (if any) matched. The
guards are coroutines: Litestar runs a sync guard in a worker thread, a thread hop on every request for a check
that takes microseconds.
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from server.api.key_scopes import record_scope
from server.api.settings import ApiSettings

__all__ = ["AdminGuard", "ApiKeyGuard", "is_admin"]


def _bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def is_admin(connection: ASGIConnection[Any, Any, Any, Any], settings: ApiSettings) -> bool:
    """Whether the connection may see admin details: a valid admin token, or dev mode without a token."""
    if settings.admin_token is None:
        return settings.dev_mode
    return _matches(_bearer(connection), settings.admin_token)


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


#: No configured key matched (a scope of None means "every model").
_NO_MATCH: Any = object()


class ApiKeyGuard:
    """Serving routes: the API keys, when any is configured (the single one as vLLM's ``--api-key``).

    Accepted as OpenAI's clients send them (``Authorization: Bearer <key>``) and as Anthropic's do (``x-api-key``),
    on every serving route: a client picks its header by SDK, not by path. The single key may use every model;
    a key of ``server.api_keys`` only its own, which the guard records for the routes (``key_scopes.py``).
    """

    def __init__(self, settings: ApiSettings) -> None:
        keys: list[tuple[bytes, frozenset[str] | None]] = []
        if settings.api_key is not None:
            keys.append((settings.api_key.encode(), None))
        keys.extend((scoped.key.encode(), scoped.models) for scoped in settings.scoped_keys)
        self._keys = keys

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not self._keys:
            return
        given = [(value or "").encode() for value in (_bearer(connection), connection.headers.get("x-api-key"))]
        matched = _NO_MATCH
        # Every comparison runs, whatever matched before: no early exit to time.
        for secret, models in self._keys:
            for candidate in given:
                hit = hmac.compare_digest(candidate, secret)
                if hit and matched is _NO_MATCH:
                    matched = models
        if matched is not _NO_MATCH:
            record_scope(connection, matched)
            return
        raise NotAuthorizedException(
            "Missing or invalid API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')."
        )
