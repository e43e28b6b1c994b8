"""A stream whose engine died: vLLM's own in-band error event (a 500 "EngineCore encountered an issue") is
replaced by the manager's ``engine_died`` (503, retryable), and any other error event passes through."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from server.api.admission.request_admission import AdmittedRequest
from server.api.streaming.delivery import leased_stream
from tests.api.conftest import MakeClient
from tests.fakes.manager_views import served_engine

#: What vLLM's serving classes send when the engine died under a stream (``create_streaming_error_response``).
VLLM_ERROR = 'data: {"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", ' + (
    '"param": null, "code": 500}}\n\n'
)
FIRST = 'data: {"model": "tools", "choices": [{"delta": {"content": "Hello"}}]}\n\n'


async def _chunks() -> AsyncIterator[str]:
    for chunk in (FIRST, VLLM_ERROR, "data: [DONE]\n\n"):
        yield chunk


async def _streamed(make_client: MakeClient, *, dead: bool) -> list[str]:
    _, manager = await make_client()
    engine: Any = await served_engine(manager)
    lease = await manager.acquire("tools")
    if dead:
        engine.errored = True  # vLLM flags the engine dead before its watch reports
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    admitted = AdmittedRequest(manager=manager, lease=lease, body={})
    admitted.hand_to_stream()  # as `respond` does before it builds the stream
    events = [event async for event in leased_stream(admitted, _chunks(), close)]
    assert closed == [True] and manager.snapshot().in_flight == 0  # released either way
    return events


async def test_vllms_error_event_of_a_dead_engine_becomes_engine_died(make_client: MakeClient) -> None:
    events = await _streamed(make_client, dead=True)
    assert events[0] == FIRST and len(events) == 3
    error = json.loads(events[1].removeprefix("data: "))["error"]
    assert error["code"] == "engine_died" and "EngineCore" not in events[1]
    assert events[2].strip() == "data: [DONE]"


async def test_other_error_events_pass_through(make_client: MakeClient) -> None:
    assert await _streamed(make_client, dead=False) == [FIRST, VLLM_ERROR, "data: [DONE]\n\n"]
