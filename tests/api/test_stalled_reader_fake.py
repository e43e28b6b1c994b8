"""A switch aborts a stream whose client stopped reading: the stream still ends cleanly once the client reads.

Real uvicorn (on this event loop), the real app and manager, fake engines and bundles. The client stops reading
until uvicorn's send is paused by flow control (the transport's write buffer is above its high-water mark), the
case the live stalled-reader test could not pin down: the abort then lands while the stream's task waits in
``send``. When the client reads again it must get what was sent, the switch error event and ``[DONE]``, the end of
the chunked body, and EOF: never a cut or a hang.
"""

from __future__ import annotations

import asyncio
import json
import socket
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

#: A stream that never ends on its own, in 16 KB chunks, so the socket buffers fill within a second or two.
ENDLESS = {"model": "tools", "max_tokens": 10**9, "step_s": 0.0001, "pad": 3200, "stream": True}


@pytest.fixture
async def served() -> AsyncIterator[tuple[uvicorn.Server, EngineManager[Any], int]]:
    models = {"tools": ModelProfile(model="/m/tools"), "plain": ModelProfile(model="/m/plain")}
    manager: EngineManager[Any] = EngineManager(
        models, KeepStrategy(FakeLoader()), build_fake_serving_bundle, abort_grace=0.5, memory_probe=lambda: 1.0
    )
    await manager.initialize("tools")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    app = create_app(manager, ApiSettings(admin_token=ADMIN_TOKEN))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield server, manager, listener.getsockname()[1]
    finally:
        server.should_exit = True
        await serving
        await manager.shutdown()


async def _until(condition: Any, timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _read_to_eof(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_a_stream_aborted_while_its_send_is_paused_ends_with_the_switch_error(
    served: tuple[uvicorn.Server, EngineManager[Any], int],
) -> None:
    server, manager, port = served
    body = json.dumps(ENDLESS).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: turnout.test\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        assert (await asyncio.to_thread(sock.recv, 256)).startswith(b"HTTP/1.1 200")  # then the client stalls

        def send_paused() -> bool:
            return any(connection.flow.write_paused for connection in server.server_state.connections)

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
