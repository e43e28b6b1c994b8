"""Clients that leave or stop reading, on a real ``turnout serve`` with tiny engines: no accepted work is wasted.

One server (the demo profile: tools and plain, both resident under ``keep``; tools serves one request at once and
streams stall after 4 s), shared by the tests in order:

* a non-streaming request whose client leaves after a second: the engine stops generating for it and its lease
  ends within a second, and the following switch has nothing to drain;
* a stream whose client never reads: it is ended after the stall timeout, its lease goes back, and the next
  request (past ``max_concurrent_requests``) is admitted;
* a ``background: true, stream: true`` Response whose reader leaves after the first event: it completes, and
  ``retrieve`` returns it whole.

Each prints what it measured.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.live_server import LiveServer, serving

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "profiles" / "demo.yaml"
TOKEN = "departures-admin-token"
STALL_S = 4.0
#: Far longer than any test waits: 16 choices of 1,000 tokens each (sampled: vLLM takes ``n`` > 1 only so). At 8
#: choices of 900 the tiny model once finished between two polls of a loaded CI machine, before it was seen running.
LONG = {"model": "tools", "prompt": "Hello", "max_tokens": 1000, "n": 16, "ignore_eos": True}


def _profile(folder: Path, tiny_models: dict[str, Path]) -> Path:
    text = DEMO.read_text()
    for name, path in tiny_models.items():
        text = text.replace(f"../.cache/tiny-models/{name}", str(path))
    text = text.replace("../", f"{REPO}/").replace(
        "    enable_auto_tool_choice: true\n", "    enable_auto_tool_choice: true\n    max_concurrent_requests: 1\n"
    )
    text += f"\nserver:\n  stream_stall_timeout_s: {STALL_S:g}\n"
    assert "max_concurrent_requests: 1" in text
    profile = folder / "departures.yaml"
    profile.write_text(text)
    return profile


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("departures")
    env = {"TURNOUT_ADMIN_TOKEN": TOKEN, "VLLM_ENABLE_RESPONSES_API_STORE": "1"}
    with serving(_profile(folder, tiny_models), folder / "serve.log", env, preload=True) as live:
        yield live


def _admin(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300)


def _in_flight(server: LiveServer) -> int:
    with _admin(server) as admin:
        return int(admin.get("/admin/status").json()["in_flight"])


def _running(server: LiveServer, model: str) -> float:
    """vLLM's ``num_requests_running`` of ``model``'s engine."""
    metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
    pattern = rf'^vllm:num_requests_running\{{[^}}]*model_name="{model}"[^}}]*\}} (\S+)$'
    found = re.search(pattern, metrics, re.MULTILINE)
    assert found is not None, "no vllm:num_requests_running for the model"
    return float(found.group(1))


def _until(condition: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``condition`` held (None: not within ``timeout``)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if condition():
            return time.perf_counter() - started
        time.sleep(0.05)
    return None


def _post(server: LiveServer, path: str, body: dict[str, Any], *, receive_buffer: int | None = None) -> socket.socket:
    """A socket that sent ``body`` to ``path`` (the caller reads the answer, or not)."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.socket()
    if receive_buffer is not None:  # before connecting, so that the window the server sees is small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(60)
    sock.connect((host, int(port)))
    payload = json.dumps(body).encode()
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n".encode()
        + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    return sock


def _answer_so_far(sock: socket.socket) -> bytes:
    """What the server sent on ``sock`` so far (for a failure's message)."""
    try:
        return sock.recv(2000)
    except OSError:
        return b""


def test_a_client_that_leaves_a_non_streaming_request_stops_its_work(server: LiveServer) -> None:
    sock = _post(server, "/v1/completions", LONG)
    try:
        # A fresh engine's first sampled step can take long on a loaded machine: wait generously.
        ran = _until(lambda: _running(server, "tools") > 0, 180)
        sock.settimeout(0.5)
        assert ran is not None, f"the request never ran (in flight {_in_flight(server)}): {_answer_so_far(sock)!r}"
        time.sleep(1.0)
    finally:
        sock.close()  # the client leaves
    left_at = time.perf_counter()
    stopped = _until(lambda: _running(server, "tools") == 0 and _in_flight(server) == 0, 30)
    assert stopped is not None, "the abandoned request kept generating"
    seen_s = time.perf_counter() - left_at
    # One second, plus the polls themselves on a loaded machine (each reads /metrics and /admin/status).
    assert seen_s < 2.0, f"the abandoned request ran on for {seen_s:.2f} s"
    with _admin(server) as admin:
        switch = admin.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 60})
        assert switch.status_code == 200, switch.text
        drain_ms = switch.json()["drain_ms"]
        assert switch.json()["aborted_requests"] == 0 and drain_ms < 1000, switch.json()
        assert admin.post("/v1/models/switch", json={"model": "tools"}).status_code == 200
    print(
        f"\nabandoned non-streaming request: engine idle and lease gone {seen_s:.2f} s after the client left; "
        f"the next switch drained {drain_ms:.0f} ms"
    )


