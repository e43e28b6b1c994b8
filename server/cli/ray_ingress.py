"""``turnout ray-serve``'s HTTP server: the OpenAI ingress app (``server.cluster.ingress_app``) served by uvicorn
in this process, under one node's connection limits, calling the node replicas through Serve's deployment handle.

Ray Serve's own HTTP proxy runs uvicorn with settings of its own and takes no protocol class: no header timeout (a
client that trickles its request line holds its connection for ever), no cap on connections, and a per-request
timeout that a client's ``x-request-timeout-seconds`` header turns off. So ``turnout ray-serve`` starts Serve with
the proxy disabled and serves the ingress with the protocol ``turnout serve`` runs (``connection_limits.py``):
``server.header_timeout_s``, ``server.max_connections`` and ``server.keep_alive_timeout_s`` apply as on one node,
and so does every limit that protocol takes later. Every request still passes the ingress's gate (``gate.py``)
before it reaches a replica.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from server.api import ConnectionLimits, limited_protocol
from server.cli._output import err_console
from server.cli.uvicorn_server import profile_connection_limits

if TYPE_CHECKING:
    import uvicorn
    from litestar.types import ASGIApp

    from server.profiles import Profile

__all__ = ["ingress_server", "run_ingress"]


def ingress_server(
    app: ASGIApp, limits: ConnectionLimits, *, keep_alive_s: int, graceful_shutdown_s: float
) -> uvicorn.Server:
    """A uvicorn server of the ingress ``app`` with ``limits`` (``limited_protocol``), uvloop as under ``turnout
    serve``, and an idle keep-alive connection closed after ``keep_alive_s``. Its ``run(sockets=...)`` serves
    until SIGINT or SIGTERM (in the main thread; elsewhere until ``should_exit`` is set), then returns: the caller
    stops Serve and Ray after it."""
    import uvicorn

    class IngressServer(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises the signal it caught once it stopped, which would end the process before Serve and
            # the local Ray cluster are shut down: the caller's cleanup runs instead, and the command returns.
            with super().capture_signals():
                try:
                    yield
                finally:
                    self._captured_signals.clear()

    config = uvicorn.Config(
        app,
        loop="uvloop",
        http=limited_protocol(limits),
        timeout_keep_alive=keep_alive_s,
        timeout_graceful_shutdown=int(graceful_shutdown_s),
        lifespan="on",
    )
    return IngressServer(config)


def run_ingress(application: str, options: Mapping[str, Any], profile: Profile, listener: socket.socket) -> None:
    """Serve the ingress of the Serve application ``application`` (``node_application``, built from ``options``)
    on ``listener`` under ``profile``'s connection limits, until SIGINT or SIGTERM.

    The ingress builds its edge here from ``options`` as each node does, so this process needs the profile's key
    variables too (a joined cluster's driver included); an unset one exits 1 naming it.
    """
    from server.api import KeyNotSet
    from server.cluster import ingress_app

    try:
        app = asyncio.run(ingress_app(application, options))
    except KeyNotSet as unset:
        err_console.print(f"{profile.path}: error: {unset}", markup=False)
        raise SystemExit(1) from None
    server = ingress_server(
        app,
        profile_connection_limits(profile),
        keep_alive_s=profile.server.keep_alive_timeout_s,
        graceful_shutdown_s=profile.switching.drain_timeout,
    )
    server.run(sockets=[listener])
