"""The prefix cache salted per key (fake engines): the body that reaches the bundle carries the key's group's salt.

Keys in one ``cache_group`` get one salt, other keys another each; a request's own ``cache_salt`` is combined with
its key's, never replaces it; a server without keys passes bodies on unchanged; a reload keeps every salt. The
real engine's side (a salt really separates cached prefixes) is ``test_live_trust.py``'s.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.api import ApiSettings, create_app
from server.api.cache_salts import UNSALTED
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy
from server.profiles.schema import ModelProfile
from tests.api.served_profile import Served, serve_profile
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader

FULL = "salt-key-for-everything"
TEAM_A = "salt-key-team-a"
TEAM_A_TOO = "salt-key-team-a-too"
LONER = "salt-key-alone"
ENV = {"TURNOUT_API_KEY": FULL, "TEAM_A_KEY": TEAM_A, "TEAM_A_TOO_KEY": TEAM_A_TOO, "LONER_KEY": LONER}
PROFILE = """\
models:
  tools:
    model: models/tiny
server:
{single}  api_keys:
    - key_env: TEAM_A_KEY
      models: [tools]
      cache_group: team-a
    - key_env: TEAM_A_TOO_KEY
      models: [tools]
      cache_group: team-a
    - key_env: LONER_KEY
      models: [tools]
