"""``turnout status`` prints the last switch attempt and the auto-mode queues (server answers faked)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from server.cli import client

SNAPSHOT: dict[str, Any] = {
    "active_model": "tools",
    "switching_to": None,
    "mode": "auto",
    "strategy": "keep",
    "in_flight": 1,
    "slots": [
        {"name": "tools", "model": "/m/tools", "state": "active", "reason": None, "in_flight": 1, "queued": 0},
        {
            "name": "plain",
            "model": "/m/plain",
            "state": "failed",
            "reason": "OSError: no weights",
            "in_flight": 0,
            "queued": 0,
            "retry_in_s": 42.0,
        },
    ],
    "last_switch": None,
    "last_attempt": {
        "source": "tools",
        "target": "plain",
        "trigger": "auto",
        "strategy": "keep",
        "outcome": "failed",
        "error": "OSError: no weights",
        "restored": "tools",
        "started_at": 1.0,
        "duration_ms": 12.0,
    },
}


def test_status_shows_the_last_attempt_with_its_error_and_the_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_request(method: str, url: str, **_: Any) -> httpx.Response:
        assert (method, url) == ("GET", "http://srv/admin/status")
        return httpx.Response(200, json=SNAPSHOT)

    monkeypatch.setattr(client.httpx, "request", fake_request)
    result = CliRunner().invoke(client.status, ["--url", "http://srv"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "last switch attempt: tools -> plain (auto): failed in 12 ms: OSError: no weights" in result.output
    assert "retried in 42 s" in result.output
