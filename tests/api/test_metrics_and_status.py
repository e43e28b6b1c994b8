"""Switch metrics, failure visibility and auto-mode errors through the real app (fake engines and bundles)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from server.api.metrics import KeptKVCollector
from server.profiles.schema import Switching
from server.vllm_plugin.kv_pool import BLOCK_DIGEST_BYTES, KVPool, kept_bytes_by_name
from tests.api.conftest import MakeClient, admin
from tests.fakes.engines import FakeLoader


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(text: str, name: str, **labels: str) -> float | None:
    return _samples(text).get((name, frozenset(labels.items())))


async def test_switch_attempts_feed_the_histogram_the_counter_and_the_admin_status(make_client: MakeClient) -> None:
    loader = FakeLoader()
    client, _ = await make_client(loader=loader)
    loader.fail_load.add("plain")
    failed = await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())
    assert failed.status_code == 503 and failed.json()["error"]["rolled_back"] is True
    assert "injected load failure" in failed.json()["error"]["message"]
    status = (await client.get("/admin/status", headers=admin())).json()
    attempt = status["last_attempt"]
    assert (attempt["source"], attempt["target"], attempt["outcome"], attempt["trigger"]) == (
        "tools",
        "plain",
        "failed",
        "admin",
    )
    assert "injected load failure for plain" in attempt["error"] and attempt["restored"] == "tools"
    assert (await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())).status_code == 200
    metrics = (await client.get("/metrics")).text
    pair = {"from": "tools", "to": "plain", "strategy": "keep"}
    assert _value(metrics, "turnout_switch_duration_seconds_count", **pair, outcome="ok") == 1.0
    assert _value(metrics, "turnout_switch_duration_seconds_count", **pair, outcome="failed") == 1.0
    # The retry only: the fixture starts the manager before the app (and its metrics) exist.
    assert _value(metrics, "turnout_switches_total", outcome="ok") == 1.0
    assert _value(metrics, "turnout_switches_total", outcome="failed") == 1.0
    status = (await client.get("/admin/status", headers=admin())).json()
    assert status["last_attempt"]["outcome"] == "ok" and status["last_attempt"]["error"] is None


async def test_auto_mode_load_failure_backs_off_and_tells_clients_nothing_private(make_client: MakeClient) -> None:
    loader = FakeLoader()
    loader.fail_load.add("plain")
    client, _ = await make_client(loader=loader, switching=Switching(mode="auto", failure_backoff_s=60))
    first = await client.post("/v1/chat/completions", json={"model": "plain", "max_tokens": 1})
    second = await client.post("/v1/chat/completions", json={"model": "plain", "max_tokens": 1})
    for response in (first, second):
        error = response.json()["error"]
        assert response.status_code == 503 and error["code"] == "model_load_failed"
        assert "injected" not in error["message"] and "/admin/status" in error["message"]
        assert int(response.headers["retry-after"]) >= 50
    metrics = (await client.get("/metrics")).text
    assert _value(metrics, "turnout_switches_total", outcome="failed") == 1.0, "the backoff stops a second attempt"
    # The healthy model serves on.
    healthy = await client.post("/v1/chat/completions", json={"model": "tools", "max_tokens": 1})
    assert healthy.json()["model"] == "tools"
    status = (await client.get("/admin/status", headers=admin())).json()
    assert "injected load failure for plain" in status["last_attempt"]["error"]
    assert status["last_attempt"]["trigger"] == "auto"
    plain = next(slot for slot in status["slots"] if slot["name"] == "plain")
    assert plain["retry_in_s"] > 50


async def test_auto_mode_queue_metrics(make_client: MakeClient) -> None:
    client, _ = await make_client(switching=Switching(mode="auto"))
    response = await client.post("/v1/chat/completions", json={"model": "plain", "max_tokens": 1})
    assert response.json()["model"] == "plain"
    metrics = (await client.get("/metrics")).text
    assert _value(metrics, "turnout_queue_wait_seconds_count", model="plain", outcome="admitted") == 1.0
    assert _value(metrics, "turnout_queue_depth", model="plain") == 0.0
    assert _value(metrics, "turnout_switches_total", outcome="ok") == 1.0


async def test_requests_aborted_by_a_switch_are_counted(make_client: MakeClient) -> None:
    client, _ = await make_client()
    long = asyncio.create_task(
        client.post("/v1/chat/completions", json={"model": "tools", "max_tokens": 500, "step_s": 0.01})
    )
    await asyncio.sleep(0.05)
    await client.post("/v1/models/switch", json={"model": "plain", "drain_timeout": 0.05}, headers=admin())
    assert (await long).status_code == 503
    metrics = (await client.get("/metrics")).text
    assert _value(metrics, "turnout_aborted_requests_total", model="tools") == 1.0


@pytest.fixture
def vllm_gauge() -> Iterator[Gauge]:
    gauge = Gauge("vllm:num_requests_running", "vLLM stand-in", ["model_name"], registry=REGISTRY)
    try:
        yield gauge
    finally:
        REGISTRY.unregister(gauge)


async def test_vllm_metrics_from_the_process_registry_are_on_the_same_page(
    make_client: MakeClient, vllm_gauge: Gauge
) -> None:
    client, _ = await make_client()
    vllm_gauge.labels("tools").set(3)
    metrics = (await client.get("/metrics")).text
    assert _value(metrics, "vllm:num_requests_running", model_name="tools") == 3.0
    assert _value(metrics, "turnout_in_flight_requests", model="tools") == 0.0


async def test_the_kept_kv_pool_is_read_per_scrape(make_client: MakeClient, tmp_path: Path) -> None:
    _, manager = await make_client()
    root = tmp_path / "pool"
    registry = CollectorRegistry()
    registry.register(KeptKVCollector(manager, usage=lambda names: kept_bytes_by_name(root, names)))
    assert "turnout_kv_kept_bytes" not in generate_latest(registry).decode(), "no pool: no series"
    root.mkdir(mode=0o700)
    pool = KVPool(root, limit_bytes=1 << 20)
    pool.claim("tools", "a" * 32)
    pool.write_block("a" * 32, "b" * 64, b"x" * (4096 - BLOCK_DIGEST_BYTES))  # with its digest: one tmpfs page
    text = generate_latest(registry).decode()
    assert _value(text, "turnout_kv_kept_bytes", model="tools") == 4096.0
    assert _value(text, "turnout_kv_kept_bytes", model="plain") == 0.0
    assert "vllm:external_prefix_cache_hits" in text, "the help text names where restored hits are counted"
    pool.enforce_bound()
    pool.claim("tools", "c" * 32)  # reloaded weights
    assert _value(generate_latest(registry).decode(), "turnout_kv_kept_bytes", model="tools") == 0.0


async def test_metrics_read_the_servers_own_pool(make_client: MakeClient, kept_kv_pool: KVPool) -> None:
    client, _ = await make_client()
    kept_kv_pool.claim("plain", "a" * 32)
    kept_kv_pool.write_block("a" * 32, "b" * 64, b"x" * 512)
    text = (await client.get("/metrics")).text
    # What the block takes in memory: one page of tmpfs.
    assert (
        _value(text, "turnout_kv_kept_bytes", model="plain")
        == (kept_kv_pool.root / ("a" * 32) / ("b" * 64)).stat().st_blocks * 512
    )
    assert _value(text, "turnout_kv_kept_bytes", model="tools") == 0.0


async def test_http_requests_are_counted_and_timed_by_route_template_and_status(make_client: MakeClient) -> None:
    # Before: no HTTP request metrics at all. The counters are process-wide, so the test reads differences.
    client, _ = await make_client()
    route = {"method": "POST", "path": "/admin/models/{name}/load", "app_name": "turnout"}

    def counted(metrics: str, status: str) -> float:
        return _value(metrics, "turnout_http_requests_total", **route, status_code=status) or 0.0

    before = (await client.get("/metrics")).text
    assert (await client.post("/admin/models/plain/load", headers=admin())).status_code == 200
    assert (await client.post("/admin/models/plain/load")).status_code == 401
    assert (await client.get("/no/such/route/x1")).status_code == 404
    after = (await client.get("/metrics")).text
    assert counted(after, "200") - counted(before, "200") == 1.0
    assert counted(after, "401") - counted(before, "401") == 1.0
    duration = "turnout_http_request_duration_seconds_count"
    assert (_value(after, duration, **route, status_code="200") or 0) >= 1.0
    assert "/admin/models/plain/load" not in after and "/no/such/route/x1" not in after  # templates only


async def test_an_ipv6_host_header_is_counted_not_a_500(make_client: MakeClient) -> None:
    # Litestar's own middleware builds request.url, which raises on this Host: every such request was a 500.
    client, _ = await make_client()
    assert (await client.get("/v1/models", headers={"host": "[::1]:8000"})).status_code == 200
