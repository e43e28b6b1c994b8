"""Residency controls on a live ``turnout serve`` with real tiny engines: preload, idle unload, load and unload.

One server on a copy of the demo profile with ``plain`` preloaded and a short ``idle_unload_s`` on ``tools``.
Engines run in processes of their own, so the server's process tree shows whether an unload freed one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.api.live_server import LiveServer, demo_copy, start_server, wait_ready

pytestmark = pytest.mark.engine

TOKEN = "residency-admin-token"
IDLE_S = 8


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("residency")

    def idle_tools(text: str) -> str:
        assert "    preload: true\n" in text, "the demo preloads plain"
        parser = "    tool_call_parser: hermes\n"
        return text.replace(parser, f"{parser}    idle_unload_s: {IDLE_S}\n")

    profile = demo_copy(tiny_models, root, idle_tools)
    live = start_server(profile, root / "serve.log", {"TURNOUT_ADMIN_TOKEN": TOKEN}, preload=True)
    try:
        wait_ready(live, timeout=600)
        yield live
    finally:
        live.stop()


def _status(server: LiveServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/admin/status", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    body: dict[str, Any] = response.json()
    return body


def _states(server: LiveServer) -> dict[str, str]:
    return {slot["name"]: slot["state"] for slot in _status(server)["slots"]}


def _until(check: Callable[[], bool], timeout: float, server: LiveServer) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not reached in {timeout} s:\n{server.log()[-3000:]}"
        time.sleep(0.5)


def _engine_processes(server: LiveServer) -> int:
    """The server's descendant processes that run an engine core (vLLM names them so)."""
    names = []
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            names.append(" ".join(child.cmdline()) + child.name())
        except psutil.Error:
            continue
    return sum("EngineCore" in name or "VLLM" in name for name in names)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNOUT_ADMIN_TOKEN": TOKEN}
    command = [sys.executable, "-m", "server.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_preload_idle_unload_load_and_unload(server: LiveServer) -> None:
    # Preload: plain becomes resident without a request for it (readiness did not wait for it).
    _until(lambda: _states(server) == {"tools": "active", "plain": "resident"}, 600, server)
    engines_both = _engine_processes(server)
    switched = _cli("switch", "plain", "--url", server.url)
    assert switched.returncode == 0, switched.stderr
    report = _status(server)["last_switch"]
    assert report["current_model"] == "plain" and report["duration_ms"] < 5000, report  # a pointer swap

    # Idle unload: tools, parked resident now, is unloaded after IDLE_S s; its engine's processes exit.
    slots = {slot["name"]: slot for slot in _status(server)["slots"]}
    assert slots["tools"]["unloads_in_s"] is not None and slots["plain"]["unloads_in_s"] is None
    _until(lambda: _states(server)["tools"] == "stopped", IDLE_S + 60, server)
    _until(lambda: _engine_processes(server) < engines_both, 60, server)
    counted = 'turnout_idle_unloads_total{model="tools"} 1.0'  # counted once the engine's shutdown returned
    _until(lambda: counted in httpx.get(f"{server.url}/metrics", timeout=30).text, 60, server)

    # The active model cannot be unloaded in manual mode without --force.
    refused = _cli("unload", "plain", "--url", server.url)
    assert refused.returncode == 1 and "409" in refused.stderr and "force" in refused.stderr

    # Load brings tools back resident (plain keeps serving); unload frees it again at once.
    loaded = _cli("load", "tools", "--url", server.url)
    assert loaded.returncode == 0 and "load tools: resident" in loaded.stdout, loaded.stderr
    assert _states(server) == {"tools": "resident", "plain": "active"}
    unloaded = _cli("unload", "tools", "--url", server.url)
    assert unloaded.returncode == 0 and "unload tools: stopped" in unloaded.stdout, unloaded.stderr
    chat = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "plain", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        timeout=120,
    )
    assert chat.status_code == 200 and "tiny-plain" in chat.json()["choices"][0]["message"]["content"]
