"""The API's rules, in process, on fake engines: shapes, status codes, auth, gating and drain errors."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from tests.api.conftest import ADMIN_TOKEN, MakeClient, admin
from tests.fakes.engines import FakeLoader


def _assert_openai_error(response: Any, status: int, code: str | int | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert "Traceback" not in response.text
    if code is not None:
        assert error["code"] == code
    return error


async def test_models_lists_every_model_with_status(make_client: MakeClient) -> None:
    client, _ = await make_client()
    data = (await client.get("/v1/models")).json()["data"]
    assert [(m["id"], m["status"], m["active"]) for m in data] == [
        ("tools", "active", True),
        ("plain", "stopped", False),
    ]
    assert {"root", "max_model_len", "object", "owned_by"} <= set(data[0])


async def test_chat_is_served_by_the_requested_model(make_client: MakeClient) -> None:
    client, _ = await make_client()
    response = await client.post("/v1/chat/completions", json={"model": "tools", "messages": [], "max_tokens": 2})
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "tools tools"


async def test_unknown_and_inactive_models(make_client: MakeClient) -> None:
    client, _ = await make_client()
    _assert_openai_error(await client.post("/v1/chat/completions", json={"model": "nope"}), 404, "model_not_found")
    error = _assert_openai_error(await client.post("/v1/completions", json={"model": "plain"}), 409, "model_not_active")
    assert "'tools'" in error["message"]


async def test_bad_bodies_are_400_never_500(make_client: MakeClient) -> None:
    client, _ = await make_client()
    for content in (b"{not json", b"[1, 2]", b"", b'{"model": 5}'):
        response = await client.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
        _assert_openai_error(response, 400)
    response = await client.post("/v1/models/switch", json={"model": 3}, headers=admin())
    _assert_openai_error(response, 400)
    response = await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": -1}, headers=admin())
    _assert_openai_error(response, 400)


async def test_unexpected_errors_hide_details(make_client: MakeClient) -> None:
    client, _ = await make_client()
    error = _assert_openai_error(await client.post("/v1/chat/completions", json={"fail": True}), 500)
    assert "secret internal detail" not in error["message"]


async def test_tool_choice_auto_without_auto_tools_is_400(make_client: MakeClient) -> None:
    client, _ = await make_client()
    await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    response = await client.post("/v1/chat/completions", json={"model": "plain", "tool_choice": "auto"})
    assert "auto-tool-choice" in _assert_openai_error(response, 400)["message"]


async def test_admin_auth(make_client: MakeClient) -> None:
    client, _ = await make_client()
    _assert_openai_error(await client.get("/admin/status"), 401)
    assert (await client.get("/admin/status")).headers["www-authenticate"] == "Bearer"
    _assert_openai_error(await client.get("/admin/status", headers=admin("wrong")), 401)
    assert (await client.get("/admin/status", headers=admin())).json()["active_model"] == "tools"


async def test_admin_routes_without_a_token_say_how_to_enable_them(make_client: MakeClient) -> None:
    client, _ = await make_client(admin_token=None)
    error = _assert_openai_error(await client.post("/v1/models/switch", json={"model": "plain"}), 403)
    assert "TURNOUT_ADMIN_TOKEN" in error["message"] and "--dev" in error["message"]
    dev_client, _ = await make_client(admin_token=None, dev_mode=True)
    assert (await dev_client.post("/v1/models/switch", json={"model": "plain"})).status_code == 200


async def test_api_key_guards_openai_routes_only(make_client: MakeClient) -> None:
    client, _ = await make_client(api_key="k-123")
    _assert_openai_error(await client.get("/v1/models"), 401)
    assert (await client.get("/v1/models", headers=admin("k-123"))).status_code == 200
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/admin/status", headers=admin())).status_code == 200


async def test_switch_route_reports_and_the_new_model_serves(make_client: MakeClient) -> None:
    client, _ = await make_client()
    response = await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 1}, headers=admin())
    report = response.json()
    assert response.status_code == 200
    seed_fields = {
        "previous_model",
        "current_model",
        "switched",
        "duration_ms",
        "reconfigure_ms",
        "memory_before_mb",
        "memory_after_unload_mb",
        "freed_memory_mb",
        "stash_memory_after_mb",
    }
    assert seed_fields | {"drain_ms", "aborted_requests", "strategy"} <= set(report)
    assert (report["previous_model"], report["current_model"], report["switched"]) == ("tools", "plain", True)
    response = await client.post("/v1/chat/completions", json={"model": "plain", "max_tokens": 1})
    assert response.json()["model"] == "plain"
    _assert_openai_error(
        await client.post("/v1/models/switch", json={"model": "nope"}, headers=admin()),
        404,
        "model_not_found",
    )


async def test_readiness_and_health_during_a_switch(make_client: MakeClient) -> None:
    loader = FakeLoader(delay_s=0.3)
    client, _ = await make_client(loader=loader)
    switching = asyncio.create_task(client.post("/v1/models/switch", json={"model": "plain"}, headers=admin()))
    await asyncio.sleep(0.1)
    ready = await client.get("/ready")
    _assert_openai_error(ready, 503, "switching")
    assert ready.headers["retry-after"]
    assert (await client.get("/health")).status_code == 200
    # A request for the target waits for the switch, then is served by it.
    response = await client.post("/v1/chat/completions", json={"model": "plain", "max_tokens": 1})
    assert response.json()["model"] == "plain"
    assert (await switching).status_code == 200
    assert (await client.get("/ready")).status_code == 200


async def test_drained_out_request_gets_503_with_retry_after(make_client: MakeClient) -> None:
    client, _ = await make_client()
    long = asyncio.create_task(
        client.post("/v1/chat/completions", json={"model": "tools", "max_tokens": 500, "step_s": 0.01})
    )
    await asyncio.sleep(0.05)
    switch = await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 0.05}, headers=admin())
    assert switch.json()["aborted_requests"] == 1
    response = await long
    error = _assert_openai_error(response, 503, "model_switched")
    assert response.headers["retry-after"] and "switched from 'tools' to 'plain'" in error["message"]


async def test_drained_out_stream_ends_with_an_error_event(make_client: MakeClient) -> None:
    client, _ = await make_client()
    body = {"model": "tools", "max_tokens": 500, "step_s": 0.01, "stream": True}
    stream = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    await asyncio.sleep(0.05)
    await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 0.05}, headers=admin())
    events = [line[6:] for line in (await stream).text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = msgspec.json.decode(events[-2])
    assert last["error"]["code"] == "model_switched"
    assert all("abort" not in event for event in events[:-2])


async def test_ops_routes(make_client: MakeClient) -> None:
    client, _ = await make_client()
    assert (await client.get("/version")).json()["version"]
    metrics = (await client.get("/metrics")).text
    assert 'turnout_model_state{model="tools",state="active"} 1.0' in metrics
    schema = (await client.get("/openapi.json")).json()
    assert "/v1/chat/completions" in schema["paths"] and "/v1/models/switch" in schema["paths"]
    assert ADMIN_TOKEN not in metrics
