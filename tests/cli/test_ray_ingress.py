"""``turnout ray-serve``'s own HTTP server for the ingress (``server/cli/ray_ingress.py``): it takes the profile's
connection limits as ``turnout serve`` does, and a SIGTERM stops it and returns, so that the command shuts Serve and
its Ray cluster down after it. The limits themselves, against a live Ray cluster: ``tests/cluster/test_ray_serve.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import uvicorn

import server.cluster
from server.cli.ray_ingress import run_ingress
from server.profiles import load_profile
from tests.fakes.profile_files import make_workspace, write_profile

ROOT = Path(__file__).resolve().parents[2]

PROFILE = """\
models:
  tiny:
    model: models/tiny
server:
  header_timeout_s: 3
  max_connections: 7
  keep_alive_timeout_s: 9
"""


def test_the_ingress_server_takes_the_profiles_connection_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = load_profile(str(write_profile(make_workspace(tmp_path), PROFILE)))
    served: list[uvicorn.Config] = []

    async def app(*_: Any) -> None: ...

    async def ingress_app(name: str, options: Any) -> Any:
        assert (name, options) == ("turnout", {"profile": "p"})
        return app

    monkeypatch.setattr(server.cluster, "ingress_app", ingress_app)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets: served.append(self.config))
    with socket.socket() as listener:
        run_ingress("turnout", {"profile": "p"}, profile, listener)
    (config,) = served
    limits = config.http.limits  # type: ignore[union-attr]  # the class limited_protocol made
    assert (limits.header_timeout_s, limits.max_connections) == (3, 7)
    assert config.timeout_keep_alive == 9 and config.app is app


SERVER = """\
import socket, sys
from server.api import ConnectionLimits
from server.cli.ray_ingress import ingress_server

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})

listener = socket.socket()
listener.bind(("127.0.0.1", int(sys.argv[1])))
limits = ConnectionLimits(header_timeout_s=5, body_timeout_s=30, max_connections=4)
ingress_server(app, limits, keep_alive_s=5, graceful_shutdown_s=5).run(sockets=[listener])
print("returned after the server stopped", flush=True)
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_ingress_server_and_returns(tmp_path: Path, stop: signal.Signals) -> None:
    # uvicorn re-raises the signal it caught once it stopped: the process died there, before `turnout ray-serve`
    # shut Serve and its local Ray cluster down.
    from tests.ports import free_port

    port = free_port()
    script = tmp_path / "ingress.py"
    script.write_text(textwrap.dedent(SERVER))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(script), str(port)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        process.send_signal(stop)
        out, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert "returned after the server stopped" in out
