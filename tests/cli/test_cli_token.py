"""Where a client command takes the admin token from (its variable, the file its ``_FILE`` variable names, else the
token a server generated into the private state folder), and that one refused for want of a token says the
variables are unset here, not only the server's 401 (server answers faked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from server.cli import client

UNAUTHORIZED = {"error": {"message": "Missing or invalid admin token: send 'Authorization: Bearer <token>'."}}


def _switch(
    monkeypatch: pytest.MonkeyPatch, status: int, env: dict[str, str], state: Path | None = None
) -> tuple[int, str, dict[str, str]]:
    sent: dict[str, str] = {}

    def fake_request(method: str, url: str, *, headers: dict[str, str], **_: Any) -> httpx.Response:
        sent.update(headers)
        return httpx.Response(status, json=UNAUTHORIZED)

    monkeypatch.setattr(client.httpx, "request", fake_request)
    monkeypatch.delenv("TURNOUT_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("TURNOUT_ADMIN_TOKEN_FILE", raising=False)
    # A fresh state folder's home (none there unless the test made one): never this machine user's own.
    monkeypatch.setenv("XDG_STATE_HOME", str(state if state is not None else Path("/nonexistent/state")))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(client.switch, ["plain", "--url", "http://srv"])
    return result.exit_code, result.output, sent


@pytest.mark.parametrize("status", [401, 403])
def test_an_unset_token_variable_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch, status: int) -> None:
    code, output, sent = _switch(monkeypatch, status, {})

    assert code == 1
    assert sent == {}
    assert output.startswith(
        f"error: {status}: neither $TURNOUT_ADMIN_TOKEN nor $TURNOUT_ADMIN_TOKEN_FILE is set here, and no generated "
        "token is in the state folder, so no admin token was sent;"
    )
    assert "export one of them" in output and "--token-env" in output
    assert "Missing or invalid admin token" in output  # the server's own words follow


def test_a_wrong_token_gets_the_servers_answer_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    code, output, sent = _switch(monkeypatch, 401, {"TURNOUT_ADMIN_TOKEN": "wrong"})

    assert code == 1
    assert sent == {"Authorization": "Bearer wrong"}
    assert output == f"error: 401: {UNAUTHORIZED['error']['message']}\n"


def test_the_token_is_read_from_the_file_its_file_variable_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("from-file\n")
    code, _, sent = _switch(monkeypatch, 200, {"TURNOUT_ADMIN_TOKEN_FILE": str(token)})
    assert code == 0 and sent == {"Authorization": "Bearer from-file"}


def test_a_token_given_both_ways_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("from-file")
    code, output, sent = _switch(
        monkeypatch, 200, {"TURNOUT_ADMIN_TOKEN": "plain", "TURNOUT_ADMIN_TOKEN_FILE": str(token)}
    )
    assert code == 1 and sent == {}
    assert "both TURNOUT_ADMIN_TOKEN and TURNOUT_ADMIN_TOKEN_FILE are set" in output
    assert "plain" not in output and "from-file" not in output


def test_without_either_variable_the_generated_token_in_the_state_folder_is_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from server.cli.admin_token import ADMIN_TOKEN_FILE
    from server.engine import StateDir

    StateDir(tmp_path / "turnout").write_private(ADMIN_TOKEN_FILE, "generated\n")
    code, _, sent = _switch(monkeypatch, 200, {}, state=tmp_path)
    assert code == 0 and sent == {"Authorization": "Bearer generated"}
    code, _, sent = _switch(monkeypatch, 200, {"TURNOUT_ADMIN_TOKEN": "own"}, state=tmp_path)
    assert sent == {"Authorization": "Bearer own"}  # the user's own variable wins


@pytest.mark.parametrize("mode", [0o640, 0o604], ids=["group", "others"])
def test_a_generated_token_others_may_read_is_not_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: int
) -> None:
    from server.cli.admin_token import ADMIN_TOKEN_FILE
    from server.engine import StateDir

    StateDir(tmp_path / "turnout").write_private(ADMIN_TOKEN_FILE, "generated").chmod(mode)
    code, output, sent = _switch(monkeypatch, 401, {}, state=tmp_path)
    assert code == 1 and sent == {}
    assert "the generated admin token is not used" in output and "not a private file" in output
