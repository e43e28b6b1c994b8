"""vLLM's other serving routes through the API, on fake bundles: admission, routing, shapes, switches, keys."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from server.engine.strategies import StopStrategy
from server.frontend import OPERATION_SPECS
from server.profiles.schema import ModelProfile
from tests.api.conftest import MakeClient, admin


def _sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each named SSE event."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines.get("event", ""), msgspec.json.decode(lines["data"])))
    return events


def _assert_anthropic_error(response: Any, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind and "Traceback" not in response.text
    message: str = body["error"]["message"]
    return message


async def test_responses_are_answered_by_the_requested_model_and_retrieved_from_it(make_client: MakeClient) -> None:
    client, _ = await make_client()
    created = (await client.post("/v1/responses", json={"model": "tools", "input": "hi"})).json()
    assert created["model"] == "tools"
    retrieved = await client.get(f"/v1/responses/{created['id']}")
    assert retrieved.status_code == 200 and retrieved.json() == created


async def test_a_response_of_a_model_switched_away_is_a_404_that_says_so(make_client: MakeClient) -> None:
    client, _ = await make_client()
    created = (await client.post("/v1/responses", json={"model": "tools", "input": "hi"})).json()
    await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    gone = await client.get(f"/v1/responses/{created['id']}")
    assert gone.status_code == 404
    assert "created by model 'tools'" in gone.json()["error"]["message"]
    assert "active model is 'plain'" in gone.json()["error"]["message"]
    # Back on 'tools': the keep strategy kept its engine resident, and its bundle with the stored response.
    await client.post("/v1/models/switch", json={"model": "tools"}, headers=admin())
    assert (await client.get(f"/v1/responses/{created['id']}")).json() == created
    unknown = await client.get("/v1/responses/resp_nobody")
    assert unknown.status_code == 404 and "not found" in unknown.json()["error"]["message"]


async def test_a_responses_stream_ends_with_its_error_event_on_a_switch(make_client: MakeClient) -> None:
    client, _ = await make_client()
    body = {"model": "tools", "input": "hi", "max_tokens": 500, "step_s": 0.01, "stream": True}
    stream = asyncio.create_task(client.post("/v1/responses", json=body))
    await asyncio.sleep(0.05)
    await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 0.05}, headers=admin())
    events = _sse((await stream).text)
    name, last = events[-1]
    assert name == "error" and last["type"] == "error" and last["code"] == "model_switched"
    assert all(data.get("model") == "tools" for _, data in events[:-1])
    assert "[DONE]" not in (await stream).text


async def test_a_messages_stream_ends_with_anthropics_error_event_on_a_switch(make_client: MakeClient) -> None:
    client, _ = await make_client()
    body = {"model": "tools", "max_tokens": 500, "step_s": 0.01, "stream": True, "messages": []}
    stream = asyncio.create_task(client.post("/v1/messages", json=body))
    await asyncio.sleep(0.05)
    await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 0.05}, headers=admin())
    name, last = _sse((await stream).text)[-1]
    assert name == "error" and last["type"] == "error"
    assert last["error"]["type"] == "overloaded_error" and "switched from 'tools'" in last["error"]["message"]


async def test_messages_errors_are_anthropic_shaped(make_client: MakeClient) -> None:
    client, _ = await make_client(api_key="k-1")
    _assert_anthropic_error(await client.post("/v1/messages", json={"model": "tools"}), 401, "authentication_error")
    key = {"x-api-key": "k-1"}
    unknown = await client.post("/v1/messages", json={"model": "nope"}, headers=key)
    assert "nope" in _assert_anthropic_error(unknown, 404, "not_found_error")
    bad = await client.post("/v1/messages", content=b"{", headers={**key, "content-type": "application/json"})
    _assert_anthropic_error(bad, 400, "invalid_request_error")
    not_json = await client.post("/v1/messages", content=b"{}", headers={**key, "content-type": "text/plain"})
    _assert_anthropic_error(not_json, 415, "invalid_request_error")
    refused = await client.post("/v1/messages", json={"model": "tools", "fail_with": 400}, headers=key)
    assert _assert_anthropic_error(refused, 400, "invalid_request_error") == "refused by the fake"
    # The OpenAI routes keep OpenAI's shape.
    assert "code" in (await client.post("/v1/responses", json={"model": "nope"}, headers=key)).json()["error"]


async def test_the_api_key_is_accepted_as_x_api_key_on_every_serving_route(make_client: MakeClient) -> None:
    client, _ = await make_client(api_key="k-1")
    assert (await client.get("/v1/models", headers={"x-api-key": "k-1"})).status_code == 200
    assert (await client.get("/v1/models", headers={"x-api-key": "wrong"})).status_code == 401
    assert (await client.post("/v1/messages", json={"messages": []}, headers=admin("k-1"))).status_code == 200


async def test_a_route_the_models_tasks_lack_is_a_404_naming_it(make_client: MakeClient) -> None:
    client, _ = await make_client()
    for path in ("/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank", "/v2/embed"):
        response = await client.post(path, json={"model": "tools", "input": "x"})
        assert response.status_code == 404, path
        assert "'tools'" in response.json()["error"]["message"]


async def test_a_response_of_an_engine_stopped_since_is_a_404_that_says_so(make_client: MakeClient) -> None:
    client, _ = await make_client(strategy=StopStrategy)
    created = (await client.post("/v1/responses", json={"model": "tools", "input": "hi"})).json()
    await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    await client.post("/v1/models/switch", json={"model": "tools"}, headers=admin())
    reloaded = await client.get(f"/v1/responses/{created['id']}")
    assert reloaded.status_code == 404 and "reloaded since" in reloaded.json()["error"]["message"]
    cancelled = await client.post(f"/v1/responses/{created['id']}/cancel")
    assert cancelled.status_code == 404 and "reloaded since" in cancelled.json()["error"]["message"]


async def test_an_alias_reaches_its_model_and_the_answer_carries_it(make_client: MakeClient) -> None:
    models = {
        "tools": ModelProfile(model="/m/tools", served_model_name=["assistant", "gpt-tools"]),
        "plain": ModelProfile(model="/m/plain", served_model_name="tiny"),
    }
    client, manager = await make_client(models=models)
    answer = await client.post("/v1/chat/completions", json={"model": "gpt-tools", "messages": []})
    assert answer.json()["model"] == "gpt-tools"
    own = await client.post("/v1/chat/completions", json={"model": "tools", "messages": []})
    assert own.json()["model"] == "tools"
    streamed = await client.post("/v1/messages", json={"model": "assistant", "stream": True, "messages": []})
    assert [data.get("model") for _, data in _sse(streamed.text)[:-1]] == ["assistant"] * 3
    cards = {card["id"]: card for card in (await client.get("/v1/models")).json()["data"]}
    assert set(cards) == {"tools", "assistant", "gpt-tools", "plain", "tiny"}
    assert cards["gpt-tools"]["parent"] == "tools" and cards["gpt-tools"]["active"] is True
    assert cards["tiny"]["parent"] == "plain" and cards["tiny"]["active"] is False
    # An alias of the inactive model is that model: manual mode answers 409 for it, as for its own name.
    assert (await client.post("/v1/chat/completions", json={"model": "tiny", "messages": []})).status_code == 409
    assert manager.active_model == "tools"


async def test_every_route_of_the_table_runs_its_own_operation_on_the_admitted_body(make_client: MakeClient) -> None:
    # The table (server/frontend/operations.py) is the one place a serving route is declared: each path it names
    # is served, and hands the body to the bundle as that entry's operation, on the one path (bundle.call).
    client, manager = await make_client()
    lease = await manager.acquire("tools")
    bundle = lease.bundle
    manager.release(lease)
    routed = [(path, spec) for spec in OPERATION_SPECS if spec.path for path in (spec.path, *spec.also)]
    assert len(routed) == 20  # every POST serving route but the Responses create
    for path, spec in routed:
        body: Any = {"model": "tools", "marker": path}
        answer = await (
            client.post(path, data=body, files={"file": ("a.wav", b"RIFF")})
            if spec.form
            else client.post(path, json=body)
        )
        assert answer.status_code < 500, (path, answer.text)  # the fake answers most of them 404 or 400
        operation, received = bundle.received[-1]
        assert (operation, received["marker"]) == (spec.name, path)
    # The ones on their own handlers take the same path.
    info_client, _ = await make_client(enable_tokenizer_info_endpoint=True)
    assert (await info_client.get("/tokenizer_info")).json()["tokenizer_class"] == "FakeTokenizer"
