"""Operating a live ``turnout serve``: reload with the CLI, and the status page in headless Chromium.

One real server on a copy of the demo profile (real tiny vLLM engines), so the template can be edited in place.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.chromium import dump_dom, screenshot
from tests.api.live_server import LiveServer, demo_copy, start_server, wait_ready

pytestmark = pytest.mark.engine

TOKEN = "ops-admin-token"
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
MARKER = "<<reloaded>>"


@pytest.fixture(scope="module")
def profile(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_copy(tiny_models, tmp_path_factory.mktemp("ops"))


@pytest.fixture(scope="module")
def server(profile: Path) -> Iterator[LiveServer]:
    live = start_server(profile, profile.parent / "serve.log", {"TURNOUT_ADMIN_TOKEN": TOKEN})
    try:
        wait_ready(live, timeout=600)  # an engine start takes minutes on a busy shared machine
        yield live
    finally:
        live.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNOUT_ADMIN_TOKEN": TOKEN}
    command = [sys.executable, "-m", "server.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


def _rendered(server: LiveServer, model: str) -> str:
    tokens = httpx.post(f"{server.url}/tokenize", json={"model": model, "messages": WEATHER}, timeout=60).json()
    text = httpx.post(f"{server.url}/detokenize", json={"model": model, "tokens": tokens["tokens"]}, timeout=60)
    prompt: str = text.json()["prompt"]
    return prompt


def _status(server: LiveServer) -> dict[str, object]:
    response = httpx.get(f"{server.url}/admin/status", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    snapshot: dict[str, object] = response.json()
    return snapshot


def test_reload_applies_a_template_edit_live_and_refuses_an_invalid_profile(server: LiveServer, profile: Path) -> None:
    assert MARKER not in _rendered(server, "tools")
    template = profile.parent.parent / "templates" / "tiny-chatml-tools.jinja"
    template.write_text(template.read_text() + MARKER + "\n")  # same path, new content
    applied = _cli("reload", str(profile), "--url", server.url)
    assert applied.returncode == 0, applied.stderr
    assert "'tools': frontend (chat_template) applies now" in applied.stdout
    assert MARKER in _rendered(server, "tools")

    good = profile.read_text()
    before = _status(server)
    broken = good.replace("tool_call_parser: hermes", "tool_call_parser: hermez").replace(
        "drain_timeout: 30", "drain_timeout: -1"
    )
    profile.write_text(broken)
    try:
        refused = _cli("reload", "--url", server.url)
        assert refused.returncode == 1
        lines = broken.splitlines()
        parser_line = next(i for i, line in enumerate(lines, 1) if "hermez" in line)
        drain_line = next(i for i, line in enumerate(lines, 1) if "drain_timeout: -1" in line)
        assert f"{profile}:{parser_line}:23: " in refused.stderr and "hermez" in refused.stderr
        assert f"{profile}:{drain_line}:18: " in refused.stderr
        assert "nothing changed" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        profile.write_text(good)
    assert MARKER in _rendered(server, "tools") and _status(server)["slots"] == before["slots"]


def test_status_page_in_headless_chromium(server: LiveServer, tmp_path: Path) -> None:
    def active(dom: str) -> str:
        match = re.search(r'id="active-model"><span>active model</span><b>([^<]*)</b>', dom)
        assert match, dom[:2000]
        return match.group(1)

    dom = dump_dom(f"{server.url}/status")
    assert active(dom) == "tools" and 'data-model="plain"' in dom
    switched = httpx.post(
        f"{server.url}/v1/models/switch",
        json={"model": "plain"},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=300,
    )
    assert switched.status_code == 200, switched.text
    dom = dump_dom(f"{server.url}/status")
    assert active(dom) == "plain" and "tools → plain" in dom
    assert 'data-model="tools" data-state="resident"' in dom
    png = tmp_path / "status.png"
    screenshot(f"{server.url}/status", png)
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    if path := os.environ.get("TURNOUT_STATUS_SCREENSHOT"):  # how docs/status.png is made
        shutil.copyfile(png, path)
