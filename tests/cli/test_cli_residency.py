"""``turnout load`` and ``turnout unload`` call the admin routes and print what happened (server answers faked)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from server.cli import client
from server.cli.main import main


def _fake(monkeypatch: pytest.MonkeyPatch, status: int, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    calls: list[tuple[str, str, Any]] = []

    def fake_request(method: str, url: str, **kwargs: Any) -> httpx.Response:
        calls.append((method, url, kwargs.get("json")))
        return httpx.Response(status, json=body)

    monkeypatch.setattr(client.httpx, "request", fake_request)
    return calls


def _report(action: str, state: str, active: str | None, changed: bool = True) -> dict[str, Any]:
    return {
        "model": "plain",
        "action": action,
        "changed": changed,
        "state": state,
        "active_model": active,
        "duration_ms": 12.0,
    }


def test_load_posts_and_prints_the_state(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake(monkeypatch, 200, _report("load", "resident", "tools"))
    result = CliRunner().invoke(main, ["load", "plain", "--url", "http://srv"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert calls == [("POST", "http://srv/admin/models/plain/load", None)]
    assert "load plain: resident in 12 ms; active: tools" in result.output


def test_unload_sends_force_and_the_drain_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake(monkeypatch, 200, _report("unload", "stopped", None))
    args = ["unload", "plain", "--force", "--drain-timeout", "3", "--url", "http://srv"]
    result = CliRunner().invoke(main, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert calls == [("POST", "http://srv/admin/models/plain/unload", {"force": True, "drain_timeout": 3.0})]
    assert "unload plain: stopped in 12 ms; active: -" in result.output


def test_a_refused_unload_exits_1_with_the_servers_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, 409, {"error": {"message": "'tools' is the active model; unload it with force"}})
    result = CliRunner().invoke(main, ["unload", "tools", "--url", "http://srv"])
    assert result.exit_code == 1
    assert "error: 409: 'tools' is the active model" in result.output
