"""``GET /status`` in process: the HTML page, its refresh, the timeline, and what only the admin sees."""

from __future__ import annotations

import re

from server.engine.residency.slot_eviction import budget_eviction
from server.engine.strategies import KeepStrategy
from server.vllm_plugin import close_kv_pool, server_kv_pool
from server.vllm_plugin.kv_pool import KVPool
from tests.api.conftest import MakeClient, admin
from tests.fakes.engines import FakeLoader
from tests.fakes.memory_plans import budget_plan

GIB = 2**30
IDENTITY = "0123456789abcdef" * 2  # a model identity as the pool takes it


def _active(html: str) -> str:
    match = re.search(r'id="active-model"><span>active model</span><b>([^<]*)</b>', html)
    assert match, html
    return match.group(1)


async def test_the_page_shows_the_models_and_the_active_one_and_refreshes(make_client: MakeClient) -> None:
    client, _ = await make_client()
    response = await client.get("/status")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert '<meta http-equiv="refresh" content="2">' in html and "<script" not in html
    assert _active(html) == "tools"
    assert 'data-model="tools" data-state="active"' in html and 'data-model="plain" data-state="stopped"' in html
    assert html.count('data-outcome="ok"') == 1  # start-up


async def test_the_page_shows_the_kept_kv_pool_only_when_there_is_one(make_client: MakeClient) -> None:
    client, _ = await make_client()
    assert "kept KV" not in (await client.get("/status")).text, "no pool: no column"
    pool = KVPool(server_kv_pool().root, limit_bytes=2**21)
    try:
        pool.claim("plain", IDENTITY)
        pool.write_block(IDENTITY, "ab" * 32, b"x" * 2**20)
        html = (await client.get("/status")).text
    finally:
        close_kv_pool()
    assert "<th>kept KV</th>" in html
    assert re.findall(r'class="kept-kv">([^<]*)<', html) == ["0.0 MiB", "1.0 MiB"]  # tools, plain


async def test_the_page_changes_after_a_switch(make_client: MakeClient) -> None:
    client, _ = await make_client()
    assert (await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())).status_code == 200
    html = (await client.get("/status")).text
    assert _active(html) == "plain"
    assert 'data-model="tools" data-state="resident"' in html
    assert "tools → plain" in html and html.count('data-outcome="ok"') == 2
    assert html.index("tools → plain") < html.index("(start-up) → tools")  # newest first


async def test_details_only_with_the_admin_token(make_client: MakeClient) -> None:
    client, _ = await make_client(loader=FakeLoader(fail_load={"plain"}))
    response = await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    assert response.status_code == 503  # rolled back: the server keeps serving
    public = (await client.get("/status")).text
    assert 'data-outcome="failed"' in public and "tools → plain" in public
    assert "injected load failure" not in public and "/m/tools" not in public and "admin-secret" not in public
    private = (await client.get("/status", headers=admin())).text
    assert "injected load failure for plain" in private and "/m/tools" in private
    assert (await client.get("/status", headers=admin("wrong"))).text.count("injected") == 0


async def test_the_admin_sees_the_memory_budget_and_the_room_left(make_client: MakeClient) -> None:
    plan = budget_plan({"tools": 3 * GIB, "plain": 2 * GIB}, 5 * GIB)
    client, _ = await make_client(
        strategy=lambda loader: KeepStrategy(loader, by_bytes=budget_eviction(lambda: plan)), memory_plan=plan
    )
    private = (await client.get("/status", headers=admin())).text
    assert "<b>3.0 GiB of 5.0 GiB held, 2.0 GiB left</b>" in private  # tools, active, holds its engine
    assert "GiB held" not in (await client.get("/status")).text
