"""SIGKILL of the active model's engine core under streaming load, on a live server: ``stop`` (manual mode) and
``keep`` (auto mode, both models resident).

Each run starts a stream of its own (the witness), stops the active engine core at the witness's first event,
sends the reliability suite's mixed traffic (long streams first) and kills the core once three requests wait on it. The requests on the dead engine end at once with ``engine_died`` (a
stream with its error event and ``[DONE]``, a JSON request with 503 and ``Retry-After``); ``/ready`` is 503 while
the active model has no engine (manual mode); the model serves again without anyone switching; the other model
is not disturbed; and nothing is lost or answered by the wrong model, as the suite counts. The servers are the
suite's own (one per profile, shared with the other tests of that profile), and are left serving.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.api.live_server import LiveServer
from tests.reliability.conftest import ADMIN_TOKEN, save_summary
from tests.reliability.traffic import HELLO, RequestSpec, Result, classify_stream, mixed_requests, run_traffic

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
    """Start a stream of the test's own on ``model`` (the witness) and return, once its first event is out, the task
    that reads it to its end. At that first event the reader stops the engine core (``SIGSTOP``, before it yields to
    anything else), so the witness is certainly mid-way at the kill: a warm tiny engine streamed all 960 tokens of
    a witness before a kill that waited for the traffic, twice. It starts before the traffic, while nothing waits
    for a switch (in auto mode a new request for the active model waits behind a pending switch)."""
    spec = RequestSpec(api="chat", stream=True, model=model, long=True, long_tokens=WITNESS_TOKENS)
    first_event = asyncio.Event()
    read = asyncio.create_task(_read_witness(client, spec, first_event, lambda: os.kill(pid, signal.SIGSTOP)))
    async with asyncio.timeout(120):
        await first_event.wait()
    assert not read.done(), f"the witness ended at its first event: {read.result()}"
    return read


async def _kill_when_streaming(client: httpx.AsyncClient, model: str, pid: int) -> float:
    """Wait until ``model`` has the witness and two of the traffic's requests in flight (they wait on the stopped
    engine core), then SIGKILL the engine core at once (before auto mode's scheduler could switch away:
    drain_timeout is 5 s; the watch takes a stopped core for hung only after health_check_timeout_s, 10 s);
    returns when (monotonic). The core is killed even when the wait fails, so that it is never left stopped."""
    try:
        async with asyncio.timeout(120):
            while _slot((await client.get("/admin/status", headers=ADMIN)).json(), model)["in_flight"] < 3:
                await asyncio.sleep(0.05)
    finally:
        os.kill(pid, signal.SIGKILL)
    return time.monotonic()


async def _read_witness(
    client: httpx.AsyncClient, spec: RequestSpec, first_event: asyncio.Event, at_first_event: Callable[[], None]
) -> Result:
    """Read the witness stream, calling ``at_first_event`` and setting ``first_event`` at its first data event;
    classified as the traffic's are."""
    events: list[str] = []
    ended = True
    async with client.stream("POST", spec.path, json=spec.body({}), timeout=600) as response:
        assert response.status_code == 200, await response.aread()
        try:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    if not first_event.is_set():
                        at_first_event()
                        first_event.set()
                    events.append(line[len("data: ") :])
        except httpx.HTTPError:
            ended = False
    first_event.set()  # never leave the starter waiting on a stream that ended before its first event
    result = classify_stream(spec, events, ended=ended, expected=frozenset({"engine_died"}))
    return Result(spec, result.outcome, result.reason, result.answered_by, ended_at=time.monotonic())


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
        killed_at = await _kill_when_streaming(client, active, pids[0])
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
    # witness surely (it was mid-way), the traffic's as many as were still running.
    assert witnessed.reason == "stream error engine_died", summary
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
    assert not [line for line in own if "Traceback" in line and "[async_llm.py" not in line and "[serving" not in line]
