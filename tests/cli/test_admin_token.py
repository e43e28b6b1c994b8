"""The admin token a server generates goes to a private file of the state folder; only its path is printed (text)
or logged (``--log-format json``), and a refused state folder stops the start."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from server.cli import admin_token

TOKEN = "generated-token-not-to-print"


def test_the_generated_token_is_kept_in_a_private_file_and_only_its_path_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    # Rich then writes to the current sys.stdout; its "file" property would be put back as capsys's stream.
    monkeypatch.setattr(admin_token.out_console, "_file", None)

    path = admin_token.keep_generated_token(TOKEN, "TURNOUT_ADMIN_TOKEN", as_log=False)

    assert path == tmp_path / "turnout" / admin_token.ADMIN_TOKEN_FILE
    assert path.read_text() == TOKEN + "\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    printed = capsys.readouterr()
    assert TOKEN not in printed.out + printed.err
    assert str(path) in printed.out and f"export TURNOUT_ADMIN_TOKEN_FILE={path}" in printed.out


def test_with_json_logs_only_the_path_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    with caplog.at_level(logging.INFO, logger="turnout.cli"):
        path = admin_token.keep_generated_token(TOKEN, "TURNOUT_ADMIN_TOKEN", as_log=True)
    logged = caplog.text
    assert str(path) in logged and TOKEN not in logged


def test_a_state_folder_open_to_others_stops_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    (tmp_path / "turnout").mkdir(mode=0o777)
    (tmp_path / "turnout").chmod(0o777)
    with pytest.raises(SystemExit) as stopped:
        admin_token.keep_generated_token(TOKEN, "TURNOUT_ADMIN_TOKEN", as_log=False)
    assert stopped.value.code == 1
    assert not (tmp_path / "turnout" / admin_token.ADMIN_TOKEN_FILE).exists()
