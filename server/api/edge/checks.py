"""Checks at the edge, before a route runs: the ``Host`` header, a browser's cross-site request and the body's
content type.

All three defend a server on a user's machine against the web pages that user opens. A page may POST to any address
without a CORS preflight as long as the body is a "simple" one (``text/plain``, a URL-encoded or multipart form):
so a route that reads JSON refuses every other content type with 415, as vLLM's FastAPI routes do, and a form
route every type but its own. DNS rebinding lets a page read the answers of a server it reaches under a name it
controls: so a server bound to loopback answers only requests addressed to a loopback name (403 otherwise), as
Ollama does, and ``turnout serve`` bound to another address only this machine's names and addresses unless
``server.allowed_hosts`` lists others. And a browser's cross-site request that uses or changes a model (any
``POST``, ``PUT``, ``PATCH`` or ``DELETE``: the serving, switch, admin and reload routes), a bodyless one included,
is refused with 403 unless CORS allows its ``Origin``: a page's simple form can move the device or load a model
without ever reading an answer. A browser says so in ``Sec-Fetch-Site: cross-site`` or ``same-site`` (a page on
a sibling subdomain is another origin too); one that does not send it is judged by its ``Origin`` against the
``Host`` it addressed. Requests without either header (curl, the SDKs) are no browser's and pass.

:class:`EdgePolicy` holds these checks once: :class:`EdgeChecks` runs them on a node's routes, and the Ray ingress
runs them (``server/cluster/gate.py``) before it places a request, with the body kind of the node's route.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from litestar.config.cors import CORSConfig
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException, PermissionDeniedException
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from server.api.edge.forms import FORM_BODY
from server.api.settings import ApiSettings

__all__ = [
    "EDGE_CHECKED_ELSEWHERE",
    "LOOPBACK_HOSTS",
    "BodyKind",
    "EdgeChecks",
    "EdgePolicy",
    "default_allowed_hosts",
    "host_allowed",
    "machine_hosts",
]

#: The names a server bound to loopback answers to by default (with any port): ``localhost`` and its
#: subdomains, and loopback addresses (checked as addresses, so every ``127.x.y.z`` counts).
LOOPBACK_HOSTS: Final = ("localhost", "*.localhost")
_JSON: Final = "application/json"
_FORM: Final = "multipart/form-data"
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
#: The methods that use or change a model: a cross-site one is refused. (GET, HEAD and OPTIONS only read.)
_UNSAFE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: ``Sec-Fetch-Site`` values of a request that is not cross-site (``none``: the user typed it, or a bookmark).
#: ``same-site`` is not among them: a page on a sibling subdomain (another team's, or one an attacker can publish
#: on) is another origin, and crosses only when CORS lists it.
_NOT_CROSS_SITE: Final = frozenset({"same-origin", "none"})
#: A route handler's ``opt`` key that skips :class:`EdgeChecks` (the Ray ingress's catch-all route, whose gate
#: runs the same checks with the body kind of the node's route).
EDGE_CHECKED_ELSEWHERE: Final = "turnout_edge_checked_elsewhere"
#: What a route's body must be: JSON, a multipart form, or None (no rule: a path no route has).
BodyKind = Literal["json", "form"] | None


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return address == "localhost"


def default_allowed_hosts(
    bind: str | None, configured: Iterable[str] | None, *, machine_names: bool = False
) -> tuple[str, ...] | None:
    """``server.allowed_hosts`` when set; else loopback names for a server bound to loopback; else, with
    ``machine_names``, this machine's names and addresses (:func:`machine_hosts`); else None (any ``Host``).

    ``bind`` None: a Ray node, which binds nothing itself. ``machine_names`` is for a server that binds ``bind``
    on this machine itself (``turnout serve``); a Ray cluster's requests may arrive under any machine's name.
    """
    if configured is not None:
        return tuple(configured)
    if bind is None:
        return None
    if _is_loopback(bind):
        return LOOPBACK_HOSTS
    return machine_hosts(bind) if machine_names else None


#: Bind addresses that name no one address (every interface): not a name a client sends.
_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::", "[::]"})


def machine_hosts(bind: str) -> tuple[str, ...]:
    """The ``Host`` names a server bound to ``bind`` answers by default: loopback names, this machine's host name
    and fully qualified name, the addresses of its network interfaces, and ``bind`` itself unless it is a wildcard.

    A DNS rebinding page reaches the server only under a name its attacker controls, never one of these; a name
    clients use that is not among them (a DNS alias, a load balancer's) goes in ``server.allowed_hosts``.
    """
    import psutil

    names = dict.fromkeys([*LOOPBACK_HOSTS, socket.gethostname().lower(), socket.getfqdn().lower()])
    if bind.strip().lower() not in _WILDCARDS:
        names[bind.strip().lower()] = None
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                names[_canonical(address.address)] = None  # without an IPv6 zone (no browser sends one)
    return tuple(name for name in names if name)


def _hostname(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # an IPv6 literal, with or without a port
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _canonical(name: str) -> str:
    """``name`` lower-cased, an IP address in its one spelling (no brackets, IPv6 zone or leading zeros)."""
    name = name.strip().lower()
    try:
        return str(ipaddress.ip_address(name.strip("[]").split("%", 1)[0]))
    except ValueError:
        return name


def host_allowed(header: str, allowed: Iterable[str]) -> bool:
    """Whether a ``Host`` header names one of ``allowed`` (``*``: any; ``*.example.com``: its subdomains; an IP
    address in any spelling, IPv6 with or without brackets).

    A loopback address is allowed whenever ``localhost`` is: no rebinding page can put an address in ``Host``.
    """
    host = _canonical(_hostname(header))
    for pattern in allowed:
        pattern = pattern.lower()
        if pattern == "*" or host == _canonical(pattern):
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


def _header(scope: Scope, wanted: bytes) -> str | None:
    return next((value.decode("latin-1") for name, value in scope["headers"] if name == wanted), None)


def _same_origin(origin: str, host: str) -> bool:
    """Whether an ``Origin`` (``scheme://host[:port]``) names the ``Host`` the request was sent to."""
    netloc = urlsplit(origin.strip()).netloc.lower()
    return bool(netloc) and netloc == host.strip().lower()


class EdgePolicy:
    """The edge's checks, defined once for a node's app and the Ray ingress.

    Args:
        allowed_hosts: The host patterns :func:`host_allowed` accepts; None accepts every host.
        cors: The app's CORS (``ApiSettings.cors``): an origin it allows may send cross-site requests; None: none.
    """

    def __init__(self, allowed_hosts: tuple[str, ...] | None, cors: Mapping[str, Any] | None = None) -> None:
        self._allowed_hosts = allowed_hosts
        self._cors = CORSConfig(**cors) if cors is not None else None

    @classmethod
    def of(cls, settings: ApiSettings) -> EdgePolicy:
        """The checks of an app built with ``settings`` (its allowed hosts and CORS)."""
        return cls(settings.allowed_hosts, settings.cors)

    def check(self, scope: Scope, body: BodyKind) -> None:
        """Refuse ``scope`` as the edge does: a foreign ``Host``, a browser's cross-site request that uses or
        changes a model, or a body that is not ``body``'s kind.

        Raises:
            PermissionDeniedException: A ``Host`` outside the allowed ones, or a cross-site request (403).
            HTTPException: A body of another content type than the route reads (415).
        """
        host = _header(scope, b"host") or ""
        if self._allowed_hosts is not None and not host_allowed(host, self._allowed_hosts):
            # The name the client used is not echoed: it is the attacker's, and says nothing to the user.
            raise PermissionDeniedException(
                "The Host header is not one this server answers to; add it to the profile's "
                "server.allowed_hosts if the server should."
            )
        method = scope.get("method", "")
        if method in _UNSAFE_METHODS and self._cross_site(scope, host):
            raise PermissionDeniedException(
                "A web page of another site may not use or change this server's models (a cross-site request); "
                "start the server with --allowed-origins naming the page's origin if it should."
            )
        if body is not None and method in _BODY_METHODS and _has_body(scope):
            media_type = _content_type(scope) or ""
            form = body == "form"
            if not (media_type == _FORM if form else _json_type(media_type)):
                wanted = _FORM if form else _JSON
                raise HTTPException(
                    status_code=415,
                    detail=f"Unsupported content type {media_type or '(none)'!r}: this route takes {wanted}.",
                )

    def _cross_site(self, scope: Scope, host: str) -> bool:
        origin = _header(scope, b"origin")
        if origin is not None and self._cors is not None and self._cors.is_origin_allowed(origin):
            return False
        site = (_header(scope, b"sec-fetch-site") or "").strip().lower()
        if site in ("cross-site", "same-site"):
            return True
        if site in _NOT_CROSS_SITE or origin is None:
            return False  # a browser that says it is not cross-site, or no browser at all (curl, the SDKs)
        return not _same_origin(origin, host)  # an older browser: "null" (a sandboxed page) is no origin of ours


class EdgeChecks(ASGIMiddleware):
    """:class:`EdgePolicy`'s checks on each route, with the route's body kind (a form route's ``FORM_BODY``).

    Args:
        policy: The checks.
    """

    scopes = (ScopeType.HTTP,)
    exclude_opt_key = EDGE_CHECKED_ELSEWHERE

    def __init__(self, policy: EdgePolicy) -> None:
        self._policy = policy

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        form = bool(scope["route_handler"].opt.get(FORM_BODY))
        self._policy.check(scope, "form" if form else "json")
        await next_app(scope, receive, send)
