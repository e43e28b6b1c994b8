"""Clients that stop reading or leave: their work ends, their leases go back.

A switch aborts a stream whose client stopped reading: the stream still ends cleanly once the client reads. A
stream whose client takes nothing for ``stream_stall_timeout_s`` is ended by itself; a non-streaming request whose
client leaves is cancelled at once.

Real uvicorn (on this event loop), the real app and manager, fake engines and bundles. The client stops reading
until uvicorn's send is paused by flow control (the transport's write buffer is above its high-water mark), the
case the live stalled-reader test could not pin down: the abort then lands while the stream's task waits in
``send``. When the client reads again it must get what was sent, the switch error event and ``[DONE]``, the end of
the chunked body, and EOF: never a cut or a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from server.api import ApiSettings, create_app
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy
from server.profiles.schema import ModelProfile
from tests.api.conftest import ADMIN_TOKEN, admin
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader
from tests.fakes.manager_views import served_engine

#: A stream that never ends on its own, in 16 KB chunks, so the socket buffers fill within a second or two.
ENDLESS = {"model": "tools", "max_tokens": 10**9, "step_s": 0.0001, "pad": 3200, "stream": True}


Served = tuple[uvicorn.Server, EngineManager[Any], int]


@contextlib.asynccontextmanager
async def _serving(loader: FakeLoader | None = None, **settings: Any) -> AsyncIterator[Served]:
    models = {
        "tools": ModelProfile(model="/m/tools", max_concurrent_requests=1),
        "plain": ModelProfile(model="/m/plain"),
    }
    manager: EngineManager[Any] = EngineManager(
        models,
        KeepStrategy(loader or FakeLoader()),
        build_fake_serving_bundle,
        abort_grace=0.5,
        memory_probe=lambda: 1.0,
    )
    await manager.initialize("tools")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    app = create_app(manager, ApiSettings(admin_token=ADMIN_TOKEN, **settings))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield server, manager, listener.getsockname()[1]
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(serving), 10)
        except TimeoutError:  # a request that never ends (the bug a test here catches) must not hang the run
            server.force_exit = True
            await serving
        await manager.shutdown()


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with _serving() as serving:
        yield serving


async def _until(condition: Any, timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _post(port: int, body: bytes) -> socket.socket:
    """A socket that sent a chat completion request with ``body`` (the caller reads it, or not)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: turnout.test\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    return sock


def _send_paused(server: uvicorn.Server) -> bool:
    return any(connection.flow.write_paused for connection in server.server_state.connections)


def _read_to_eof(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_a_stream_aborted_while_its_send_is_paused_ends_with_the_switch_error(served: Served) -> None:
    server, manager, port = served
    body = json.dumps(ENDLESS).encode()
    sock = _post(port, body)
    try:
        assert (await asyncio.to_thread(sock.recv, 256)).startswith(b"HTTP/1.1 200")  # then the client stalls

        def send_paused() -> bool:
            return _send_paused(server)

        assert await _until(send_paused, 30), "the stream's send never paused: the socket buffers did not fill"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=admin(), timeout=30) as client:
            switch = await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 0.1})
        assert switch.status_code == 200, switch.text
        assert switch.json()["aborted_requests"] == 1
        assert send_paused(), "the client has not read yet, so the aborted stream is still waiting in send()"

        raw = await asyncio.to_thread(_read_to_eof, sock)
    finally:
        sock.close()
    # The chunked body ends properly: the switch error event, [DONE], then the zero-length last chunk.
    assert raw.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), raw[-300:]
    events = [line[6:] for line in raw.decode(errors="replace").splitlines() if line.startswith("data: ")]
    error = json.loads(events[-2])["error"]
    assert error["code"] == "model_switched" and set(error) == {"message", "type", "param", "code"}
    assert not any('"finish_reason"' in event for event in events)
    assert await _until(lambda: manager.snapshot().in_flight == 0, 5), "the aborted stream kept its lease"


async def test_a_stalled_reader_is_ended_after_the_stall_timeout(caplog: pytest.LogCaptureFixture) -> None:
    api_log = logging.getLogger("turnout.api")
    async with _serving(stream_stall_timeout_s=1.0) as (server, manager, port):
        api_log.addHandler(caplog.handler)  # the app's start-up replaced the root logger's handlers
        engine = await served_engine(manager)
        sock = _post(port, json.dumps(ENDLESS).encode())
        try:
            assert (await asyncio.to_thread(sock.recv, 256)).startswith(b"HTTP/1.1 200")  # then it reads no more
            assert await _until(lambda: _send_paused(server), 30), "the socket buffers did not fill"
            paused_at = time.perf_counter()
            assert await _until(lambda: manager.snapshot().in_flight == 0, 10), "the stalled stream kept its lease"
            released_s = time.perf_counter() - paused_at
            assert len(engine.aborted) == 1, "its engine request was not aborted"
            assert 0.9 <= released_s < 3.0, released_s
            # tools serves one request at once (max_concurrent_requests): the next one is admitted now.
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                body = {"model": "tools", "messages": [], "max_tokens": 2}
                assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        finally:
            sock.close()
            api_log.removeHandler(caplog.handler)
    ended = [r.getMessage() for r in caplog.records if "took no bytes" in r.getMessage()]
    assert len(ended) == 1 and "of model tools" in ended[0], ended


async def test_a_client_that_leaves_a_non_streaming_request_cancels_it_at_once(served: Served) -> None:
    _, manager, port = served
    long = {"model": "tools", "messages": [], "max_tokens": 10**6, "step_s": 0.01}
    engine = await served_engine(manager)
    sock = _post(port, json.dumps(long).encode())
    assert await _until(lambda: engine.running == 1, 5), "the request never reached its engine"
    await asyncio.sleep(0.3)
    sock.close()  # the client leaves
    left_at = time.perf_counter()
    assert await _until(lambda: manager.snapshot().in_flight == 0 and engine.running == 0, 5)
    ended_s = time.perf_counter() - left_at
    assert ended_s < 1.0, f"the abandoned request ran on for {ended_s:.2f} s"
    switch_body = {"model": "plain", "drain_timeout": 30}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=admin(), timeout=30) as client:
        switch = await client.post("/v1/models/switch", json=switch_body)
    assert switch.status_code == 200 and switch.json()["drain_ms"] < 500, switch.text


async def test_a_waiter_whose_client_leaves_leaves_the_queue_at_once() -> None:
    loader = FakeLoader()
    async with _serving(loader) as (_, manager, port):
        loader.delay_s = 3.0  # the switch to plain takes this long; its requests wait for it
        switch = asyncio.create_task(manager.switch("plain"))
        assert await _until(lambda: manager.snapshot().switching_to == "plain", 5)
        sock = _post(port, json.dumps({"model": "plain", "messages": [], "max_tokens": 2}).encode())
        assert await _until(lambda: manager.snapshot().slots[1].queued == 1, 5), "the request did not wait"
        sock.close()
        left_at = time.perf_counter()
        assert await _until(lambda: manager.snapshot().slots[1].queued == 0, 5)
        assert time.perf_counter() - left_at < 1.0 and not switch.done(), "it stayed queued until the switch"
        await switch
        assert manager.snapshot().in_flight == 0, "the request of a client that left was admitted anyway"
