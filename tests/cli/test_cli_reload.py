"""``turnout reload`` prints what the server applied, the API keys included (server answers faked)."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner

from server.cli import client
from server.cli.main import main


def test_reload_says_when_the_keys_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    report = {
        "profile": "/p/profile.yaml",
        "applied": True,
        "changed": True,
        "keys_changed": True,
        "models": [],
        "restart_only": ["server.allowed_hosts"],
        "warnings": [],
    }
    monkeypatch.setattr(client.httpx, "request", lambda method, url, **kwargs: httpx.Response(200, json=report))
    result = CliRunner().invoke(main, ["reload", "--url", "http://srv"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "the API keys changed: they apply from the next request" in result.output
    assert "server.allowed_hosts changed: applies only when the server restarts" in result.output
