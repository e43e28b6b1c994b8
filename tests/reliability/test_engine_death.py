"""SIGKILL of the active model's engine core under streaming load, on a live server: ``stop`` (manual mode) and
``keep`` (auto mode, both models resident).

Each run stops the active engine core, sends a stream of its own (the witness) and the reliability suite's mixed
traffic (long streams first), and kills the core once three requests wait on it. The requests on the dead engine
end at once with ``engine_died`` (a stream with its error event and ``[DONE]``, a JSON request with 503 and
``Retry-After``); ``/ready`` is 503 while the active model has no engine (manual mode); the model serves again
without anyone switching; the other model is not disturbed; and nothing is lost or answered by the wrong model, as
the suite counts. The servers are the suite's own (one per profile, shared with the other tests of that profile),
and are left serving.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import httpx
import pytest

from tests.api.live_server import LiveServer
from tests.reliability.conftest import ADMIN_TOKEN, save_summary
from tests.reliability.traffic import HELLO, RequestSpec, Result, mixed_requests, run_traffic, send

pytestmark = pytest.mark.engine

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
OTHER = {"tools": "plain", "plain": "tools"}
#: How soon after the kill the requests on the dead engine must have ended, and /ready must say so. The goal is
#: a second; on the shared 2-core CI machine, with other engines busy, 0.7-1.0 s were measured, so the test allows
#: twice that (the printed figures are the measurement).
NOTICE_BOUND_S = 2.0
#: The witness stream's length: the profile's max_model_len (1024) less the chat prompt, with room to spare.
WITNESS_TOKENS = 960


def _status(client: httpx.Client) -> dict[str, Any]:
    body: dict[str, Any] = client.get("/admin/status", headers=ADMIN).json()
    return body


def _slot(status: dict[str, Any], name: str) -> dict[str, Any]:
    slot: dict[str, Any] = next(slot for slot in status["slots"] if slot["name"] == name)
    return slot


def _chat(client: httpx.Client, model: str) -> httpx.Response:
    body = {"model": model, "messages": HELLO, "max_tokens": 8, "temperature": 0}
    return client.post("/v1/chat/completions", json=body, timeout=600)


def _both_resident(client: httpx.Client) -> str:
    """Auto mode: a request for each model makes both resident (keep); returns the one active now."""
    for model in (*OTHER, *OTHER):
        for _ in range(10):  # a load on a busy machine may outlast max_wait_s: the 503 says to retry
            response = _chat(client, model)
            if response.status_code != 503:
                break
            time.sleep(float(response.headers["retry-after"]))
        assert response.status_code == 200, response.text
    status = _status(client)
    assert {_slot(status, name)["state"] for name in OTHER} == {"active", "resident"}, status
    active: str = status["active_model"]
    return active


async def _start_witness(client: httpx.AsyncClient, model: str, pid: int) -> asyncio.Task[Result]:
    """Stop ``model``'s engine core (``SIGSTOP``), then send a stream of the test's own to it (the witness) and return
    the task that reads it, once it waits on the stopped core. A warm tiny engine streams 960 tokens in about a
    second, and three times a witness that was sent first was all out before the kill (even when the core was
    stopped at its first event: vLLM's output handler had merged the whole stream into it). It starts before the
    traffic, while nothing waits for a switch (in auto mode a new request for the active model waits behind a
    pending switch). The core is killed if the witness never reaches it, so that it is never left stopped."""
    os.kill(pid, signal.SIGSTOP)
    spec = RequestSpec(api="chat", stream=True, model=model, long=True, long_tokens=WITNESS_TOKENS)
    read = asyncio.create_task(send(client, spec, {}, 600, frozenset({"engine_died"})))
    try:
        assert await _in_flight(client, model, 1, timeout=60), "the witness never reached the engine"
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        raise
    return read


async def _in_flight(client: httpx.AsyncClient, model: str, requests: int, timeout: float) -> bool:
    """Whether ``model`` had ``requests`` requests in flight within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while _slot((await client.get("/admin/status", headers=ADMIN)).json(), model)["in_flight"] < requests:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _kill_when_waited_on(client: httpx.AsyncClient, model: str, pid: int) -> float:
    """SIGKILL ``model``'s stopped engine core once three requests wait on it (the witness and two of the traffic's),
    or after 2 s (in auto mode the traffic's requests for the active model may wait behind a pending switch
    instead; its drain_timeout is 5 s, the watch's health_check_timeout_s 10 s); returns when (monotonic)."""
    try:
        await _in_flight(client, model, 3, timeout=2)
    finally:
        os.kill(pid, signal.SIGKILL)
    return time.monotonic()


async def _ready_after(client: httpx.AsyncClient, killed_at: float) -> tuple[int, str, float]:
    """The first /ready answer that is not 200 after the kill: status, code and seconds after the kill."""
    while time.monotonic() - killed_at < 10:
        response = await client.get("/ready")
        if response.status_code != 200:
            return response.status_code, str(response.json()["error"]["code"]), time.monotonic() - killed_at
        await asyncio.sleep(0.02)
    return 200, "", 10.0


async def _served_again(client: httpx.AsyncClient, model: str, killed_at: float) -> float:
    """Seconds from the kill until a request for ``model`` is answered by it (nobody switches)."""
    body = {"model": model, "messages": HELLO, "max_tokens": 8, "temperature": 0}
    deadline = killed_at + 600
    while time.monotonic() < deadline:
        response = await client.post("/v1/chat/completions", json=body, timeout=600)
        if response.status_code == 200:
            assert response.json()["model"] == model
            return time.monotonic() - killed_at
        assert response.status_code == 503 and "retry-after" in response.headers, response.text
        await asyncio.sleep(0.2)
    raise AssertionError(f"{model} did not serve again within 600 s")


def _died(results: list[Result]) -> list[Result]:
    return [result for result in results if result.reason in ("stream error engine_died", "503 engine_died")]


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param("stop", marks=pytest.mark.live_server("stop")),
        pytest.param("auto", marks=pytest.mark.live_server("auto")),
    ],
)
async def test_sigkill_of_the_active_engine_under_streaming_load(
    profile: str, live: LiveServer, completion_prompts: dict[str, str]
) -> None:
    log_start = len(live.log())
    with httpx.Client(base_url=live.url, timeout=60) as client:
        active = _both_resident(client) if profile == "auto" else _status(client)["active_model"]
        other = OTHER[active]
        before = _status(client)
        pids = _slot(before, active)["pids"]
        assert pids, before
    # Long enough that a warm engine (one that served a minute of traffic before) is still streaming them when it
    # is killed: 160 tokens each were all out within the 0.3 s the kill waits, once (no stream saw the death).
    long_streams = [RequestSpec(api="chat", stream=True, model=active, long=True, long_tokens=800) for _ in range(6)]
    specs = long_streams + mixed_requests(30, [active, other], seed=17, allow_default=False)
    async with httpx.AsyncClient(base_url=live.url, timeout=60) as client:
        witness = await _start_witness(client, active, pids[0])
        traffic = asyncio.create_task(
            run_traffic(
                live.url,
                specs,
                prompts=completion_prompts,
                concurrency=8,
                request_timeout=600,
                expected_errors=frozenset({"engine_died"}),
            )
        )
        killed_at = await _kill_when_waited_on(client, active, pids[0])
        ready = asyncio.create_task(_ready_after(client, killed_at))
        served_s = await _served_again(client, active, killed_at)
        ready_status, ready_code, ready_s = await ready
        report = await traffic
        witnessed = await witness
        after = (await client.get("/admin/status", headers=ADMIN)).json()
        metrics = (await client.get("/metrics")).text

    died = _died([*report.results, witnessed])
    noticed_s = min(result.ended_at for result in died) - killed_at if died else float("inf")
    ended_s = max(result.ended_at for result in died) - killed_at if died else float("inf")
    summary = report.summary()
    summary.update(
        profile=profile,
        killed=active,
        noticed_s=round(noticed_s, 2),
        all_ended_s=round(ended_s, 2),
        ready=f"{ready_status} {ready_code} after {ready_s:.2f} s",
        served_again_s=round(served_s, 1),
        witness=witnessed.reason,
    )
    save_summary(f"engine-death-{profile}", summary)
    print(
        f"\nSIGKILL ({profile}): requests on the dead engine ended after {noticed_s:.2f}-{ended_s:.2f} s, "
        f"/ready {ready_status} after {ready_s:.2f} s, served again after {served_s:.1f} s"
    )

    counts = report.counts()
    assert counts["lost"] == 0 and counts["wrong"] == 0 and counts["failed"] == 0, summary
    assert sum(counts.values()) == len(specs)
    # The streams in flight on the killed engine ended with engine_died (error event, then [DONE]), at once: the
    # witness surely (it waited on the stopped core), the traffic's as many as had reached it.
    assert witnessed.reason in ("stream error engine_died", "503 engine_died"), summary
    assert all(result.spec.model == active for result in died), summary
    assert ended_s < NOTICE_BOUND_S, summary
    if profile == "stop":
        # Manual mode: the active model has no engine until its restart serves.
        assert ready_status == 503 and ready_s < NOTICE_BOUND_S, summary
    # The other model: under keep it answered everything, and stayed resident with the same engine; under stop
    # it was never loaded, and stays so (its requests were refused as manual mode refuses them).
    answers = [result for result in report.results if result.spec.model == other]
    if profile == "auto":
        assert all(result.outcome == "completed" for result in answers), summary
        assert _slot(after, other)["pids"] == _slot(before, other)["pids"], (before, after)
    else:
        # Manual mode's documented refusals: not active, none active (the moment between the death and the
        # restart), or a switch (the restart) holds the device.
        refusals = {"409 model_not_active", "503 no_active_model", "503 model_switching"}
        assert {result.reason for result in answers} <= refusals, summary
        assert _slot(after, other)["state"] == _slot(before, other)["state"]
    # The model came back by itself, as a restart, and the death and the restart were counted.
    assert after["active_model"] == active or profile == "auto", after
    assert _slot(after, active)["state"] in ("active", "resident"), after
    assert any(attempt["trigger"] in ("restart", "auto") for attempt in after["recent_switches"]), after
    deaths = [line for line in metrics.splitlines() if line.startswith("turnout_engine_deaths_total{")]
    assert [line for line in deaths if f'model="{active}"' in line and 'cause="died"' in line], deaths
    # vLLM itself logs the EngineDeadError with a traceback (its output handler and each stream it ended): only
    # Turnout's own log lines must have none.
    own = [line for line in live.log()[log_start:].splitlines() if " turnout." in line or "Traceback" in line]
    assert not [line for line in own if "Traceback" in line and "async_llm" not in line and "serving" not in line]
