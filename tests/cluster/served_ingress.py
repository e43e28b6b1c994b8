"""The ingress of a Serve application as ``turnout ray-serve`` serves it (``server.cli.ray_ingress``: uvicorn with
Turnout's connection limits, in the driver), run in a thread of the test process for the module's cluster; the
server binds 127.0.0.1 on a free port and is stopped with the module."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

from server.api import ConnectionLimits
from server.cli.listener import bind_listener
from server.cli.ray_ingress import ingress_server
from server.cluster import ingress_app
from tests.ports import free_port

__all__ = ["ServedIngress"]

#: Seconds a test ingress keeps an idle keep-alive connection.
KEEP_ALIVE_S = 5


class ServedIngress:
    """The ingress of application ``app`` (its nodes built from ``options``, its edge by ``edge``) under
    ``limits``, serving from :meth:`start` until :meth:`stop`."""

    def __init__(self, app: str, options: Mapping[str, Any], edge: str, limits: ConnectionLimits) -> None:
        served = asyncio.run(ingress_app(app, options, edge))
        self._server = ingress_server(served, limits, keep_alive_s=KEEP_ALIVE_S, graceful_shutdown_s=5)
        self._listener = bind_listener("127.0.0.1", free_port())
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._listener]}, name=f"ingress-{app}", daemon=True
        )

    def start(self, timeout_s: float = 60.0) -> ServedIngress:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            assert self._thread.is_alive(), "the ingress server stopped while starting"
            assert time.monotonic() < deadline, "the ingress server did not start in time"
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)
        self._listener.close()
