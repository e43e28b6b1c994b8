"""Checks at the edge, before a route runs: the ``Host`` header and the body's content type.

Both defend a server on a user's machine against the web pages that user opens. A page may POST to any address
without a CORS preflight as long as the body is a "simple" one (``text/plain``, a URL-encoded or multipart form):
so a route that reads JSON refuses every other content type with 415, as vLLM's FastAPI routes do, and a form
route every type but its own. DNS rebinding lets a page read the answers of a server it reaches under a name it
controls: so a server bound to loopback answers only requests addressed to a loopback name (403 otherwise), as
Ollama does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final

from litestar.enums import ScopeType
from litestar.exceptions import HTTPException, PermissionDeniedException
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from server.api.forms import FORM_BODY

__all__ = ["LOOPBACK_HOSTS", "EdgeChecks", "default_allowed_hosts", "host_allowed"]

#: The names a server bound to loopback answers to by default (with any port): ``localhost`` and its
#: subdomains, and loopback addresses (checked as addresses, so every ``127.x.y.z`` counts).
LOOPBACK_HOSTS: Final = ("localhost", "*.localhost")
_JSON: Final = "application/json"
_FORM: Final = "multipart/form-data"
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return address == "localhost"


def default_allowed_hosts(bind: str | None, configured: Iterable[str] | None) -> tuple[str, ...] | None:
    """``server.allowed_hosts`` when set; else loopback names for a server bound to loopback, None (any) otherwise
    (``bind`` None: a Ray node, which binds nothing itself)."""
    if configured is not None:
        return tuple(configured)
    return LOOPBACK_HOSTS if bind is not None and _is_loopback(bind) else None


def _hostname(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # an IPv6 literal, with or without a port
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str, allowed: Iterable[str]) -> bool:
    """Whether a ``Host`` header names one of ``allowed`` (``*``: any; ``*.example.com``: its subdomains).

    A loopback address is allowed whenever ``localhost`` is: no rebinding page can put an address in ``Host``.
    """
    host = _hostname(header)
    for pattern in allowed:
        pattern = pattern.lower()
        if pattern == "*" or host == pattern:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
        if pattern == "localhost" and _is_loopback(host):
            return True
    return False


def _content_type(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.decode("latin-1").split(";", 1)[0].strip().lower()
    return None


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def _json_type(media_type: str) -> bool:
    return media_type == _JSON or (media_type.startswith("application/") and media_type.endswith("+json"))


class EdgeChecks(ASGIMiddleware):
    """403 for a ``Host`` outside ``allowed_hosts`` (None: any); 415 for a body the route does not read.

    Args:
        allowed_hosts: The host patterns :func:`host_allowed` accepts; None accepts every host.
    """

    scopes = (ScopeType.HTTP,)

    def __init__(self, allowed_hosts: tuple[str, ...] | None) -> None:
        self._allowed_hosts = allowed_hosts

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if self._allowed_hosts is not None:
            host = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"host"), "")
            if not host_allowed(host, self._allowed_hosts):
                # The name the client used is not echoed: it is the attacker's, and says nothing to the user.
                raise PermissionDeniedException(
                    "The Host header is not one this server answers to; add it to the profile's "
                    "server.allowed_hosts if the server should."
                )
        if scope.get("method") in _BODY_METHODS and _has_body(scope):
            media_type = _content_type(scope) or ""
            form = bool(scope["route_handler"].opt.get(FORM_BODY))
            if not (media_type == _FORM if form else _json_type(media_type)):
                wanted = _FORM if form else _JSON
                raise HTTPException(
                    status_code=415,
                    detail=f"Unsupported content type {media_type or '(none)'!r}: this route takes {wanted}.",
                )
        await next_app(scope, receive, send)
