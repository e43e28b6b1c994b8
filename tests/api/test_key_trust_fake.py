"""A key limited to some models, at the edges: switches, stored lookups, ops routes, errors, reloads (fake engines).

The model that answers is the one checked, a limited key is told no other model's name, and a reload that
revokes a key shuts it out from its next request while its request in flight finishes.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.api.reload.profile_watch import watch_profile
from server.api.settings import ScopedKey
from tests.api.conftest import MakeClient, admin
from tests.api.served_profile import Served, serve_profile
from tests.fakes.engines import FakeLoader

TOOLS_ONLY = "key-for-tools"
PLAIN_ONLY = "key-for-plain"
SCOPED = (
    ScopedKey(key=TOOLS_ONLY, models=frozenset({"tools"})),
    ScopedKey(key=PLAIN_ONLY, models=frozenset({"plain"})),
)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _switching(client: httpx.AsyncClient, target: str) -> asyncio.Task[httpx.Response]:
    """A switch to ``target`` under way (the fake loader takes its delay to load it)."""
    task = asyncio.create_task(client.post("/v1/models/switch", json={"model": target}, headers=admin()))
    await asyncio.sleep(0.1)
    return task


async def test_a_request_naming_no_model_is_answered_only_by_a_model_its_key_may_use(
    make_client: MakeClient,
) -> None:
    client, manager = await make_client(loader=FakeLoader(delay_s=0.6), scoped_keys=SCOPED)
    switch = await _switching(client, "plain")
    assert manager.switching_to == "plain"
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    # The tools key names no model: the target is not its model, so it is refused by its own model's rules
    # (tools takes no new requests during the switch), and the answer never names plain.
    tools_key, plain_key = await asyncio.gather(
        client.post("/v1/chat/completions", json=chat, headers=bearer(TOOLS_ONLY)),
        client.post("/v1/chat/completions", json=chat, headers=bearer(PLAIN_ONLY)),
    )
    assert tools_key.status_code != 200 and "plain" not in tools_key.text, tools_key.text
    assert tools_key.headers.get("retry-after") or tools_key.status_code == 404
    # The plain key names no model either: the switch's target is its model, so it waits for it and gets it.
    assert plain_key.status_code == 200 and plain_key.json()["model"] == "plain", plain_key.text
    assert (await switch).status_code == 200
    after = await client.post("/v1/chat/completions", json=chat, headers=bearer(TOOLS_ONLY))
    assert after.status_code == 404 and "plain" not in after.text


async def test_a_stream_naming_no_model_is_never_answered_by_the_target(make_client: MakeClient) -> None:
    client, _ = await make_client(loader=FakeLoader(delay_s=0.6), scoped_keys=SCOPED)
    switch = await _switching(client, "plain")
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
    stream = await client.post("/v1/chat/completions", json=body, headers=bearer(TOOLS_ONLY))
    assert '"model":"plain"' not in stream.text and "plain" not in stream.text, stream.text
    await switch


async def test_tokenizer_info_and_stored_lookups_during_a_switch(make_client: MakeClient) -> None:
    client, _ = await make_client(
        loader=FakeLoader(delay_s=0.6), scoped_keys=SCOPED, enable_tokenizer_info_endpoint=True
    )
    switch = await _switching(client, "plain")
    info, lookup = await asyncio.gather(
        client.get("/tokenizer_info", headers=bearer(TOOLS_ONLY)),
        client.get("/v1/responses/resp_unknown", headers=bearer(TOOLS_ONLY)),
    )
    for answer in (info, lookup):
        assert answer.status_code != 200 and "plain" not in answer.text, answer.text
    own = await client.get("/tokenizer_info", headers=bearer(PLAIN_ONLY))
    assert own.status_code == 200, own.text
    await switch


async def test_errors_to_a_limited_key_name_only_its_models(make_client: MakeClient) -> None:
    client, _ = await make_client(scoped_keys=SCOPED, api_key="key-for-all")
    # Manual mode, tools active: the plain key's own model is not active. The 409 must not say which is.
    refused = await client.post("/v1/chat/completions", json={"model": "plain"}, headers=bearer(PLAIN_ONLY))
    assert refused.status_code == 409 and "'tools'" not in refused.text and "plain" in refused.text
    full = await client.post("/v1/chat/completions", json={"model": "plain"}, headers=bearer("key-for-all"))
    assert full.status_code == 409 and "'tools'" in full.text


async def test_ops_routes_name_models_only_to_whom_may_see_them(make_client: MakeClient) -> None:
    client, _ = await make_client(scoped_keys=SCOPED)
    for path in ("/health", "/ready", "/status"):
        anonymous = await client.get(path)
        assert anonymous.status_code == 200 and "tools" not in anonymous.text and "plain" not in anonymous.text
    assert (await client.get("/health")).json() == {"status": "ok", "active_model": None, "switching_to": None}
    assert (await client.get("/ready", headers=bearer(TOOLS_ONLY))).json()["active_model"] == "tools"
    assert (await client.get("/ready", headers=bearer(PLAIN_ONLY))).json()["active_model"] is None
    assert (await client.get("/health", headers=admin())).json()["active_model"] == "tools"
    assert "tools" in (await client.get("/status", headers=admin())).text
    own = (await client.get("/status", headers=bearer(PLAIN_ONLY))).text
    assert "plain" in own and "tools" not in own and "model 1" in own
    # Without any key, names are public, as before.
    open_client, _ = await make_client()
    assert (await open_client.get("/health")).json()["active_model"] == "tools"


async def test_metrics_may_need_their_own_token(make_client: MakeClient) -> None:
    client, _ = await make_client(metrics_token="metrics-secret")
    assert (await client.get("/metrics")).status_code == 401
    assert (await client.get("/metrics", headers=bearer("wrong"))).status_code == 401
    answer = await client.get("/metrics", headers=bearer("metrics-secret"))
    assert answer.status_code == 200 and 'model="tools"' in answer.text
    assert (await client.get("/metrics", headers=admin())).status_code == 200  # the admin token opens it too
    open_client, _ = await make_client()
    assert (await open_client.get("/metrics")).status_code == 200


@pytest.mark.parametrize("keys", [{"scoped_keys": SCOPED}, {"api_key": "key-for-everything"}])
async def test_metrics_of_a_keyed_server_need_a_token_unless_public(make_client: MakeClient, keys: Any) -> None:
    # Issue 39: an anonymous scrape listed turnout_model_state{model="plain"} where /health and /status hid it.
    client, _ = await make_client(**keys)
    refused = await client.get("/metrics")
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    error = refused.json()["error"]
    assert error["type"] == "AuthenticationError" and "metrics token" in error["message"]
    assert "plain" not in refused.text and "tools" not in refused.text
    for key in (TOOLS_ONLY, "key-for-everything"):  # a serving key is no metrics token
        assert (await client.get("/metrics", headers=bearer(key))).status_code == 401
    answer = await client.get("/metrics", headers=admin())
    assert answer.status_code == 200 and 'model="plain"' in answer.text
    with_token, _ = await make_client(**keys, metrics_token="metrics-secret")
    assert (await with_token.get("/metrics", headers=bearer("metrics-secret"))).status_code == 200
    public, _ = await make_client(**keys, metrics_public=True)
    assert (await public.get("/metrics")).status_code == 200


PROFILE = """\
models:
  tools:
    model: models/tiny
  plain:
    model: models/tiny
