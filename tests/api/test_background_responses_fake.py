"""``background: true`` Responses hold their model until they end, and a switch ends them as failed, visibly."""

from __future__ import annotations

import asyncio

from tests.api.conftest import MakeClient, admin

LONG = {"model": "tools", "input": "hi", "background": True, "max_tokens": 500, "step_s": 0.01}


async def _wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_switch_ends_a_background_response_as_failed_with_the_switch_error(make_client: MakeClient) -> None:
    client, manager = await make_client()
    created = (await client.post("/v1/responses", json=LONG)).json()
    assert created["status"] == "queued"
    assert manager.snapshot().in_flight == 1  # it holds its model while it generates
    switched = await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 0.05}, headers=admin())
    assert switched.status_code == 200, switched.text
    assert manager.snapshot().in_flight == 0
    # The keep strategy kept 'tools' resident with its store: back on it, the response tells what happened.
    await client.post("/v1/models/switch", json={"model": "tools"}, headers=admin())
    retrieved = (await client.get(f"/v1/responses/{created['id']}")).json()
    assert retrieved["status"] == "failed", retrieved
    assert retrieved["error"]["code"] == "model_switched" and "tools" in retrieved["error"]["message"]
    assert "text" not in retrieved  # it never completed behind the client's back


async def test_a_background_response_that_ends_in_time_completes_and_lets_the_switch_go(
    make_client: MakeClient,
) -> None:
    client, manager = await make_client()
    short = {**LONG, "max_tokens": 5}
    created = (await client.post("/v1/responses", json=short)).json()
    switched = await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 5}, headers=admin())
    assert switched.status_code == 200 and manager.snapshot().in_flight == 0
    await client.post("/v1/models/switch", json={"model": "tools"}, headers=admin())
    retrieved = (await client.get(f"/v1/responses/{created['id']}")).json()
    assert retrieved["status"] == "completed" and "error" not in retrieved


async def test_a_finished_background_response_releases_its_model(make_client: MakeClient) -> None:
    client, manager = await make_client()
    created = (await client.post("/v1/responses", json={**LONG, "max_tokens": 3})).json()
    await _wait_for(lambda: manager.snapshot().in_flight == 0)
    assert (await client.get(f"/v1/responses/{created['id']}")).json()["status"] == "completed"
