"""The server's own end, on a real ``turnout serve``: SIGTERM drains, ``kill -9`` leaves no engine behind."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.api.live_server import LiveServer, start_server, wait_ready

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "profiles" / "demo.yaml"
DRAIN_S = 2.0
# 64 choices of 900 tokens (all at once, see _profile): far longer than the drain timeout, and more than the socket
# buffers hold.
LONG = {"model": "tools", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 900, "ignore_eos": True}


def _profile(folder: Path) -> Path:
    """The demo profile, with absolute paths, a short drain timeout and room for all of LONG's choices at once.

    With the demo's 8 sequences and 16 MiB of KV cache, 56 of the 64 choices would wait in the scheduler's queue,
    and a short request sent meanwhile behind them: on a loaded machine it did not get its answer in 60 s.
    """
    text = (
        DEMO.read_text()
        .replace("../", f"{REPO}/")
        .replace("drain_timeout: 30", f"drain_timeout: {DRAIN_S}")
        .replace("max_num_seqs: 8", "max_num_seqs: 72")
        .replace("kv_cache_memory_bytes: 16777216", f"kv_cache_memory_bytes: {96 * 2**20}")
    )
    assert f"drain_timeout: {DRAIN_S}" in text and "max_num_seqs: 72" in text and str(96 * 2**20) in text
    profile = folder / "lifecycle.yaml"
    profile.write_text(text)
    return profile


@pytest.fixture
def live(tiny_models: dict[str, Path], tmp_path: Path) -> Iterator[LiveServer]:
    server = start_server(_profile(tmp_path), tmp_path / "serve.log", {"TURNOUT_ADMIN_TOKEN": "t"})
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


def _engine_processes(server: LiveServer) -> list[psutil.Process]:
    procs = psutil.Process(server.process.pid).children(recursive=True)
    engines = [p for p in procs if "VLLM::" in " ".join(p.cmdline())]
    assert engines, f"no engine process under the server: {[p.cmdline() for p in procs]}"
    return engines


def _launchers(server: LiveServer) -> list[psutil.Process]:
    """The server's engine launcher (``server/engine/runtime``), which forks its engine cores on CPU."""
    return [p for p in psutil.Process(server.process.pid).children() if "engine-launcher" in " ".join(p.cmdline())]


def _gone_within(procs: list[psutil.Process], timeout: float) -> float | None:
    """Seconds until every process ended (a zombie counts: a container's init may not reap), or None."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return time.perf_counter() - started
        time.sleep(0.1)
    return None


def _post_awaiting_body(url: str, body: dict[str, object]) -> socket.socket:
    """A connection with a chat request whose headers the server has read and whose body it awaits.

    The request asks ``Expect: 100-continue``: uvicorn answers ``100 Continue`` only once the app reads the body,
    so the answer proves the request is in the server's hands, without any sleep.
    """
    where = httpx.URL(url)
    assert where.host and where.port
    sock = socket.create_connection((where.host, where.port), timeout=60)
    length = len(json.dumps(body).encode())
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {where.host}:{where.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        chunk = sock.recv(1)
        assert chunk, f"the server closed the connection after {answer!r}"
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 100 "), answer
    return sock


def _until_not_listening(url: str, timeout: float = 30.0) -> None:
    """Wait until the server refuses new connections: its graceful shutdown (and so the drain) has begun."""
    where = httpx.URL(url)
    assert where.host and where.port
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        try:
            socket.create_connection((where.host, where.port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the server still accepted connections {timeout} s after SIGTERM")


def test_kill_9_of_the_server_leaves_no_engine_process(live: LiveServer) -> None:
    engines = _engine_processes(live)
    # The engine launcher (server/engine/runtime) forked them: it goes too.
    launchers = _launchers(live)
    assert launchers and any(p.ppid() == launchers[0].pid for p in engines), "no engine forked by the launcher"
    live.process.send_signal(signal.SIGKILL)
    live.process.wait(10)
    took = _gone_within([*engines, *launchers], 10.0)
    assert took is not None, [p.cmdline() for p in [*engines, *launchers] if p.is_running()]
    print(f"\nkill -9 of turnout serve: {len(engines)} engine process(es) and the launcher gone after {took:.2f} s")
    assert took < 5.0


def test_sigterm_drains_then_ends_the_rest_with_an_error_event_and_stops_the_engines(live: LiveServer) -> None:
    engines = [*_engine_processes(live), *_launchers(live)]
    events: list[str] = []
    started, resume = threading.Event(), threading.Event()

    def stream() -> None:
        # The client reads one event, then stops reading until the drain is over: the server's send blocks once
        # the socket buffers fill, so the request stays in flight however fast the tiny model generates.
        body = {**LONG, "stream": True, "n": 64, "temperature": 1.0, "seed": 1}
        with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body, timeout=120) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if not started.is_set():
                        started.set()
                        resume.wait(60)

    streaming = threading.Thread(target=stream)
    streaming.start()
    assert started.wait(60), "the stream never started"
    short = {"model": "tools", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    assert httpx.post(f"{live.url}/v1/chat/completions", json=short, timeout=60).status_code == 200
    # uvicorn closes an idle connection at SIGTERM; one whose request has begun stays open, and the draining
    # manager refuses that request.
    with _post_awaiting_body(live.url, short) as pending:
        live.process.send_signal(signal.SIGTERM)
        sent = time.perf_counter()
        _until_not_listening(live.url)
        pending.sendall(json.dumps(short).encode())
        refused = http.client.HTTPResponse(pending)
        refused.begin()
        text = refused.read().decode()
    assert refused.status == 503 and refused.getheader("retry-after"), text
    assert json.loads(text)["error"]["code"] == "server_shutting_down", text
    # Still there before the drain timeout, and gone only after it (below): an engine forked by the launcher stops
    # in about a second, so the whole shutdown can be over about a second after the drain. Timed from the signal:
    # on a loaded machine the refusal above can itself come as late as the drain's end.
    before_the_drain_ends = sent + DRAIN_S - 0.5 - time.perf_counter()
    if before_the_drain_ends > 0:
        time.sleep(before_the_drain_ends)
        assert live.process.poll() is None, "the server left before its drain ended the stream"
    resume.set()
    streaming.join(60)
    assert not streaming.is_alive()
    assert events[-1] == "[DONE]", events[-3:]
    assert json.loads(events[-2])["error"]["code"] == "server_shutting_down", events[-2]
    assert live.process.wait(60) is not None
    exited = time.perf_counter() - sent
    assert exited >= DRAIN_S, f"the server left {exited:.1f} s after SIGTERM, before its drain timeout"
    assert _gone_within(engines, 10.0) is not None
    assert "Traceback" not in live.log()
    assert "1 request(s) outlived the drain timeout" in live.log() or "ending 1 request(s)" in live.log()
    print(f"\nSIGTERM: the stream in flight ended with its error event; server and engines gone {exited:.1f} s later")
