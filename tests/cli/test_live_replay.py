"""``turnout simulate --live``'s replay against a stand-in server over real HTTP: what each request asks for, and
what the replay counts (waits to the first data event, refusals, the server's own switches)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from server.cli.live_replay import replay
from server.engine import TraceRequest

_METRICS_AFTER = (
    "# HELP turnout_switch_duration_seconds Wall time of each switch attempt, drain included\n"
    "# TYPE turnout_switch_duration_seconds histogram\n"
    'turnout_switch_duration_seconds_bucket{from="b",to="a",strategy="keep",outcome="ok",le="+Inf"} 1.0\n'
    'turnout_switch_duration_seconds_count{from="b",to="a",strategy="keep",outcome="ok"} 1.0\n'
    'turnout_switch_duration_seconds_sum{from="b",to="a",strategy="keep",outcome="ok"} 2.5\n'
)


class _Server(ThreadingHTTPServer):
    bodies: list[dict[str, Any]]
    metrics_reads: int


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        assert self.path == "/metrics"
        text = _METRICS_AFTER if self.server.metrics_reads else ""
        self.server.metrics_reads += 1
        self._answer(200, "text/plain", text.encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        if body["model"] == "b":
            self._answer(503, "application/json", b'{"error": {"message": "busy"}}')
            return
        # A comment while the request waits for its model, then its tokens.
        events = ": waiting\n\n" + 'data: {"choices": [{"text": "x"}]}\n\n' * 2 + "data: [DONE]\n\n"
        self._answer(200, "text/event-stream", events.encode())

    def _answer(self, status: int, kind: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def stand_in() -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.bodies, server.metrics_reads = [], 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_each_request_asks_for_all_its_recorded_output_tokens_and_the_replay_counts_as_the_server_says(
    stand_in: _Server,
) -> None:
    trace = [
        TraceRequest(at=0.0, model="a", prompt_tokens=5, output_tokens=40),
        TraceRequest(at=0.05, model="b", prompt_tokens=3, output_tokens=7),
        TraceRequest(at=0.1, model="a", prompt_tokens=2, output_tokens=12),
        TraceRequest(at=0.1, model="other", prompt_tokens=2, output_tokens=12),
    ]
    url = f"http://127.0.0.1:{stand_in.server_address[1]}"

    outcome = replay(url, trace, ["a", "b"], speed=10.0, admin="token", key=None)

    asked = sorted((body["model"], body["max_tokens"], body.get("ignore_eos")) for body in stand_in.bodies)
    # The model's end of text must not cut a replayed request shorter than the trace recorded.
    assert asked == [("a", 12, True), ("a", 40, True), ("b", 7, True)]
    assert all(body["stream"] for body in stand_in.bodies)
    a, b = outcome.models["a"], outcome.models["b"]
    assert (a.requests, a.refused, b.requests, b.refused) == (2, 0, 1, 1)
    assert (a.switches, a.switch_s, b.switches) == (1, 2.5, 0)
    assert 0 < a.wait_max_s < 5 and outcome.overall.requests == 3
