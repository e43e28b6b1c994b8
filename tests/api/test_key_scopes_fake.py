"""API keys limited to models (``server.api_keys``), through the app on fake engines: what each key sees and may use.

A hidden model must be answered exactly as a name no model has: same status, same body (but for the name the
client sent), in every route that names a model, and with no timing difference large enough to tell them apart.
"""

from __future__ import annotations

import contextlib
import hmac
import statistics
import time
from typing import Any

import httpx
import pytest
from litestar.exceptions import NotAuthorizedException

from server.api.edge.auth import ApiKeyGuard
from server.api.edge.key_ring import KeyRing, KeySet
from server.api.edge.key_scopes import KeyNotSet, scoped_keys
from server.api.settings import ApiSettings, ScopedKey
from server.profiles.schema import ApiKeyScope, ModelProfile
from tests.api.conftest import MakeClient

FULL = "key-for-everything"
TOOLS_ONLY = "key-for-tools"
PLAIN_ONLY = "key-for-plain"
MODELS = {
    "tools": ModelProfile(model="/m/tools", served_model_name=["tools-alias"]),
    "plain": ModelProfile(model="/m/plain", served_model_name="plain-alias"),
    "third": ModelProfile(model="/m/third"),
}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def client(make_client: MakeClient) -> httpx.AsyncClient:
    # The keys as serve resolves them from the profile: an alias in the list counts as its model.
    env = {"TOOLS_KEY": TOOLS_ONLY, "PLAIN_KEY": PLAIN_ONLY}
    items = [
        ApiKeyScope(key_env="TOOLS_KEY", models=["tools"]),
        ApiKeyScope(key_env="PLAIN_KEY", models=["plain-alias"]),
    ]
    made, _ = await make_client(models=MODELS, api_key=FULL, scoped_keys=scoped_keys(items, MODELS, env))
    return made  # type: ignore[no-any-return]


async def _ids(client: httpx.AsyncClient, headers: dict[str, str]) -> list[str]:
    response = await client.get("/v1/models", headers=headers)
    assert response.status_code == 200, response.text
    return [card["id"] for card in response.json()["data"]]


async def test_each_key_lists_only_its_models_and_their_aliases(client: httpx.AsyncClient) -> None:
    assert await _ids(client, bearer(FULL)) == ["tools", "tools-alias", "plain", "plain-alias", "third"]
    assert await _ids(client, bearer(TOOLS_ONLY)) == ["tools", "tools-alias"]
    assert await _ids(client, {"x-api-key": PLAIN_ONLY}) == ["plain", "plain-alias"]
    assert (await client.get("/v1/models")).status_code == 401
    assert (await client.get("/v1/models", headers=bearer("key-for-nothing"))).status_code == 401


async def test_a_key_serves_its_model_by_name_and_alias(client: httpx.AsyncClient) -> None:
    for name in ("tools", "tools-alias"):
        body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
        response = await client.post("/v1/chat/completions", json=body, headers=bearer(TOOLS_ONLY))
        assert response.status_code == 200, response.text
        assert response.json()["model"] == name
    # No model named: the active one (tools) is this key's.
    response = await client.post("/v1/chat/completions", json={"messages": []}, headers=bearer(TOOLS_ONLY))
    assert response.status_code == 200, response.text


def _named(response: httpx.Response, name: str) -> tuple[int, str]:
    """The status and the body with the requested name blanked, to compare two answers that name different models."""
    return response.status_code, response.text.replace(name, "NAME")


ROUTES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
    ("/v1/completions", {"prompt": "hi"}),
    ("/v1/embeddings", {"input": "hi"}),
    ("/tokenize", {"prompt": "hi"}),
    ("/detokenize", {"tokens": [1]}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/pooling", {"input": "hi"}),
    ("/classify", {"input": "hi"}),
    ("/v1/rerank", {"query": "q", "documents": ["d"]}),
    ("/v2/embed", {"texts": ["hi"]}),
]


