"""How the API answers engine failures, in process on fake engines: a rolled-back switch and a dead engine."""

from __future__ import annotations

import asyncio

import msgspec

from server.profiles.schema import Switching
from tests.api.conftest import MakeClient, admin
from tests.fakes.engines import FakeLoader
from tests.fakes.manager_views import served_engine
from tests.waiting import until

CAUSE = "engine died: killed by signal 9 (SIGKILL)"


async def test_a_switch_that_rolled_back_is_503_with_rolled_back_not_500(make_client: MakeClient) -> None:
    client, manager = await make_client(loader=FakeLoader(fail_load={"plain"}))
    response = await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    error = response.json()["error"]
    assert (error["code"], error["rolled_back"], error["restored_model"]) == ("switch_failed", True, "tools")
    assert "'tools' was restored and keeps serving" in error["message"] and "Traceback" not in response.text
    assert manager.active_model == "tools" and (await client.get("/ready")).status_code == 200


async def test_requests_on_a_dead_engine_end_with_503_engine_died(make_client: MakeClient) -> None:
    client, manager = await make_client(switching=Switching(max_restarts=0))  # no healing: see what stays
    body = {"model": "tools", "max_tokens": 500, "step_s": 0.01}
    plain = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    stream = asyncio.create_task(client.post("/v1/chat/completions", json={**body, "stream": True}))
    engine = await served_engine(manager)
    # Both are generating, the stream's first events out (a fixed 0.1 s sleep was once too short for that in CI,
    # and a stream that had not begun got the plain 503 instead of an error event).
    await until(lambda: engine.running == 2 and engine.yielded >= 20, what="both requests generating")
    await manager.engine_died(engine, CAUSE)
    response = await asyncio.wait_for(plain, 2.0)
    assert response.status_code == 503 and response.headers["retry-after"] == "5", response.text
    assert response.json()["error"]["code"] == "engine_died" and "signal" not in response.text
    events = [line[6:] for line in (await asyncio.wait_for(stream, 2.0)).text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert msgspec.json.decode(events[-2])["error"]["code"] == "engine_died"
    ready = await client.get("/ready")
    assert ready.status_code == 503 and ready.headers["retry-after"]
    status = (await client.get("/admin/status", headers=admin())).json()
    assert {slot["name"]: (slot["state"], slot["reason"]) for slot in status["slots"]}["tools"] == ("failed", CAUSE)


async def test_deaths_and_restarts_are_counted_on_the_metrics_page(make_client: MakeClient) -> None:
    client, manager = await make_client()
    await manager.engine_died(await served_engine(manager), CAUSE)
    for _ in range(200):  # manual mode restarts it at once (a fake engine loads in no time)
        if manager.active_model == "tools":
            break
        await asyncio.sleep(0.01)
    lines = (await client.get("/metrics")).text.splitlines()
    assert 'turnout_engine_deaths_total{cause="died",model="tools"} 1.0' in lines, [
        line for line in lines if "engine_" in line
    ]
    assert 'turnout_engine_restarts_total{model="tools",outcome="ok"} 1.0' in lines