server:
  api_keys:
    - key_env: TOOLS_KEY
      models: [tools]
{extra}
"""


async def _reloadable(tmp_path: Path) -> Served:
    return await serve_profile(tmp_path, PROFILE.format(extra=""), {"TOOLS_KEY": TOOLS_ONLY, "PLAIN_KEY": PLAIN_ONLY})


async def test_a_reload_applies_changed_keys_at_once_and_in_flight_requests_finish(tmp_path: Path) -> None:
    served = await _reloadable(tmp_path)
    client, path = served.client, served.profile
    try:
        slow = {"model": "tools", "max_tokens": 40, "step_s": 0.02}
        in_flight = asyncio.create_task(client.post("/v1/chat/completions", json=slow, headers=bearer(TOOLS_ONLY)))
        await asyncio.sleep(0.1)
        # The tools key is revoked, the plain key added: no restart.
        path.write_text(PROFILE.replace("TOOLS_KEY", "PLAIN_KEY").replace("[tools]", "[plain]").format(extra=""))
        report = await client.post("/admin/reload", json={}, headers=admin())
        assert report.status_code == 200 and report.json()["keys_changed"] is True, report.text
        assert report.json()["applied"] is True and "server.api_keys" not in report.json()["restart_only"]
        assert (await client.get("/v1/models", headers=bearer(TOOLS_ONLY))).status_code == 401
        plain = await client.get("/v1/models", headers=bearer(PLAIN_ONLY))
        assert [card["id"] for card in plain.json()["data"]] == ["plain"]
        finished = await in_flight
        assert finished.status_code == 200 and finished.json()["choices"][0]["finish_reason"] == "length"
    finally:
        await served.close()


async def test_a_reload_naming_an_unset_key_variable_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    served = await _reloadable(tmp_path)
    client, path = served.client, served.profile
    try:
        path.write_text(PROFILE.replace("TOOLS_KEY", "UNSET_KEY").format(extra=""))
        report = await client.post("/admin/reload", json={}, headers=admin())
        assert report.status_code == 422 and "UNSET_KEY" in report.text
        assert (await client.get("/v1/models", headers=bearer(TOOLS_ONLY))).status_code == 200
    finally:
        await served.close()


@pytest.fixture
async def reloadable(tmp_path: Path) -> Served:
    return await _reloadable(tmp_path)


async def test_watch_logs_an_unexpected_reload_failure_and_keeps_watching(
    reloadable: Served, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app is built before caplog hooks in: Litestar sets up logging when it builds an app.
    client, reloader, path = reloadable.client, reloadable.reloader, reloadable.profile
    real = reloader.reload
    calls: list[int] = []

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("disk on fire")
        return await real(*args, **kwargs)

    monkeypatch.setattr(reloader, "reload", flaky)
    caplog.set_level(logging.INFO, logger="turnout.api")
    watcher = asyncio.create_task(watch_profile(reloader, debounce_ms=50))
    try:
        await _until(lambda: "watching" in caplog.text)
        await asyncio.sleep(0.3)  # the watch is set up once awatch runs
        path.write_text(PROFILE.replace("TOOLS_KEY", "PLAIN_KEY").format(extra=""))
        await _until(lambda: "disk on fire" in caplog.text)
        await asyncio.sleep(0.3)
        path.write_text(PROFILE.replace("TOOLS_KEY", "PLAIN_KEY").format(extra="  # saved again"))
        await _until(lambda: "the API keys changed" in caplog.text)
        assert not watcher.done()
        assert (await client.get("/v1/models", headers=bearer(PLAIN_ONLY))).status_code == 200
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await reloadable.close()


async def _until(condition: Any, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)