"""
CHAT = {"model": "tools", "messages": [{"role": "user", "content": "hi"}]}
#: Every route whose vLLM request takes ``cache_salt``, and those whose request takes none (left alone).
SALTED = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
    "/v1/chat/completions/batch",
    "/generative_scoring",
    "/v1/systemone",
    "/pooling",
    "/classify",
    "/score",
    "/v1/score",
    "/rerank",
    "/v1/rerank",
    "/v2/rerank",
)
UNSALTED_PATHS = ("/tokenize", "/detokenize", "/v1/messages/count_tokens", "/v2/embed")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _served(tmp_path: Path, single: str = "") -> Served:
    return await serve_profile(tmp_path, PROFILE.format(single=single), ENV)


def _last_body(served: Served) -> dict[str, Any]:
    published = served.manager.published
    assert published is not None
    body: dict[str, Any] = published.bundle.received[-1][1]
    return body


async def _salt(served: Served, key: str, path: str = "/v1/chat/completions", **extra: Any) -> Any:
    response = await served.client.post(path, json={**CHAT, **extra}, headers=bearer(key))
    assert response.status_code < 500 and response.status_code != 401, response.text
    return _last_body(served).get("cache_salt")


async def test_each_key_gets_its_groups_salt_and_keys_of_one_group_share_it(tmp_path: Path) -> None:
    served = await _served(tmp_path)
    try:
        salts = {key: await _salt(served, key) for key in (FULL, TEAM_A, TEAM_A_TOO, LONER)}
        assert all(isinstance(salt, str) and len(salt) == 64 for salt in salts.values()), salts
        assert salts[TEAM_A] == salts[TEAM_A_TOO]
        assert len({salts[FULL], salts[TEAM_A], salts[LONER]}) == 3
        # The same key gets the same salt each time (else its own prefixes would never be reused).
        assert await _salt(served, LONER) == salts[LONER]
        # The salt says nothing of the key: neither the key nor its digest.
        for key in (FULL, TEAM_A, LONER):
            assert key not in salts.values() and hashlib.sha256(key.encode()).hexdigest() not in salts.values()
    finally:
        await served.close()


async def test_the_single_key_joins_the_group_the_profile_names(tmp_path: Path) -> None:
    served = await _served(tmp_path, single="  api_key_cache_group: team-a\n")
    try:
        assert await _salt(served, FULL) == await _salt(served, TEAM_A) != await _salt(served, LONER)
    finally:
        await served.close()


async def test_a_requests_own_salt_is_combined_with_its_keys_never_replaces_it(tmp_path: Path) -> None:
    served = await _served(tmp_path)
    try:
        bare = await _salt(served, TEAM_A)
        own = await _salt(served, TEAM_A, cache_salt="my-salt")
        # Combined: neither the client's salt nor the group's alone, the same each time, the same for its group.
        assert own not in ("my-salt", bare) and await _salt(served, TEAM_A, cache_salt="my-salt") == own
        assert await _salt(served, TEAM_A_TOO, cache_salt="my-salt") == own
        # Another key sending the same salt, or the group's own salt, does not reach the group's blocks.
        assert await _salt(served, LONER, cache_salt="my-salt") != own
        assert await _salt(served, LONER, cache_salt=bare) not in (bare, own)
        assert await _salt(served, TEAM_A, cache_salt="other-salt") not in (own, bare)
        for wrong in ("", 7):
            refused = await served.client.post(
                "/v1/chat/completions", json={**CHAT, "cache_salt": wrong}, headers=bearer(TEAM_A)
            )
            assert refused.status_code == 400 and "cache_salt" in refused.json()["error"]["message"], refused.text
    finally:
        await served.close()


async def test_every_route_that_reaches_the_prefix_cache_is_salted_and_no_other(tmp_path: Path) -> None:
    served = await _served(tmp_path)
    try:
        bare = await _salt(served, TEAM_A)
        for path in SALTED:
            assert await _salt(served, TEAM_A, path) == bare, path
        # The Anthropic route takes the key as Anthropic's clients send it.
        response = await served.client.post("/v1/messages", json=CHAT, headers={"x-api-key": TEAM_A})
        assert response.status_code == 200 and _last_body(served)["cache_salt"] == bare
        for path in UNSALTED_PATHS:
            assert await _salt(served, TEAM_A, path) is None, path
    finally:
        await served.close()


async def test_a_reload_that_changes_the_keys_keeps_every_salt(tmp_path: Path) -> None:
    served = await _served(tmp_path)
    try:
        before = {key: await _salt(served, key) for key in (TEAM_A, LONER)}
        left = "TEAM_A_TOO_KEY\n      models: [tools]\n"
        served.write(PROFILE.format(single="").replace(left + "      cache_group: team-a\n", left))
        report = await served.reload()
        assert report.status_code == 200 and report.json()["keys_changed"] is True, report.text
        assert {key: await _salt(served, key) for key in (TEAM_A, LONER)} == before
        # The key that left the group has a salt of its own now.
        assert await _salt(served, TEAM_A_TOO) not in before.values()
    finally:
        await served.close()


async def test_without_keys_the_body_reaches_the_bundle_unchanged() -> None:
    manager: EngineManager[Any] = EngineManager(
        {"tools": ModelProfile(model="/m/tools")}, KeepStrategy(FakeLoader()), build_fake_serving_bundle
    )
    await manager.initialize("tools")
    app = create_app(manager, ApiSettings())
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            for extra in ({}, {"cache_salt": "their-own"}):
                response = await client.post("/v1/chat/completions", json={**CHAT, **extra})
                assert response.status_code == 200, response.text
                published = manager.published
                assert published is not None and published.bundle.received[-1][1] == {**CHAT, **extra}
    finally:
        await manager.shutdown()


@pytest.fixture(scope="module")
def vllm_schemas() -> dict[str, Any]:
    from server.frontend.vllm_adapter import request_body_schemas

    return request_body_schemas()


def _properties(schema: dict[str, Any], schemas: dict[str, Any]) -> set[str]:
    found = set(schema.get("properties", {}))
    for option in (*schema.get("anyOf", ()), *schema.get("oneOf", ())):
        ref = option.get("$ref", "")
        found |= _properties(schemas[ref.rsplit("/", 1)[-1]] if ref else option, schemas)
    return found


def test_the_routes_salted_are_those_whose_vllm_request_takes_a_cache_salt(vllm_schemas: dict[str, Any]) -> None:
    manager: EngineManager[Any] = EngineManager(
        {"tools": ModelProfile(model="/m/tools")}, KeepStrategy(FakeLoader()), build_fake_serving_bundle
    )
    app = create_app(manager, ApiSettings(api_key="k"))
    checked = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", ()):
            if "admitted" not in (handler.dependencies or {}):
                continue
            component = handler.operation_class.__name__.removesuffix("Operation")
            takes_salt = "cache_salt" in _properties(vllm_schemas[component], vllm_schemas)
            checked[route.path] = takes_salt
            assert takes_salt is not bool(handler.opt.get(UNSALTED)), (route.path, component)
    assert {path for path, salted in checked.items() if salted} == set(SALTED)
