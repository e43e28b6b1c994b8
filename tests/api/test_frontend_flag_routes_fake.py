"""Server-wide frontend flags that change the API (fake bundles): /tokenizer_info and X-Request-Id headers."""

from __future__ import annotations

import re

from tests.api.conftest import MakeClient, admin


async def test_tokenizer_info_is_served_only_when_enabled(make_client: MakeClient) -> None:
    off, _ = await make_client()
    assert (await off.get("/tokenizer_info")).status_code == 404  # vLLM registers it only when asked, too
    on, _ = await make_client(enable_tokenizer_info_endpoint=True)
    answer = await on.get("/tokenizer_info")
    assert answer.status_code == 200 and answer.json() == {"tokenizer_class": "FakeTokenizer", "model": "tools"}
    # It follows the active model, as every route without a model name does.
    await on.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    assert (await on.get("/tokenizer_info")).json()["model"] == "plain"


async def test_tokenizer_info_needs_the_api_key_like_every_serving_route(make_client: MakeClient) -> None:
    client, _ = await make_client(enable_tokenizer_info_endpoint=True, api_key="k")
    assert (await client.get("/tokenizer_info")).status_code == 401
    assert (await client.get("/tokenizer_info", headers={"Authorization": "Bearer k"})).status_code == 200


async def test_request_id_headers_echo_the_clients_or_make_one(make_client: MakeClient) -> None:
    client, _ = await make_client(enable_request_id_headers=True)
    body = {"model": "tools", "messages": [{"role": "user", "content": "hi"}]}
    echoed = await client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "mine-1"})
    assert echoed.status_code == 200 and echoed.headers["x-request-id"] == "mine-1"
    made = await client.post("/v1/chat/completions", json=body)
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])
    other = await client.post("/v1/chat/completions", json=body)
    assert other.headers["x-request-id"] != made.headers["x-request-id"]
    # Every answer, an unrouted 404 and a refused request included.
    assert "x-request-id" in (await client.get("/no/such/route")).headers
    assert "x-request-id" in (await client.post("/v1/chat/completions", json={"model": "nobody"})).headers


async def test_no_request_id_header_unless_enabled(make_client: MakeClient) -> None:
    client, _ = await make_client()
    answer = await client.get("/health", headers={"X-Request-Id": "mine"})
    assert "x-request-id" not in answer.headers
