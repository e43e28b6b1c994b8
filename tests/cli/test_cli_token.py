"""A client command refused for want of an admin token says that the token's variable is unset here, not only the
server's 401 (server answers faked)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from server.cli import client

UNAUTHORIZED = {"error": {"message": "Missing or invalid admin token: send 'Authorization: Bearer <token>'."}}


def _switch(monkeypatch: pytest.MonkeyPatch, status: int, env: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    sent: dict[str, str] = {}

    def fake_request(method: str, url: str, *, headers: dict[str, str], **_: Any) -> httpx.Response:
        sent.update(headers)
        return httpx.Response(status, json=UNAUTHORIZED)

    monkeypatch.setattr(client.httpx, "request", fake_request)
    monkeypatch.delenv("TURNOUT_ADMIN_TOKEN", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(client.switch, ["plain", "--url", "http://srv"])
    return result.exit_code, result.output, sent


@pytest.mark.parametrize("status", [401, 403])
def test_an_unset_token_variable_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch, status: int) -> None:
    code, output, sent = _switch(monkeypatch, status, {})

    assert code == 1
    assert sent == {}
    assert output.startswith(f"error: {status}: $TURNOUT_ADMIN_TOKEN is not set here, so no admin token was sent;")
    assert "export it" in output and "--token-env" in output
    assert "Missing or invalid admin token" in output  # the server's own words follow


def test_a_wrong_token_gets_the_servers_answer_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    code, output, sent = _switch(monkeypatch, 401, {"TURNOUT_ADMIN_TOKEN": "wrong"})

    assert code == 1
    assert sent == {"Authorization": "Bearer wrong"}
    assert output == f"error: 401: {UNAUTHORIZED['error']['message']}\n"
