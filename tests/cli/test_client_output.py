"""What ``turnout switch``, ``load`` and ``unload`` print: one line, or with ``--json`` the server's answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

import server.cli.client as client_module
from tests.cli.in_process import turnout

_SWITCH = {
    "previous_model": "tools",
    "current_model": "plain",
    "switched": True,
    "duration_ms": 812.4,
    "reconfigure_ms": None,
    "drain_ms": 3.0,
    "aborted_requests": 0,
    "strategy": "stop",
    "method": None,
    "freed_memory_mb": 120.0,
}
_LOAD = {
    "action": "load",
    "model": "plain",
    "changed": True,
    "state": "resident",
    "duration_ms": 5.0,
    "active_model": "tools",
}


def _answering(monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any]) -> None:
    monkeypatch.setattr(client_module, "_call", lambda *_args, **_kwargs: answer)


def test_switch_prints_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a 20-row table, most of its rows empty.
    _answering(monkeypatch, _SWITCH)
    result = turnout("switch", "plain")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["switched tools -> plain in 812 ms (drain 3 ms, freed 120 MB)"]
    _answering(monkeypatch, {**_SWITCH, "previous_model": None})
    assert turnout("switch", "plain").stdout.startswith("loaded plain in 812 ms")  # not "switched None -> plain"
    _answering(monkeypatch, {**_SWITCH, "switched": False})
    assert turnout("switch", "plain").stdout.splitlines() == ["plain is already active (nothing to do)"]


@pytest.mark.parametrize(("command", "answer"), [("switch", _SWITCH), ("load", _LOAD), ("unload", _LOAD)])
def test_switch_load_and_unload_take_json(
    monkeypatch: pytest.MonkeyPatch, command: str, answer: dict[str, Any]
) -> None:
    # Before: only status and reload had --json; these refused it as an unknown option.
    _answering(monkeypatch, answer)
    result = turnout(command, "plain", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == answer


def test_a_switch_from_no_model_is_logged_as_a_load() -> None:
    from server.engine.switching.switch import _switched

    assert _switched(None, "tools") == "loaded tools"  # was "switched None -> tools"
    assert _switched("plain", "tools") == "switched plain -> tools"
