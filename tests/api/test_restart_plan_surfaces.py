"""The restart plan on every surface, in process on fake engines: ``/v1/models``, ``/admin/status``, the status
page and ``turnout status`` show the plan the engine side computed (``server/engine/supervision/healing.py``)."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
from click.testing import CliRunner

from server.cli import client as cli_client
from server.engine.supervision.healing import GIVEN_UP
from server.profiles.schema import Switching
from tests.api.conftest import MakeClient, admin
from tests.fakes.manager_views import served_engine

CAUSE = "engine died: killed by signal 9 (SIGKILL)"
PLAN = {"restarts": 0, "max_restarts": 0, "next_restart_in_s": None, "restarting": False, "given_up": True}


async def _dead(make_client: MakeClient) -> httpx.AsyncClient:
    """A server whose active model's engine died, with no restarts allowed (the plan stays put)."""
    client, manager = await make_client(switching=Switching(max_restarts=0))
    await manager.engine_died(await served_engine(manager), CAUSE)
    http: httpx.AsyncClient = client
    return http


async def test_models_list_and_admin_status_carry_the_plan(make_client: MakeClient) -> None:
    client = await _dead(make_client)
    cards = {card["id"]: card for card in (await client.get("/v1/models")).json()["data"]}
    assert cards["tools"]["restart"] == {**PLAN, "note": GIVEN_UP}
    assert cards["plain"]["restart"] is None  # its engine never died
    slots = {slot["name"]: slot for slot in (await client.get("/admin/status", headers=admin())).json()["slots"]}
    assert slots["tools"]["restart"] == cards["tools"]["restart"] and slots["tools"]["reason"] == CAUSE


async def test_the_status_page_shows_the_plan_to_everyone(make_client: MakeClient) -> None:
    client = await _dead(make_client)
    page = (await client.get("/status")).text  # no admin token: the plan names no internals
    assert f'<span class="muted restart">{GIVEN_UP}</span>' in page
    assert CAUSE not in page


async def test_turnout_status_prints_the_plan(make_client: MakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    client = await _dead(make_client)
    snapshot = (await client.get("/admin/status", headers=admin())).json()

    def fake_request(method: str, url: str, **_: Any) -> httpx.Response:
        return httpx.Response(200, content=msgspec.json.encode(snapshot))

    monkeypatch.setattr(cli_client.httpx, "request", fake_request)
    monkeypatch.setattr(cli_client.out_console, "width", 250)  # the reason column unwrapped
    result = CliRunner().invoke(cli_client.status, ["--url", "http://srv"], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert f"({GIVEN_UP})" in result.output
