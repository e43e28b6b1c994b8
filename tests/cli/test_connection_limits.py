"""``turnout serve``'s HTTP protocol (``server/api/admission/connection_limits.py``) under real uvicorn, on a
trivial app: half-sent requests are closed at the header timeout, bodies that stop at the body timeout (a steady
large one is not), and past the connection cap a newcomer evicts a connection that served nothing (half-sent
headers or body), never one with a complete request in flight, so health checks and served clients keep
working."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from server.api import ConnectionLimits, OpenConnections, limited_protocol
from tests.cli.slow_clients import SlowBodies, SlowLoris, answer_of

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
#: How late after its header timeout a half-sent request may still be open (a busy shared machine).
SLACK_S = 2.0


class App:
    """Answers ``/health`` at once and ``/wait`` when :attr:`release` is set; the body is the client's port."""

    def __init__(self, late_s: float = BODY_TIMEOUT_S * 2) -> None:
        self.release = asyncio.Event()
        self.late_s = late_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/wait":
            await self.release.wait()
        answer = str(scope["client"][1]).encode()
        if scope["path"].startswith("/upload"):  # the body's length, read whole (after a pause: /upload-late)
            if scope["path"] == "/upload-late":
                await asyncio.sleep(self.late_s)
            size, more = 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                size, more = size + len(message.get("body", b"")), message.get("more_body", False)
            answer = str(size).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": answer})


@contextlib.asynccontextmanager
async def serving(
    max_connections: int, body_timeout_s: float = BODY_TIMEOUT_S
) -> AsyncIterator[tuple[str, App, OpenConnections]]:
    app = App(late_s=body_timeout_s * 2)
    limits = ConnectionLimits(
        header_timeout_s=HEADER_TIMEOUT_S, body_timeout_s=body_timeout_s, max_connections=max_connections
    )
    connections = OpenConnections(max_connections)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http=limited_protocol(limits, connections), log_level="warning", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app, connections
    finally:
        app.release.set()
        server.should_exit = True
        await task
        sock.close()


@pytest.mark.parametrize("line", [b"GET /heal", b"\r\n"], ids=["half-request-line", "blank-lines"])
async def test_a_half_sent_request_is_closed_at_the_header_timeout(line: bytes) -> None:
    async with serving(max_connections=100) as (url, _, limits):
        loris = SlowLoris(url, line=line)
        try:
            started = time.monotonic()
            await loris.open(10)
            closed = await loris.closed_by_server(HEADER_TIMEOUT_S + SLACK_S)
            assert all(closed), closed
            assert time.monotonic() - started >= HEADER_TIMEOUT_S * 0.9  # not closed before its time either
        finally:
            await loris.close()
        assert limits.count == 0


async def test_past_the_cap_half_open_connections_starve_neither_health_nor_served_clients() -> None:
    async with serving(max_connections=8) as (url, _, limits):
        loris = SlowLoris(url)
        async with httpx.AsyncClient(base_url=url, timeout=5) as served:
            port = (await served.get("/health")).text  # a keep-alive client, served once
            try:
                await loris.open(30)  # far past the cap: the flood evicts its own kind
                assert limits.count <= 8
                for _ in range(3):
                    async with httpx.AsyncClient(base_url=url, timeout=5) as fresh:
                        assert (await fresh.get("/health")).status_code == 200
                    again = await served.get("/health")
                    assert again.status_code == 200 and again.text == port  # on its own connection still
                    await loris.open(5)
                closed = await loris.closed_by_server(HEADER_TIMEOUT_S + SLACK_S)
                assert all(closed), closed
            finally:
                await loris.close()
            assert (await served.get("/health")).text == port


async def test_when_every_connection_has_a_request_in_flight_a_newcomer_gets_a_503_at_once() -> None:
    async with serving(max_connections=2) as (url, app, _), httpx.AsyncClient(base_url=url, timeout=10) as busy:
        waiting = [asyncio.create_task(busy.get("/wait")) for _ in range(2)]
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient(base_url=url, timeout=5) as newcomer:
            with contextlib.suppress(httpx.TransportError):  # the server may close before the request is sent
                refused = await newcomer.get("/health")
                assert refused.status_code == 503 and refused.headers["retry-after"]
                assert refused.json()["error"]["code"] == "too_many_connections"
        app.release.set()
        assert [(await task).status_code for task in waiting] == [200, 200]  # neither was evicted