ROUTE_IDS = [f"{path}{'-stream' if body.get('stream') else ''}" for path, body in ROUTES]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=ROUTE_IDS)
async def test_a_hidden_model_is_answered_as_a_missing_one(
    client: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> None:
    hidden = await client.post(path, json={**body, "model": "plain"}, headers=bearer(TOOLS_ONLY))
    hidden_alias = await client.post(path, json={**body, "model": "plain-alias"}, headers=bearer(TOOLS_ONLY))
    missing = await client.post(path, json={**body, "model": "no-such-model"}, headers=bearer(TOOLS_ONLY))

    assert hidden.status_code == 404, hidden.text
    assert _named(hidden, "plain") == _named(missing, "no-such-model") == _named(hidden_alias, "plain-alias")
    assert "third" not in hidden.text
    assert ("not_found_error" if path.startswith("/v1/messages") else "model_not_found") in hidden.text
    # The same name with the key that may use it is served (or at least not refused as unknown).
    allowed = await client.post(path, json={**body, "model": "plain"}, headers=bearer(PLAIN_ONLY))
    assert "does not exist" not in allowed.text


async def test_no_model_named_while_another_keys_model_is_active(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={"messages": []}, headers=bearer(PLAIN_ONLY))
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and "tools" not in error["message"] and "plain" in error["message"]


async def test_stored_responses_of_hidden_models_look_like_unknown_ids(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/responses", json={"model": "tools", "input": "hi"}, headers=bearer(TOOLS_ONLY))
    response_id = created.json()["id"]
    own = await client.get(f"/v1/responses/{response_id}", headers=bearer(TOOLS_ONLY))
    assert own.status_code == 200 and own.json()["id"] == response_id

    other = await client.get(f"/v1/responses/{response_id}", headers=bearer(PLAIN_ONLY))
    unknown = await client.get("/v1/responses/resp_unknown", headers=bearer(PLAIN_ONLY))
    assert other.status_code == 404
    assert _named(other, response_id) == _named(unknown, "resp_unknown")
    cancelled = await client.post(f"/v1/responses/{response_id}/cancel", headers=bearer(PLAIN_ONLY))
    assert _named(cancelled, response_id) == _named(other, response_id)


async def test_no_timing_difference_tells_a_hidden_model_from_a_missing_one(client: httpx.AsyncClient) -> None:
    # Interleaved pairs, so that load on the machine hits both kinds alike; medians, so that a stall does not count.
    timings: dict[str, list[float]] = {"plain": [], "no-such-model": []}
    for _ in range(300):
        for name, samples in timings.items():
            body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
            start = time.perf_counter()
            response = await client.post("/v1/chat/completions", json=body, headers=bearer(TOOLS_ONLY))
            samples.append(time.perf_counter() - start)
            assert response.status_code == 404
    hidden, missing = (statistics.median(samples) for samples in timings.values())
    # A hidden model that reached the manager (a 409 in manual mode, a wait in auto mode) would cost far more
    # than this bound allows; the two paths are the same code, so only noise separates them (generous: a loaded
    # 2-core machine).
    assert abs(hidden - missing) < 0.5 * min(hidden, missing), (hidden, missing)


async def test_every_configured_key_is_compared_whichever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tuple(ScopedKey(key=f"scoped-{n}", models=frozenset({"tools"})) for n in range(3))
    guard = ApiKeyGuard(KeyRing(KeySet(api_key=FULL, scoped=keys)))
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counted(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counted)
    counts = []
    for key in (FULL, "scoped-0", "scoped-2", "wrong"):
        calls.clear()
        connection: Any = _Connection({"authorization": f"Bearer {key}"})
        with contextlib.suppress(NotAuthorizedException):  # the wrong key; what matters here is the count
            await guard(connection, None)  # type: ignore[arg-type]
        counts.append(len(calls))
        # SHA-256 digests, never the keys themselves: the time of a comparison says nothing of a key's length.
        assert set(calls) == {(32, 32)}
    # Four keys, two headers each: eight comparisons every time, the first key's match included.
    assert counts == [8, 8, 8, 8]


class _Connection:
    """Just enough of an ASGI connection for the guard: headers and a state to record the scope in."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers
        self.state: dict[str, Any] = {}


def test_an_unset_key_variable_is_refused_naming_the_item() -> None:
    items = [ApiKeyScope(key_env="SET_KEY", models=["tools"]), ApiKeyScope(key_env="UNSET_KEY", models=["plain"])]
    with pytest.raises(KeyNotSet, match=r"server\.api_keys\[1\]\.key_env: .*UNSET_KEY is not set"):
        scoped_keys(items, MODELS, {"SET_KEY": "secret"})
    resolved = scoped_keys(items[:1], MODELS, {"SET_KEY": "secret"})
    assert (
        resolved[0].models == {"tools"}
        and "secret" not in repr(resolved)
        and "secret" not in repr(ApiSettings(scoped_keys=resolved))
    )
