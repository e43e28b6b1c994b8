"""A real ``turnout serve`` in a subprocess, for the end-to-end tests (real uvicorn, real tiny vLLM engines)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx

from tests.ports import free_port

__all__ = [
    "DEMO",
    "DEMO_ADMIN_TOKEN",
    "DEMO_API_KEY",
    "LiveServer",
    "demo_copy",
    "serving",
    "start_demo",
    "start_server",
]

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "profiles" / "demo.yaml"
#: The shared demo server's admin token and API key (``start_demo``).
DEMO_ADMIN_TOKEN = "demo-admin-token"
DEMO_API_KEY = "demo-api-key"
#: The variable ``start_demo`` passes the key in (``--api-key-env``: a key is never given on the command line).
DEMO_API_KEY_ENV = "TURNOUT_DEMO_API_KEY"


@dataclass
class LiveServer:
    """One running server: its URL, process, log file and the profile it serves (None: started outside the suite;
    a reload may read only that profile's folder)."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: BinaryIO
    profile: Path | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # The server ran in its own session: whatever it left behind (an engine core orphaned when it was killed
        # mid-start) goes too, so no test leaves engines on a shared machine.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.log_file.close()


def demo_copy(tiny_models: dict[str, Path], root: Path, edit: Callable[[str], str] | None = None) -> Path:
    """A copy of ``profiles/demo.yaml`` at ``root/profiles/demo.yaml`` on the tiny models, ``edit``-ed, with the
    repository's templates next to it (so a test may edit them, or the profile, in place)."""
    shutil.copytree(REPO / "templates", root / "templates")
    (root / "profiles").mkdir()
    text = (REPO / "profiles" / "demo.yaml").read_text()
    for name in ("tiny-tools", "tiny-plain"):
        text = text.replace(f"../.cache/tiny-models/{name}", str(tiny_models[name]))
    path = root / "profiles" / "demo.yaml"
    path.write_text(edit(text) if edit is not None else text)
    return path


def start_server(profile: Path, log_path: Path, env: dict[str, str], *args: str, preload: bool = False) -> LiveServer:
    """Start ``turnout serve profile`` on a free port (returns at once; see :func:`wait_ready`).

    ``preload``: load the models the profile marks ``preload``; off by default (``--no-preload``), because each
    is a second engine starting in the background, CPU that a test which does not need it takes from the rest.
    """
    port = free_port()
    command = [sys.executable, "-m", "server.cli", "serve", str(profile), "--port", str(port), *args]
    if not preload:
        command.append("--no-preload")
    log = log_path.open("wb")
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
    )
    return LiveServer(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path, log_file=log, profile=profile)


def wait_ready(server: LiveServer, timeout: float = 300.0, *, verify: ssl.SSLContext | bool = True) -> None:
    """Wait until ``/ready`` answers 200; fail with the server's log if it exits or never gets there.

    ``verify`` is httpx's: a context that trusts a server's self-signed TLS certificate.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"turnout serve exited with {server.process.returncode}:\n{server.log()[-4000:]}")
        try:
            if httpx.get(f"{server.url}/ready", timeout=2, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"turnout serve was not ready after {timeout:.0f}s:\n{server.log()[-4000:]}")


@contextlib.contextmanager
def serving(
    profile: Path, log_path: Path, env: dict[str, str], *args: str, preload: bool = False
) -> Iterator[LiveServer]:
    """A started and ready :func:`start_server` for the block, stopped after it (a module fixture's body)."""
    live = start_server(profile, log_path, env, *args, preload=preload)
    try:
        wait_ready(live)
        yield live
    finally:
        live.stop()


def start_demo(folder: Path) -> LiveServer:
    """The demo profile (manual mode) as the modules that share it need it: an admin token, an API key, and
    vLLM's Responses store on (as ``vllm serve`` turns it on); started and ready, for ``live_servers``."""
    env = {
        "TURNOUT_ADMIN_TOKEN": DEMO_ADMIN_TOKEN,
        "VLLM_ENABLE_RESPONSES_API_STORE": "1",
        DEMO_API_KEY_ENV: DEMO_API_KEY,
    }
    live = start_server(DEMO, folder / "demo.log", env, "--api-key-env", DEMO_API_KEY_ENV)
    wait_ready(live)
    return live