async def test_a_body_that_stops_is_answered_408_and_closed_at_the_body_timeout() -> None:
    async with serving(max_connections=100) as (url, _, limits):
        # Before: a request whose body stopped held its connection for ever.
        stalled = SlowBodies(url, every_s=BODY_TIMEOUT_S * 3)  # a byte far slower than the timeout allows
        try:
            started = time.monotonic()
            await stalled.open(5)
            answers = await stalled.answers(BODY_TIMEOUT_S + SLACK_S)
            assert time.monotonic() - started >= BODY_TIMEOUT_S * 0.9
            for answer in answers:
                status, body = answer_of(answer)
                assert status == 408, answer
                error = body["error"]
                assert error["code"] == "request_timeout" and "server.body_timeout_s" in error["message"]
        finally:
            await stalled.close()
        assert limits.count == 0


async def test_a_large_body_sent_steadily_or_read_late_outlives_the_body_timeout() -> None:
    chunk = b"x" * 65536
    size = 8 * 1024 * 1024
    # Client and server share one event loop, which a loaded machine may hold still for a second: a longer body
    # timeout than the module's keeps such a pause from reading as a stalled client.
    body_timeout_s = 3.0

    async def steady() -> AsyncIterator[bytes]:  # 128 chunks a 50 ms apart: over twice the body timeout
        for _ in range(size // len(chunk)):
            await asyncio.sleep(0.05)
            yield chunk

    async with (
        serving(max_connections=100, body_timeout_s=body_timeout_s) as (url, _, _),
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        started = time.monotonic()
        response = await client.post("/upload", content=steady(), headers={"content-length": str(size)})
        assert response.status_code == 200 and int(response.text) == size
        assert time.monotonic() - started > body_timeout_s * 2
        # The server stops reading while the app has not taken what came (its wait is not the client's).
        late = await client.post("/upload-late", content=b"y" * (4 * 1024 * 1024))
        assert late.status_code == 200 and int(late.text) == 4 * 1024 * 1024


async def test_past_the_cap_slow_bodies_starve_neither_health_nor_served_clients() -> None:
    # Before: a connection whose body was incomplete counted as a request in flight, so a flood of slow bodies
    # filled the cap and every newcomer, /health included, got a 503.
    async with serving(max_connections=8, body_timeout_s=30.0) as (url, _, limits):
        slow = SlowBodies(url, every_s=0.3)  # within the body timeout: only the cap stops them
        async with httpx.AsyncClient(base_url=url, timeout=5) as served:
            port = (await served.get("/health")).text
            try:
                await slow.open(30)
                assert limits.count <= 8
                for _ in range(3):
                    async with httpx.AsyncClient(base_url=url, timeout=5) as fresh:
                        assert (await fresh.get("/health")).status_code == 200
                    again = await served.get("/health")
                    assert again.status_code == 200 and again.text == port  # on its own connection still
                    await slow.open(5)
                assert limits.count <= 8
            finally:
                await slow.close()


async def test_a_steady_upload_outlives_a_slow_body_flood_past_the_cap() -> None:
    chunk, size = b"x" * 65536, 4 * 1024 * 1024

    async def steady() -> AsyncIterator[bytes]:
        for _ in range(size // len(chunk)):
            await asyncio.sleep(0.03)
            yield chunk

    async with serving(max_connections=8, body_timeout_s=30.0) as (url, _, _):
        slow = SlowBodies(url, every_s=0.3)
        try:
            await slow.open(16)

            async def flood() -> None:
                for _ in range(6):
                    await asyncio.sleep(0.3)
                    await slow.open(4)

            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                upload, _ = await asyncio.gather(
                    client.post("/upload", content=steady(), headers={"content-length": str(size)}), flood()
                )
            assert upload.status_code == 200 and int(upload.text) == size
        finally:
            await slow.close()