def test_a_stream_whose_client_never_reads_is_ended_after_the_stall_timeout(server: LiveServer) -> None:
    # 16 choices with 20 logprobs a token: some 15 MB of SSE, more than the socket buffers and uvicorn's hold.
    sock = _post(server, "/v1/completions", {**LONG, "n": 16, "logprobs": 20, "stream": True}, receive_buffer=4096)
    try:
        # Seen in flight, or (a loaded machine answering the polls late) already ended by the stall timeout.
        assert _until(lambda: _in_flight(server) == 1 or "took no bytes" in server.log(), 60) is not None
        started = time.perf_counter()
        released = _until(lambda: _in_flight(server) == 0 and _running(server, "tools") == 0, 120)
        assert released is not None, "the stalled stream kept its lease"
        took = time.perf_counter() - started
        log = server.log()
        # Its outputs kept this process busy while the engine core idled: a late health check, but no hang.
        assert "engine hung" not in log, [line for line in log.splitlines() if "engine hung" in line]
        ended = [line for line in log.splitlines() if "took no bytes" in line]
        assert len(ended) == 1 and "of model tools" in ended[0], ended
        # tools serves one request at once: the next one is admitted (and answered) now.
        short = {"model": "tools", "prompt": "Hello", "max_tokens": 4, "temperature": 0}
        answer = httpx.post(f"{server.url}/v1/completions", json=short, timeout=120)
        assert answer.status_code == 200, answer.text
    finally:
        sock.close()
    print(f"\nstalled reader: lease released {took:.1f} s after the stream began (stall timeout {STALL_S:g} s)")


def test_a_background_stream_outlives_its_reader_and_is_retrieved_whole(server: LiveServer) -> None:
    create = {
        "model": "tools",
        "input": "Hello!",
        "max_output_tokens": 900,
        "ignore_eos": True,
        "temperature": 0,
        "background": True,
        "stream": True,
        "store": True,
    }
    sock = _post(server, "/v1/responses", create)
    try:
        head = b""
        while b"response.created" not in head or b"\n\n" not in head.split(b"response.created", 1)[1]:
            received = sock.recv(4096)
            assert received, f"the server ended the answer before its first event: {head!r}"
            head += received
        created = next(
            json.loads(line[6:]) for line in head.decode().splitlines() if line.startswith("data: ") and '"id"' in line
        )
        response_id = created["response"]["id"]
    finally:
        sock.close()  # the reader leaves after the first event
    with _admin(server) as admin:
        # While it runs, it holds its model (a switch waits for it), its reader gone or not.
        # The lease first, then the status: a response still in progress after the count was running at the count
        # (the other order raced a warm engine, which may finish all 900 tokens in between).
        held = _in_flight(server)
        if admin.get(f"/v1/responses/{response_id}").json()["status"] == "in_progress":
            assert held == 1, "the background response lost its lease with its reader"

        def status() -> str:
            return str(admin.get(f"/v1/responses/{response_id}").json().get("status"))

        done = _until(lambda: status() in ("completed", "failed", "cancelled", "incomplete"), 120)
        assert done is not None, "the background response never finished"
        retrieved = admin.get(f"/v1/responses/{response_id}").json()
    # Whole: every one of its tokens (it ends at max_output_tokens, which OpenAI calls incomplete), none aborted.
    assert retrieved["status"] in ("completed", "incomplete"), retrieved
    assert (retrieved.get("incomplete_details") or {}).get("reason") in (None, "max_output_tokens"), retrieved
    assert retrieved["usage"]["output_tokens"] == 900, retrieved["usage"]
    assert _until(lambda: _in_flight(server) == 0, 10) is not None, "the finished response kept its lease"
    print(f"\nbackground stream: completed {done:.1f} s after its reader left, 900 tokens retrieved")
