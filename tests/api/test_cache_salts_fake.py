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

from server.api import ApiSettings, create_app
from server.api.edge.cache_salts import UNSALTED_ROUTES
from server.api.route_table import NodeRoute, RouteTable
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy
from server.profiles.schema import ModelProfile
from tests.api.served_profile import Served, serve_profile
from tests.audio import sine_wav
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


async def _route_salt(served: Served, key: str, path: str, route: NodeRoute) -> Any:
    """The ``cache_salt`` of the body that reached the bundle by ``path`` (a form for a form route)."""
    published = served.manager.published
    assert published is not None
    before = len(published.bundle.received)
    if route.body_kind == "form":
        files = {"file": ("tone.wav", sine_wav(), "audio/wav")}
        response = await served.client.post(path, data={"model": "tools"}, files=files, headers=bearer(key))
    else:
        response = await served.client.post(path, json=CHAT, headers=bearer(key))
    assert response.status_code < 500 and response.status_code != 401, (path, response.text)
    assert len(published.bundle.received) == before + 1, f"{path}: the request never reached the bundle"
    return _last_body(served).get("cache_salt")


async def test_every_serving_route_is_salted_or_listed_unsalted_with_its_reason(tmp_path: Path) -> None:
    """Every route of the route table that admits a request to a model: the body that reaches the bundle carries
    the key's salt, or the route is in ``UNSALTED_ROUTES`` with the reason it never reaches the prefix cache."""
    routes = RouteTable(ApiSettings(api_key="k")).admitting_routes()
    paths = {path for path, _ in routes}
    assert len(paths) == len(routes) and len(paths) >= 20, sorted(paths)  # a route lost from the table shows
    assert set(UNSALTED_ROUTES) <= paths, "an unsalted route the server no longer has"
    served = await _served(tmp_path)
    try:
        bare = await _salt(served, TEAM_A)
        for path, route in routes:
            salt = await _route_salt(served, TEAM_A, path, route)
            if path in UNSALTED_ROUTES:
                assert "never" in UNSALTED_ROUTES[path], (path, UNSALTED_ROUTES[path])  # the reason says why
                assert salt is None, path
            else:
                assert salt == bare, path
        # The Anthropic route takes the key as Anthropic's clients send it.
        response = await served.client.post("/v1/messages", json=CHAT, headers={"x-api-key": TEAM_A})
        assert response.status_code == 200 and _last_body(served)["cache_salt"] == bare
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
