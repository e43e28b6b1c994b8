"""The residency routes and the per-model concurrency limit through the API, in process, on fake engines."""

from __future__ import annotations

import asyncio
from typing import Any

from server.engine.strategies import StopStrategy
from server.profiles.schema import ModelProfile, Switching
from tests.api.conftest import MakeClient, admin
from tests.fakes.engines import FakeLoader
from tests.waiting import until


def _error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert "Traceback" not in response.text
    message: str = error["message"]
    return message


async def test_load_and_unload_routes(make_client: MakeClient) -> None:
    client, manager = await make_client()
    assert (await client.post("/admin/models/plain/load")).status_code == 401
    loaded = await client.post("/admin/models/plain/load", headers=admin())
    assert loaded.status_code == 200, loaded.text
    assert loaded.json() | {"duration_ms": 0} == {
        "model": "plain",
        "action": "load",
        "changed": True,
        "state": "resident",
        "active_model": "tools",
        "duration_ms": 0,
    }
    _error(await client.post("/admin/models/nope/load", headers=admin()), 404, "model_not_found")
    message = _error(await client.post("/admin/models/tools/unload", headers=admin()), 409, "residency_refused")
    assert "force" in message
    unloaded = await client.post("/admin/models/plain/unload", headers=admin())
    assert unloaded.json()["state"] == "stopped" and unloaded.json()["changed"] is True
    forced = await client.post("/admin/models/tools/unload", json={"force": True}, headers=admin())
    assert forced.status_code == 200 and forced.json()["active_model"] is None
    response = await client.post("/v1/chat/completions", json={"model": "tools", "messages": []})
    _error(response, 503, "no_active_model")
    assert int(response.headers["retry-after"]) >= 1
    assert manager.active_model is None


async def test_load_under_stop_is_409_saying_why(make_client: MakeClient) -> None:
    client, _ = await make_client(strategy=StopStrategy)
    message = _error(await client.post("/admin/models/plain/load", headers=admin()), 409, "residency_refused")
    assert "'stop' strategy holds one engine at a time" in message


async def test_status_and_metrics_show_idle_unloads(make_client: MakeClient) -> None:
    models = {
        "tools": ModelProfile(model="/m/tools", enable_auto_tool_choice=True, tool_call_parser="hermes"),
        "plain": ModelProfile(model="/m/plain", idle_unload_s=1.0, pinned=False),
    }
    client, manager = await make_client(models=models)
    await client.post("/admin/models/plain/load", headers=admin())
    slots = {slot["name"]: slot for slot in (await client.get("/admin/status", headers=admin())).json()["slots"]}
    assert 0 < slots["plain"]["unloads_in_s"] <= 1.0 and slots["tools"]["unloads_in_s"] is None

    async def poll_until_unloaded() -> None:
        while manager.snapshot().slots[1].state != "stopped":
            await client.get("/metrics")  # status and metrics calls never count as use
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll_until_unloaded(), timeout=30)  # a ceiling for a loaded machine
    metrics = (await client.get("/metrics")).text
    assert 'turnout_idle_unloads_total{model="plain"} 1.0' in metrics


async def test_past_the_concurrency_limit_and_queue_a_request_gets_429(make_client: MakeClient) -> None:
    models = {
        "tools": ModelProfile(model="/m/tools", max_concurrent_requests=1),
        "plain": ModelProfile(model="/m/plain"),
    }
    client, manager = await make_client(models=models, switching=Switching(max_queue=1))
    held = await manager.acquire("tools")  # the one request the model serves at once
    body = {"model": "tools", "messages": [], "max_tokens": 2}
    waiting = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    for _ in range(100):
        if manager.snapshot().slots[0].queued == 1:
            break
        await asyncio.sleep(0.01)
    refused = await client.post("/v1/chat/completions", json=body)
    assert "concurrent requests" in _error(refused, 429, "too_many_requests")
    assert int(refused.headers["retry-after"]) >= 1
    manager.release(held)
    assert (await asyncio.wait_for(waiting, 5)).status_code == 200


async def test_a_model_at_its_limit_answers_429_while_a_switch_drains_it(make_client: MakeClient) -> None:
    models = {
        "tools": ModelProfile(model="/m/tools", max_concurrent_requests=1),
        "plain": ModelProfile(model="/m/plain"),
    }
    switching = Switching(mode="auto", max_queue=1, min_residency_s=0.1, max_residency_s=0.1)
    client, manager = await make_client(models=models, switching=switching)
    held = await manager.acquire("tools")  # tools serves its one request: the switch away waits for it
    body = {"model": "tools", "messages": [], "max_tokens": 2}
    waiting = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    await until(lambda: manager.snapshot().slots[0].queued == 1)
    other = asyncio.create_task(client.post("/v1/chat/completions", json=body | {"model": "plain"}))
    await until(lambda: manager.snapshot().switching_to == "plain")
    refused = await client.post("/v1/chat/completions", json=body)
    assert "concurrent requests" in _error(refused, 429, "too_many_requests")
    assert int(refused.headers["retry-after"]) >= 1
    manager.release(held)
    assert (await asyncio.wait_for(other, 10)).status_code == 200
    assert (await asyncio.wait_for(waiting, 10)).status_code == 200


async def test_manual_mode_waiters_past_max_queue_get_503_with_retry_after(make_client: MakeClient) -> None:
    loader = FakeLoader()
    client, manager = await make_client(loader=loader, switching=Switching(mode="manual", max_queue=2))
    loader.delay_s = 2.0  # the admin switch to plain takes this long: its requests wait for it meanwhile
    switch = asyncio.create_task(client.post("/v1/models/switch", json={"model": "plain"}, headers=admin()))
    while manager.snapshot().switching_to is None:
        await asyncio.sleep(0.01)
    body = {"model": "plain", "messages": [], "max_tokens": 2}
    waiting = [asyncio.create_task(client.post("/v1/chat/completions", json=body)) for _ in range(2)]
    while manager.snapshot().slots[1].queued < 2:
        await asyncio.sleep(0.01)
    refused = await client.post("/v1/chat/completions", json=body)
    assert "2 requests already wait" in _error(refused, 503, "queue_full")
    assert int(refused.headers["retry-after"]) >= 1
    assert (await asyncio.wait_for(switch, 10)).status_code == 200
    assert [(await answer).status_code for answer in waiting] == [200, 200]


async def test_costs_route_serves_what_the_switches_measured(make_client: MakeClient) -> None:
    client, _ = await make_client()
    assert (await client.get("/admin/costs")).status_code == 401
    switched = await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    assert switched.status_code == 200, switched.text
    costs = (await client.get("/admin/costs", headers=admin())).json()
    assert costs["version"] == 1 and set(costs["models"]) == {"tools", "plain"}  # the start-up's load counts too
    ((path, cost),) = costs["models"]["plain"].items()
    assert path in ("in_place", "warm", "cold") and cost["count"] == 1 and cost["mean_s"] >= 0
