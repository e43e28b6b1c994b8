"""A stored response is its API key's alone (fake engines): two keys that share a model cannot read, cancel or
continue each other's responses, and to the other key the id looks exactly like one the server never made.

vLLM keeps one response store per model, shared by every key that may use the model; the server remembers which
key created each id (``stored_responses.py``). A server without keys keeps vLLM's behaviour: every client sees
every response.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from server.api.edge.key_scopes import scoped_keys
from server.profiles.schema import ApiKeyScope, ModelProfile
from tests.api.conftest import MakeClient

ALICE = "stored-key-alice"
BOB = "stored-key-bob"
MODELS = {"tools": ModelProfile(model="/m/tools"), "plain": ModelProfile(model="/m/plain")}
#: A background response that runs for a while (500 tokens, 10 ms each).
LONG = {"model": "tools", "input": "hi", "background": True, "max_tokens": 500, "step_s": 0.01}
UNKNOWN = "resp_0123456789abcdef0123456789abcdef"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def client(make_client: MakeClient) -> httpx.AsyncClient:
    """Two keys of ``server.api_keys`` that both may use "tools" (and share nothing else)."""
    env = {"ALICE_KEY": ALICE, "BOB_KEY": BOB}
    items = [ApiKeyScope(key_env="ALICE_KEY", models=["tools"]), ApiKeyScope(key_env="BOB_KEY", models=["tools"])]
    made, _ = await make_client(models=MODELS, scoped_keys=scoped_keys(items, MODELS, env))
    return made  # type: ignore[no-any-return]


def _as_unknown(response: httpx.Response, response_id: str) -> tuple[int, Any]:
    """The status and body, with ``response_id`` written as the unknown id: equal for an id never made."""
    return response.status_code, response.text.replace(response_id, UNKNOWN)


async def _unknown(client: httpx.AsyncClient, method: str, path: str, key: str, **kwargs: Any) -> tuple[int, Any]:
    answer = await client.request(method, path.format(id=UNKNOWN), headers=bearer(key), **kwargs)
    assert answer.status_code == 404, answer.text
    return answer.status_code, answer.text


async def test_another_key_cannot_retrieve_a_response_and_it_looks_unknown(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/responses", json={"model": "tools", "input": "hi"}, headers=bearer(ALICE))
    assert created.status_code == 200, created.text
    response_id = created.json()["id"]
    own = await client.get(f"/v1/responses/{response_id}", headers=bearer(ALICE))
    assert own.status_code == 200 and own.json()["id"] == response_id
    for query in ("", "?stream=true", "?stream=true&starting_after=0"):
        path = "/v1/responses/{id}" + query
        other = await client.get(path.format(id=response_id), headers=bearer(BOB))
        assert _as_unknown(other, response_id) == await _unknown(client, "GET", path, BOB), query
    # Continuing another key's conversation would show its content: refused as an unknown previous id.
    body = {"model": "tools", "input": "and then?", "previous_response_id": response_id}
    continued = await client.post("/v1/responses", json=body, headers=bearer(BOB))
    unknown = await client.post("/v1/responses", json={**body, "previous_response_id": UNKNOWN}, headers=bearer(BOB))
    assert unknown.status_code == 404, unknown.text
    assert _as_unknown(continued, response_id) == (unknown.status_code, unknown.text)
    mine = await client.post("/v1/responses", json=body, headers=bearer(ALICE))
    assert mine.status_code == 200, mine.text


async def test_another_key_cannot_cancel_a_background_response(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/responses", json=LONG, headers=bearer(ALICE))
    response_id = created.json()["id"]
    assert created.json()["status"] == "queued"
    path = "/v1/responses/{id}/cancel"
    other = await client.post(path.format(id=response_id), headers=bearer(BOB))
    assert _as_unknown(other, response_id) == await _unknown(client, "POST", path, BOB)
    await asyncio.sleep(0.05)
    still = await client.get(f"/v1/responses/{response_id}", headers=bearer(ALICE))
    assert still.json()["status"] == "queued", still.text  # Bob's cancel touched nothing
    cancelled = await client.post(path.format(id=response_id), headers=bearer(ALICE))
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text


async def test_without_keys_every_client_sees_every_response(make_client: MakeClient) -> None:
    client, _ = await make_client(models=MODELS)
    created = await client.post("/v1/responses", json=LONG)
    response_id = created.json()["id"]
    assert (await client.get(f"/v1/responses/{response_id}")).json()["id"] == response_id
    body = {"model": "tools", "input": "and then?", "previous_response_id": response_id}
    assert (await client.post("/v1/responses", json=body)).status_code == 200
    cancelled = await client.post(f"/v1/responses/{response_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
