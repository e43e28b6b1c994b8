"""The engine-id recording behind `FrontendBundle.abort`, against a fake engine (no vLLM).

The registry is seen through what production calls: `abort` (which returns the engine ids it aborted; the fake
engine's abort only records, so a stream goes on) and `collect` / `release`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from server.frontend.inflight_registry import InflightRegistry
from server.frontend.recording_client import RecordingEngineClient
from server.frontend.releasing_stream import ReleasingStream
from server.frontend.results import StreamResult


class FakeEngine:
    """Yields `steps` outputs per request and notes which output streams were closed."""

    def __init__(self, steps: int = 3) -> None:
        self.steps = steps
        self.closed: list[str] = []
        self.made: list[AsyncGenerator[str, None]] = []
        self.aborted: list[str] = []
        self.errored = False

    async def _outputs(self, request_id: str) -> AsyncGenerator[str, None]:
        try:
            for step in range(self.steps):
                await asyncio.sleep(0)
                yield f"{request_id}:{step}"
        finally:
            self.closed.append(request_id)

    def generate(self, prompt: Any, sampling_params: Any, request_id: str, **kwargs: Any) -> Any:
        self.made.append(outputs := self._outputs(request_id))
        return outputs

    def encode(self, prompt: Any, pooling_params: Any, request_id: str, **kwargs: Any) -> Any:
        return self._outputs(request_id)

    async def abort(self, request_id: str | list[str]) -> None:
        self.aborted.extend([request_id] if isinstance(request_id, str) else request_id)


async def drain(stream: Any) -> list[Any]:
    return [item async for item in stream]


async def test_ids_are_recorded_while_running_and_forgotten_when_done() -> None:
    engine = FakeEngine()
    registry = InflightRegistry(engine.abort)
    client = RecordingEngineClient(engine)
    with registry.collect("r1"):
        first = client.generate("p", None, "chatcmpl-r1")
        second = client.encode(prompt="p", pooling_params=None, request_id="embd-r1-0")
    assert await registry.abort(["r1"]) == ("chatcmpl-r1", "embd-r1-0")

    assert await drain(first) == ["chatcmpl-r1:0", "chatcmpl-r1:1", "chatcmpl-r1:2"]
    assert await registry.abort(["r1"]) == ("embd-r1-0",)
    await drain(second)
    assert await registry.abort(["r1"]) == ()
    with pytest.raises(ValueError, match="already in flight"), registry.collect("r1"):
        pass  # the entry lives until the bundle call releases it
    registry.release("r1")
    with registry.collect("r1"):
        pass


async def test_outside_a_bundle_call_nothing_is_recorded_or_wrapped() -> None:
    engine = FakeEngine()
    registry = InflightRegistry(engine.abort)
    client = RecordingEngineClient(engine)
    outputs = client.generate("p", None, "stray")
    assert outputs is engine.made[0]  # the engine's own generator, untouched
    assert await registry.abort(["stray"]) == ()
    await drain(outputs)


async def test_concurrent_requests_do_not_see_each_others_ids() -> None:
    engine = FakeEngine(steps=5)
    registry = InflightRegistry(engine.abort)
    client = RecordingEngineClient(engine)

    async def call(request_id: str) -> tuple[str, ...]:
        with registry.collect(request_id):
            await asyncio.sleep(0)  # interleave with the other call
            outputs = client.generate("p", None, f"chatcmpl-{request_id}")
            await asyncio.sleep(0)
            seen = await registry.abort([request_id])
            await drain(outputs)
        return seen

    a, b = await asyncio.gather(call("a"), call("b"))
    assert a == ("chatcmpl-a",)
    assert b == ("chatcmpl-b",)


def test_a_request_id_cannot_be_in_flight_twice() -> None:
    registry = InflightRegistry(FakeEngine().abort)
    with (
        registry.collect("dup"),
        pytest.raises(ValueError, match="already in flight"),
        registry.collect("dup"),
    ):
        pass
    registry.release("dup")
    with registry.collect("dup"):
        pass


async def test_closing_the_recorded_stream_early_closes_vllms_stream() -> None:
    engine = FakeEngine(steps=100)
    registry = InflightRegistry(engine.abort)
    client = RecordingEngineClient(engine)
    with registry.collect("r"):
        outputs = client.generate("p", None, "chatcmpl-r")
    assert await outputs.__anext__() == "chatcmpl-r:0"
    await outputs.aclose()
    # AsyncLLM aborts the engine request exactly when its generator is closed; the wrapper must pass that on.
    assert engine.closed == ["chatcmpl-r"]
    assert await registry.abort(["r"]) == ()


async def test_abort_stops_what_runs_now() -> None:
    engine = FakeEngine(steps=100)
    registry = InflightRegistry(engine.abort)
    client = RecordingEngineClient(engine)
    with registry.collect("a"):
        outputs = client.generate("p", None, "cmpl-a-0")
        other = client.generate("p", None, "cmpl-a-1")
    with registry.collect("b"):
        bystander = client.generate("p", None, "chatcmpl-b")
    assert await registry.abort(["a", "unknown"]) == ("cmpl-a-0", "cmpl-a-1")
    assert engine.aborted == ["cmpl-a-0", "cmpl-a-1"]
    for stream in (outputs, other, bystander):
        await stream.aclose()


async def test_a_stream_aborted_before_it_reaches_the_engine_aborts_once_there() -> None:
    engine = FakeEngine(steps=3)
    registry = InflightRegistry(engine.abort)
    client = RecordingEngineClient(engine)
    with registry.collect("late"):
        outputs = client.generate("p", None, "chatcmpl-late")  # vLLM submits on the first read, not here
    await registry.abort(["late"])
    assert engine.aborted == ["chatcmpl-late"]  # what vLLM would ignore: it has no such request yet
    await outputs.__anext__()  # now the engine has it
    assert engine.aborted == ["chatcmpl-late", "chatcmpl-late"]
    await drain(outputs)
    assert engine.aborted == ["chatcmpl-late", "chatcmpl-late"]  # no more after that


def test_other_attributes_are_the_real_engines_read_live() -> None:
    engine = FakeEngine()
    client = RecordingEngineClient(engine)
    assert client.errored is False
    engine.errored = True
    assert client.errored is True
    with pytest.raises(AttributeError):
        _ = client.no_such_attribute


async def chunks(*items: str) -> AsyncGenerator[str, None]:
    for item in items:
        yield item


class Calls:
    def __init__(self) -> None:
        self.abandoned = 0
        self.released = 0

    async def abandon(self) -> None:
        self.abandoned += 1

    def release(self) -> None:
        self.released += 1


async def test_a_stream_read_to_the_end_is_released_once_and_not_abandoned() -> None:
    calls = Calls()
    stream = ReleasingStream(chunks("a", "b"), abandon=calls.abandon, release=calls.release)
    assert await drain(stream) == ["a", "b"]
    await stream.aclose()
    assert (calls.abandoned, calls.released) == (0, 1)


async def test_a_stream_dropped_before_its_first_chunk_is_abandoned_and_released() -> None:
    calls = Calls()
    result = StreamResult(ReleasingStream(chunks("a"), abandon=calls.abandon, release=calls.release))
    await result.aclose()
    await result.aclose()
    assert (calls.abandoned, calls.released) == (1, 1)


async def test_a_failing_stream_is_released() -> None:
    async def broken() -> AsyncGenerator[str, None]:
        yield "a"
        raise RuntimeError("boom")

    calls = Calls()
    stream = ReleasingStream(broken(), abandon=calls.abandon, release=calls.release)
    with pytest.raises(RuntimeError, match="boom"):
        await drain(stream)
    assert calls.released == 1


async def test_stream_result_closes_any_async_generator() -> None:
    closed: list[bool] = []

    async def gen() -> AsyncGenerator[str, None]:
        try:
            yield "a"
            yield "b"
        finally:
            closed.append(True)

    result = StreamResult(gen())
    assert await result.chunks.__anext__() == "a"
    await result.aclose()
    assert closed == [True]
