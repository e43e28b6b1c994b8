"""``turnout ray-serve`` as a user runs it on a fresh machine: the console script from another folder, a fresh
home, no ``RAY_*`` variable (``conftest.py``). It starts its own local Ray cluster, with Ray's token
authentication on, answers a chat through Ray Serve, and SIGTERM leaves no process of it behind.

Before, the command imported Ray first and set ``RAY_AUTH_MODE=token`` after: the cluster it started asked for a
token its own driver, which had read the mode on import, never sent ("InvalidAuthToken"), and nothing answered.
"""

from __future__ import annotations

import signal
import stat
import time
from pathlib import Path

import httpx
import pytest

from tests.api.live_server import demo_copy
from tests.entrypoints.conftest import User
from tests.ports import free_port

pytest.importorskip("ray")

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

#: The cluster's start, the replica's, and its engine's on a busy 2-core machine.
READY_S = 420.0
#: From SIGTERM to the last process of the cluster gone.
STOP_S = 90.0
#: The admin token, given as ``TURNOUT_ADMIN_TOKEN_FILE``.
ADMIN_TOKEN = "ray-entry-admin-token-0b9e"


def _environ(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:  # gone meanwhile
        return ""


def test_ray_serve_on_a_fresh_machine_answers_and_stops_clean(
    user: User, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    profile = demo_copy(tiny_models, tmp_path / "project")
    port = free_port()
    # The admin token as a user keeps it out of every environment: a file. No process of the run may hold its value.
    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    token_file.chmod(0o600)
    started = user.start(
        "ray-serve",
        str(profile),
        "--port",
        str(port),
        "--no-preload",
        log=tmp_path / "ray-serve.log",
        env={"TURNOUT_ADMIN_TOKEN_FILE": str(token_file)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        answer: httpx.Response | None = None
        while time.monotonic() < deadline:  # Ray Serve's proxy answers 503 until the application runs
            assert started.process.poll() is None, f"ray-serve exited:\n{started.log()[-6000:]}"
            try:
                answer = httpx.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "tools", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0},
                    timeout=READY_S,
                )
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code == 200:
                break
            time.sleep(1)
        assert answer is not None and answer.status_code == 200, started.log()[-6000:]
        assert answer.json()["choices"][0]["message"]["content"] == "Hello from tiny-tools."
        # Token authentication was on, its token private to this user.
        token = user.home / ".ray" / "auth_token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert "Ray's token authentication is on" in started.log()

        cluster = started.processes()
        assert len(cluster) > 3, [p.cmdline() for p in cluster]  # the driver, Ray's GCS and raylet, a replica, ...
        # The token was read (the ingress and the replicas take it) and is in no process's environment.
        status = httpx.get(f"{url}/admin/status", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60)
        assert status.status_code == 200, status.text
        holding = [p.pid for p in cluster if ADMIN_TOKEN in _environ(p.pid)]
        assert holding == [], [p.cmdline() for p in cluster if p.pid in holding]
        assert started.stop(signal.SIGTERM, STOP_S) == 0, started.log()[-6000:]
        deadline = time.monotonic() + STOP_S
        while (left := started.processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, [p.cmdline() for p in left]
    finally:
        started.kill()
