"""``turnout status`` prints the last switch attempt, the auto-mode queues and the memory budget's room (server
answers faked)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import msgspec
import pytest
from click.testing import CliRunner

from server.cli import client
from server.engine import EngineManager
from tests.fakes.memory_plans import budget_manager

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


def _status_output(monkeypatch: pytest.MonkeyPatch, snapshot: dict[str, Any]) -> str:
    def fake_request(method: str, url: str, **_: Any) -> httpx.Response:
        assert (method, url) == ("GET", "http://srv/admin/status")
        return httpx.Response(200, json=snapshot)

    monkeypatch.setattr(client.httpx, "request", fake_request)
    result = CliRunner().invoke(client.status, ["--url", "http://srv"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_status_shows_the_last_attempt_with_its_error_and_the_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    output = _status_output(monkeypatch, SNAPSHOT)
    assert "last switch attempt: tools -> plain (auto): failed in 12 ms: OSError: no weights" in output
    assert "retried in 42 s" in output
    assert "memory budget" not in output  # no budget: no line


async def test_status_shows_the_budget_the_room_left_and_why_a_model_was_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager: EngineManager[Any] = budget_manager()
    try:
        await manager.initialize("a")
        await manager.switch("b")
        await manager.switch("c")  # a goes: b and c hold 4 of 5 GiB
        snapshot = msgspec.to_builtins(manager.snapshot())  # the status route's body, as the server sends it
    finally:
        await manager.shutdown()
    output = _status_output(monkeypatch, snapshot)
    assert "memory budget: 5.0 GiB  held: 4.0 GiB  room left: 1.0 GiB" in output
    cells = re.sub(r"[\s│┃]", "", output)  # the reason column wraps at the console's width
    assert "evictedtofitc(needs2.0GiB,free0B)" in cells


def test_status_shows_each_models_last_start_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = {**SNAPSHOT, "slots": [dict(slot) for slot in SNAPSHOT["slots"]]}
    phases = {"config": 12, "launch": 210, "weights": 9, "kv_cache": 61, "ready": 900}
    snapshot["slots"][0]["last_start"] = {"started_at": 1.0, "total_ms": 3400, "phases_ms": phases}
    output = _status_output(monkeypatch, snapshot)
    assert "last start of tools: 3.4 s: config 12 ms, launch 210 ms, weights 9 ms, kv cache 61 ms, ready 900 ms" in (
        output
    )
    assert "last start of plain" not in output  # never started (or unmeasured): no line


def test_status_shows_the_last_switchs_proof_and_the_armed_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    verify = {"outcome": "fell_back", "duration_ms": 812.4, "path": "in_place", "detail": "the in_place was wrong"}
    report = {"previous_model": "plain", "current_model": "tools", "switched": True, "duration_ms": 900.0}
    snapshot = {**SNAPSHOT, "last_switch": {**report, "verify": verify}, "faults": ["weights:tools"]}
    output = _status_output(monkeypatch, snapshot)
    assert "last proof: fell_back after the in_place in 812 ms: the in_place was wrong" in output
    assert "faults armed (drill): weights:tools" in output
    assert "last proof" not in _status_output(monkeypatch, SNAPSHOT)  # no proof ran: no line
