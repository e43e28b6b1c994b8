"""Bad input and bad clients: malformed JSON, prompts beyond max_model_len, slow bodies, slow and stalled readers.

Each gets a clear OpenAI-shaped error (or, for a slow client, its answer in due time), and none holds up the
server: other requests keep being served, and a switch still finishes within its drain timeout and abort grace.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.live_server import LiveServer
from tests.reliability.conftest import ADMIN_TOKEN
from tests.reliability.traffic import ANSWERS, HELLO

pytestmark = [pytest.mark.engine, pytest.mark.live_server("keep")]

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
CHAT = {"messages": HELLO, "max_tokens": 16, "temperature": 0}
LONG_STREAM = {"messages": HELLO, "max_tokens": 900, "ignore_eos": True, "temperature": 0, "stream": True}
#: How long the slow reader's whole stream may take.
SLOW_READER_LIMIT_S = 300.0


def _activate(server: LiveServer, model: str) -> None:
    response = httpx.post(f"{server.url}/v1/models/switch", json={"model": model}, headers=AUTH, timeout=600)
    assert response.status_code == 200, response.text


def _openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in error["message"]
    return error


def _in_flight(server: LiveServer) -> int:
    count: int = httpx.get(f"{server.url}/admin/status", headers=AUTH, timeout=30).json()["in_flight"]
    return count


def _wait_idle(server: LiveServer, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _in_flight(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _in_flight(server) == 0, "a request stayed in flight after its client went away"


def _hello(server: LiveServer) -> str:
    response = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, timeout=120)
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


@contextmanager
def _raw_request(
    server: LiveServer, path: str, body: bytes, *, declared: int | None = None, timeout: float = 60.0
) -> Iterator[socket.socket]:
    """A socket with the request line and headers sent (not the body): the test sends the body as it likes.
    ``timeout``: how long one read may wait for a byte."""
    url = urlsplit(server.url)
    sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared if declared is not None else len(body)}\r\nConnection: close\r\n\r\n"
    )
    sock.sendall(head.encode())
    try:
        yield sock
    finally:
        sock.close()


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"messages": [', "not valid JSON"),
        (b"", "empty"),
        (b"[1, 2]", "JSON object"),
        (b'"hello"', "JSON object"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b'{"model": 7, "messages": []}', "'model' must be a string"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize"])
def test_malformed_bodies_get_a_400_in_openai_shape(live: LiveServer, path: str, body: bytes, says: str) -> None:
    response = httpx.post(f"{live.url}{path}", content=body, headers={"Content-Type": "application/json"}, timeout=60)
    assert says in _openai_error(response, 400)["message"]


def test_a_malformed_switch_body_gets_a_400_in_openai_shape(live: LiveServer) -> None:
    for body in (b'{"model": ', b"[]", b'{"drain_timeout": 1}', b'{"model": "tools", "drain_timeout": -1}'):
        headers = {**AUTH, "Content-Type": "application/json"}  # a JSON route takes only JSON bodies (else 415)
        response = httpx.post(f"{live.url}/v1/models/switch", content=body, headers=headers, timeout=60)
        _openai_error(response, 400)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "completion"])
def test_a_prompt_beyond_max_model_len_gets_a_400(live: LiveServer, api: str, stream: bool) -> None:
    _activate(live, "tools")
    text = " ".join(["weather in Paris today"] * 800)  # far beyond max_model_len (1024 tokens)
    body: dict[str, Any] = {"max_tokens": 8, "stream": stream}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    error = _openai_error(httpx.post(f"{live.url}{path}", json=body, timeout=120), 400)
    assert "1024" in error["message"]
    assert _hello(live) == ANSWERS["tools"]  # and the server serves the next request


def test_max_tokens_beyond_the_context_gets_a_400(live: LiveServer) -> None:
    _activate(live, "tools")
    body = {**CHAT, "max_tokens": 5000}
    error = _openai_error(httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=120), 400)
    assert "max_tokens" in error["message"] or "context" in error["message"].lower()


def test_a_slow_body_holds_up_nobody_and_is_answered_when_complete(live: LiveServer) -> None:
    _activate(live, "tools")
    body = json.dumps(CHAT).encode()
    with _raw_request(live, "/v1/chat/completions", body) as sock:
        last = len(body) - 1
        for index in range(0, last, 8):
            sock.sendall(body[index : min(index + 8, last)])
            if index % 32 == 0:
                started = time.monotonic()
                assert _hello(live) == ANSWERS["tools"]  # others are served meanwhile
                assert time.monotonic() - started < 30
            time.sleep(0.05)
        sock.sendall(body[last:])
        raw = _read_all(sock)
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), raw[:300]
    assert json.loads(payload)["choices"][0]["message"]["content"] == ANSWERS["tools"]


def test_a_client_that_sends_half_a_body_and_leaves_leaves_nothing_behind(live: LiveServer) -> None:
    body = json.dumps(CHAT).encode()
    for _ in range(5):
        with _raw_request(live, "/v1/chat/completions", body, declared=len(body) + 100) as sock:
            sock.sendall(body[: len(body) // 2])
            time.sleep(0.2)
    _wait_idle(live)
    assert _hello(live) == ANSWERS["tools"]


def test_a_client_that_leaves_before_its_answer_leaves_nothing_behind(live: LiveServer) -> None:
    _activate(live, "tools")
    body = json.dumps({**LONG_STREAM, "stream": False}).encode()
    for _ in range(4):
        with _raw_request(live, "/v1/chat/completions", body) as sock:
            sock.sendall(body)
            time.sleep(0.3)
    _wait_idle(live, timeout=60)
    assert _hello(live) == ANSWERS["tools"]


def _sse_events(raw: bytes) -> list[str]:
    return [line[6:] for line in raw.decode(errors="replace").splitlines() if line.startswith("data: ")]


def test_a_slow_stream_reader_gets_its_whole_stream_and_holds_up_nobody(live: LiveServer) -> None:
    _activate(live, "tools")
    body = json.dumps(LONG_STREAM).encode()
    # One read may wait as long as the whole stream may take: in a slow hour of a clean-clone run (the server's
    # second engine loading beside it, engines starting on the other worker) the stream once sent nothing for 60 s,
    # then the old per-read limit; what this test checks is that the whole stream arrives and nobody waits on it.
    with _raw_request(live, "/v1/chat/completions", body, timeout=SLOW_READER_LIMIT_S) as sock:
        sock.sendall(body)
        received = []
        deadline = time.monotonic() + SLOW_READER_LIMIT_S
        while time.monotonic() < deadline:
            chunk = sock.recv(512)
            if not chunk:
                break
            received.append(chunk)
            if len(received) % 50 == 0:
                started = time.monotonic()
                assert _hello(live) == ANSWERS["tools"]
                assert time.monotonic() - started < 30
            time.sleep(0.01)
    events = _sse_events(b"".join(received))
    assert events[-1] == "[DONE]", events[-3:]
    text = "".join(
        (json.loads(event)["choices"] or [{}])[0].get("delta", {}).get("content") or "" for event in events[:-1]
    )
    assert text.startswith(ANSWERS["tools"])


#: When the stalled client reads again: once the drain is over (drain_timeout 1 s + the manager's abort grace 10 s),
#: not after the whole switch. The switch may start an engine (40 s to minutes on a busy machine), and by then the
#: server has written the whole response, error event and [DONE] included, and closed the socket. Linux gives up on
#: such an orphaned socket whose reader keeps a zero window: measured here (notes/stall2.md), a reader silent 10-45 s
#: got everything, one silent 60 s or 100 s hung (the orphan was killed without a reset), one silent 130-280 s got
#: ECONNRESET. That, not the server, was this test's old failure when the switch had to start the target's engine.
RESUME_READING_AFTER_S = 20


async def test_a_stalled_stream_reader_does_not_hold_up_a_switch(live: LiveServer) -> None:
    _activate(live, "tools")
    body = json.dumps({**LONG_STREAM, "n": 16, "temperature": 1.0, "seed": 1}).encode()
    with _raw_request(live, "/v1/chat/completions", body) as sock:
        sock.sendall(body)
        assert sock.recv(256).startswith(b"HTTP/1.1 200")  # the stream started; now the client stops reading
        await asyncio.sleep(1)
        async with httpx.AsyncClient(base_url=live.url, headers=AUTH, timeout=600) as client:
            switch = asyncio.create_task(client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 1}))
            await asyncio.wait({switch}, timeout=RESUME_READING_AFTER_S)
            # Unless the switch cut it, the stream runs to its end: 16 x 900 tokens take minutes on a busy machine.
            sock.settimeout(300)
            raw = await asyncio.to_thread(_read_all, sock)
            report = (await switch).json()
        assert report["current_model"] == "plain", report
        # The drain took drain_timeout + at most the manager's abort grace (10 s), with room for a loaded machine;
        # a drain that waited for the reader would have lasted until it read again (RESUME_READING_AFTER_S).
        assert report["drain_ms"] < 15_000, report
        events = _sse_events(raw)
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    # Either the stream had been generated in full before the switch, or it ends with the switch error.
    assert "error" not in last or last["error"]["code"] == "model_switched", last
    assert not any('"finish_reason":"abort"' in event.replace(" ", "") for event in events)
    _activate(live, "tools")
