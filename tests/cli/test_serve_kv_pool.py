"""``turnout serve``'s server removes the kept-KV pool when it stops, SIGTERM included: uvicorn re-raises a
SIGTERM it caught after its graceful shutdown, which ends the process without ``atexit``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: The serve command's own server class over an app that only runs its lifespan (no engine: the exit path is
#: the same), with this process's pool made as ``with_kv_keep`` makes it.
SERVER = """
import signal
# SIGINT as a terminal's foreground process has it: a parent that ignores it (a test worker, a script's background
# job) passes SIG_IGN on, and uvicorn's re-raised SIGINT would then end nothing.
signal.signal(signal.SIGINT, signal.default_int_handler)
import uvicorn
from server.cli.uvicorn_server import draining_server_class
from server.vllm_plugin import close_kv_pool, server_kv_pool

root = server_kv_pool().root

async def app(scope, receive, send):
    assert scope["type"] == "lifespan"
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
            print(root, flush=True)
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return

async def drain(timeout):
    return 0

config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="warning")
draining_server_class()(config, drain, 1.0, close_kv_pool).run()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_pool_is_removed_when_the_server_is_stopped(sig: signal.Signals) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert server.stdout is not None
        root = Path(server.stdout.readline().decode().strip())
        assert root.name.startswith("turnout-kv-") and root.is_dir()
        server.send_signal(sig)
        server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == -sig, "uvicorn re-raised the signal: the process ended by it, without atexit"
    assert not root.exists()
