"""A streaming request that waits for its model gets SSE comments until it is admitted (fake engines, slow loads).

Also vLLM's ``--sse-keep-alive-interval``: a ``: keep-alive`` comment whenever a stream is idle that long.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import httpx
import pytest

from server.api.admission.request_admission import AdmissionTarget
from server.api.streaming import waiting
from server.engine.strategies import StopStrategy
from tests.api.conftest import MakeClient, admin
from tests.fakes.engines import FakeLoader
from tests.waiting import until

CHAT = {"model": "plain", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def _read_stream(client: httpx.AsyncClient, body: dict[str, object]) -> tuple[int, list[tuple[float, str]]]:
    """The status and each SSE block with the time it arrived (from the request's start)."""
    start = time.monotonic()
    blocks: list[tuple[float, str]] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        buffer = ""
        async for text in response.aiter_text():
            buffer += text
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                blocks.append((time.monotonic() - start, block))
        return response.status_code, blocks


async def _switch_then_stream(
    client: httpx.AsyncClient, manager: Any, body: dict[str, object]
) -> tuple[int, list[str]]:
    switch = asyncio.create_task(client.post("/v1/models/switch", json={"model": "plain"}, headers=admin()))
    await until(lambda: manager.switching_to == "plain")  # the switch is under way: plain's engine is loading
    status, blocks = await _read_stream(client, body)
    assert (await switch).status_code == 200
    return status, [block for _, block in blocks]


async def test_a_stream_waiting_behind_a_stop_switch_gets_comments_then_its_chunks(make_client: MakeClient) -> None:
    # A 4 s load: on a loaded machine the stream may begin a second or more into it, and still waits for three
    # notices 0.3 s apart (at 1.5 s, one CI run saw a single notice).
    loader = FakeLoader(delay_s=4.0)
    client, manager = await make_client(strategy=StopStrategy, loader=loader, wait_notice_interval_s=0.3)

    status, blocks = await _switch_then_stream(client, manager, CHAT)

    assert status == 200
    comments = [block for block in blocks if block.startswith(":")]
    data = [block for block in blocks if not block.startswith(":")]
    assert len(comments) >= 3 and set(comments) == {": waiting for 'plain' to load"}, blocks
    # Every comment comes before the first data chunk, and the data is what an unhurried stream sends.
    assert blocks[: len(comments)] == comments
    assert data[0].startswith("data: ") and '"model":"plain"' in data[0] and data[-1] == "data: [DONE]"
    status, unhurried = await _read_stream(client, CHAT)
    assert status == 200 and [block for _, block in unhurried] == data


async def test_a_stream_admitted_at_once_has_no_comment_and_errors_keep_their_status(make_client: MakeClient) -> None:
    client, _ = await make_client(wait_notice_interval_s=0.05)
    status, blocks = await _read_stream(client, {**CHAT, "model": "tools"})
    assert status == 200 and not any(block.startswith(":") for _, block in blocks)
    # Manual mode, plain not active: refused at once, as an HTTP status (not a stream with an error event).
    refused = await client.post("/v1/chat/completions", json=CHAT)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_not_active"


async def test_a_waiting_stream_whose_load_fails_ends_with_an_error_event(make_client: MakeClient) -> None:
    loader = FakeLoader(delay_s=1.0, fail_load={"plain"})
    client, manager = await make_client(strategy=StopStrategy, loader=loader, wait_notice_interval_s=0.3)
    switch = asyncio.create_task(client.post("/v1/models/switch", json={"model": "plain"}, headers=admin()))
    await until(lambda: manager.switching_to == "plain")
    status, blocks = await _read_stream(client, CHAT)
    await switch
    texts = [block for _, block in blocks]
    assert status == 200 and texts[0] == ": waiting for 'plain' to load"
    assert texts[-2].startswith('data: {"error"') and texts[-1] == "data: [DONE]", texts


async def test_keep_alive_comments_fill_idle_gaps_of_a_stream(make_client: MakeClient) -> None:
    client, _ = await make_client(sse_keep_alive_interval_s=0.1)
    status, blocks = await _read_stream(client, {**CHAT, "model": "tools", "max_tokens": 3, "step_s": 0.35})
    texts = [block for _, block in blocks]
    assert status == 200 and texts.count(": keep-alive") >= 4, texts
    assert [t for t in texts if not t.startswith(":")][-1] == "data: [DONE]"
    # Without the flag a slow stream has no comments.
    quiet, _ = await make_client()
    _, plain_blocks = await _read_stream(quiet, {**CHAT, "model": "tools", "max_tokens": 2, "step_s": 0.2})
    assert not any(block.startswith(":") for _, block in plain_blocks)


async def test_a_lease_whose_stream_body_never_starts_goes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # The client left after the headers, before Litestar started the body: nothing ever reads the body, so the
    # admission itself must give the lease back, or every later drain would wait for it.
    monkeypatch.setattr(waiting, "UNCLAIMED_LEASE_S", 0.05)
    released: list[object] = []

    class Manager:
        def release(self, lease: object) -> None:
            released.append(lease)

    acquiring: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    target = AdmissionTarget(manager=cast(Any, Manager()), body={}, requested="plain", name="plain")
    unread = waiting.WaitingRequest(target=target, acquiring=acquiring, shown_name="plain", interval_s=1.0)
    read = waiting.WaitingRequest(
        target=target, acquiring=asyncio.get_running_loop().create_future(), shown_name="plain", interval_s=1.0
    )
    body = read.events(cast(Any, None), cast(Any, None))
    assert await anext(body) == ": waiting for 'plain' to load\n\n"  # this body started: it owns its lease
    acquiring.set_result(lease := object())
    read.acquiring.set_result(object())
    await asyncio.sleep(0.2)
    assert released == [lease]
    assert [chunk async for chunk in unread.events(cast(Any, None), cast(Any, None))] == []  # too late: nothing
    await body.aclose()
