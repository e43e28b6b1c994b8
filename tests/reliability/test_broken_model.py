"""A switch to a broken model (tiny-plain with a corrupt model.safetensors) under load: the previous model keeps
serving, and no request is lost or answered by the wrong model."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.api.live_server import LiveServer
from tests.reliability.conftest import ADMIN_TOKEN, save_summary
from tests.reliability.traffic import RequestSpec, TrafficReport, run_traffic

pytestmark = pytest.mark.engine

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: A stream that names no model waits for the switch's target; when that fails to load, the stream (its headers
#: sent with the waiting comments) ends with the same refusal a non-streaming one gets as a 503.
WAITING_STREAM_REFUSALS = frozenset({"model_load_failed"})


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param("keep", marks=pytest.mark.live_server("keep")),
        pytest.param("stop", marks=pytest.mark.live_server("stop")),
        pytest.param("reconfigure", marks=pytest.mark.live_server("reconfigure")),
    ],
)
async def test_a_switch_to_a_broken_model_under_load_keeps_the_previous_one_serving(
    profile: str, live: LiveServer, completion_prompts: dict[str, str]
) -> None:
    # Requests naming the active model, and requests naming none, for as long as the switch fails and rolls back.
    batch = [
        RequestSpec(api="chat", stream=index % 2 == 0, model=None if index % 3 else "tools") for index in range(12)
    ]
    batch += [RequestSpec(api="completion", stream=index % 2 == 0, model="tools") for index in range(4)]
    async with httpx.AsyncClient(base_url=live.url, headers=AUTH, timeout=600) as client:
        assert (await client.post("/v1/models/switch", json={"model": "tools"})).status_code == 200
        switching = asyncio.create_task(client.post("/v1/models/switch", json={"model": "broken", "drain_timeout": 1}))
        runs = []
        while not switching.done():
            runs.append(
                await run_traffic(
                    live.url,
                    batch,
                    prompts=completion_prompts,
                    concurrency=4,
                    expected_errors=WAITING_STREAM_REFUSALS,
                )
            )
        switch = await switching
        runs.append(await run_traffic(live.url, batch, prompts=completion_prompts, concurrency=4))  # after it
        status = (await client.get("/admin/status")).json()
    report = TrafficReport.merged(runs)
    summary = report.summary()
    save_summary(f"broken-{profile}", {**summary, "switch": switch.json()})
    error = switch.json()["error"]
    assert switch.status_code == 503 and error["code"] == "switch_failed", switch.text
    assert error["rolled_back"] is True and switch.headers["retry-after"], switch.text
    assert "'tools' was restored and keeps serving" in error["message"]
    assert status["active_model"] == "tools" and status["switching_to"] is None
    assert {slot["name"]: slot["state"] for slot in status["slots"]}["broken"] == "failed"
    counts = report.counts()
    assert counts["lost"] == 0 and counts["wrong"] == 0 and counts["failed"] == 0, summary
    assert len(runs) >= 2, summary  # traffic ran along the failed switch (requests without a model wait it out)
    assert counts["completed"] >= len(report.results) // 3, summary
    ready = httpx.get(f"{live.url}/ready", timeout=30)
    assert ready.status_code == 200 and ready.json()["active_model"] == "tools"
