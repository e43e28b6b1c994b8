"""Slow clients against a live ``turnout serve`` (real uvicorn as the CLI runs it, one tiny real engine): with the
profile's ``server.header_timeout_s: 2`` and ``server.max_connections: 16``, connections that trickle half a
request line are closed by the server at the timeout, and while they fill the cap ``/health`` still answers and a
client served before keeps its connection (until it idles past ``server.keep_alive_timeout_s``). With
``server.body_timeout_s: 2``, a body that stops is answered 408, slow bodies that fill the cap starve neither
``/health`` nor a large upload sent steadily.

Before: uvicorn with httptools had no header timeout and Turnout no cap; 200 such connections were all still open
after 90 s. A slow body was never timed and counted as a request in flight: a flood of them made ``/health`` 503.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.live_server import LiveServer, demo_copy, start_server, wait_ready
from tests.cli.slow_clients import KeepAliveClient, SlowBodies, SlowLoris, answer_of

pytestmark = pytest.mark.engine

HEADER_TIMEOUT_S = 2
BODY_TIMEOUT_S = 2
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 16
#: How late past its header timeout the server may close a half-sent request on a busy shared machine.
SLACK_S = 8.0
LIMITS = f"""
server:
  header_timeout_s: {HEADER_TIMEOUT_S}
  body_timeout_s: {BODY_TIMEOUT_S}
  keep_alive_timeout_s: {KEEP_ALIVE_S}
  max_connections: {MAX_CONNECTIONS}
"""


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    profile = demo_copy(tiny_models, tmp_path_factory.mktemp("slow-clients"), lambda text: text + LIMITS)
    live = start_server(profile, profile.parent / "serve.log", {"TURNOUT_ADMIN_TOKEN": "slow-clients-token"})
    try:
        wait_ready(live, timeout=600)  # an engine start takes minutes on a busy shared machine
        yield live
    finally:
        live.stop()


async def test_half_sent_requests_are_closed_and_starve_neither_health_nor_served_clients(server: LiveServer) -> None:
    served = await KeepAliveClient.connect(server.url)
    loris = SlowLoris(server.url, every_s=1.0)
    try:
        assert (await served.get("/health"))[0] == 200
        started = time.monotonic()
        await loris.open(3 * MAX_CONNECTIONS)  # three times the cap, each trickling a byte a second
        for _ in range(3):
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as fresh:
                assert (await fresh.get("/health")).status_code == 200  # a new connection gets in
            assert (await served.get("/health"))[0] == 200  # and the served client's connection still works
        status, body = await served.get("/ready")
        assert status == 200, body
        idle_since = time.monotonic()
        closed = await loris.closed_by_server(HEADER_TIMEOUT_S + SLACK_S - (time.monotonic() - started))
        assert all(closed), f"{closed.count(False)} half-sent requests still open"
        # The profile's keep-alive timeout, not the default 65 s, closes the served client once it idles.
        assert await served.closed_by_server(KEEP_ALIVE_S + SLACK_S - (time.monotonic() - idle_since))
    finally:
        await loris.close()
        await served.close()


async def test_slow_bodies_are_timed_and_starve_neither_health_nor_a_steady_upload(server: LiveServer) -> None:
    stalled = SlowBodies(server.url, every_s=3 * BODY_TIMEOUT_S, path="/v1/chat/completions")
    slow = SlowBodies(server.url, every_s=1.0, path="/v1/chat/completions")  # within the timeout: only the cap
    try:
        await stalled.open(2)
        for answer in await stalled.answers(BODY_TIMEOUT_S + SLACK_S):
            status, body = answer_of(answer)
            assert status == 408 and body["error"]["code"] == "request_timeout", answer
        await slow.open(3 * MAX_CONNECTIONS)
        for _ in range(3):
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as fresh:
                assert (await fresh.get("/health")).status_code == 200  # a new connection gets in
        # An audio upload of several MB sent steadily over several body timeouts, while the flood goes on: read
        # whole (the chat model then refuses the route), never timed out nor evicted.
        files = {"file": ("clip.wav", b"RIFF" + b"\0" * (6 * 1024 * 1024), "audio/wav")}
        form = httpx.Request("POST", server.url, data={"model": "plain"}, files=files)
        content = form.read()
        chunk = 64 * 1024

        async def steady() -> AsyncIterator[bytes]:  # about 100 chunks 50 ms apart: over twice the timeout
            for start in range(0, len(content), chunk):
                await asyncio.sleep(0.05)
                yield content[start : start + chunk]

        async def flood() -> None:
            for _ in range(5):
                await asyncio.sleep(BODY_TIMEOUT_S / 2)
                await slow.open(MAX_CONNECTIONS // 2)

        headers = {"content-type": form.headers["content-type"], "content-length": str(len(content))}
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            upload, _ = await asyncio.gather(
                client.post("/v1/audio/transcriptions", content=steady(), headers=headers), flood()
            )
        assert time.monotonic() - started > 2 * BODY_TIMEOUT_S
        assert upload.status_code == 404 and "does not support" in upload.json()["error"]["message"], upload.text
    finally:
        await stalled.close()
        await slow.close()
    assert "Traceback" not in server.log()
