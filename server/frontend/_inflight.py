"""Which engine requests each of our requests has running, so that they can be aborted.

vLLM's serving classes derive the engine request ids themselves (`chatcmpl-{id}`, `cmpl-{id}-{i}` per prompt,
`embd-{id}-{i}` per input, extra ids for chunked inputs and beam search), so instead of re-deriving them we
record what they actually pass to the engine: the serving classes get a `RecordingEngineClient`, and a bundle
call runs inside `InflightRegistry.collect(request_id)`. The recording is a context variable, so concurrent
requests on the same event loop never see each other's entries.

An engine request id is known before the engine has the request: vLLM's `generate()` is an async generator
that only submits when first iterated (for a stream, when the client reads its first chunk), and `abort()` of
an id the engine does not have yet does nothing. So aborting marks the request as doomed as well, and each
recorded stream aborts its engine request itself as soon as the engine has it.

Nothing here imports vLLM.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["InflightRegistry", "RecordingEngineClient", "ReleasingStream"]

_T = TypeVar("_T")
_Abort = Callable[[list[str]], Awaitable[None]]


@dataclass
class _Entry:
    """One of our requests: its live engine request ids, and whether it was aborted."""

    engine_ids: set[str] = field(default_factory=set)
    doomed: bool = False


# The entry of the bundle call running in this context, or None outside bundle calls.
_collecting: ContextVar[_Entry | None] = ContextVar("turnout_inflight_entry", default=None)


class InflightRegistry:
    """Maps our request ids to the engine request ids they currently have running.

    Invariants: an entry exists from the start of a bundle call until its response is complete (non-streaming)
    or its stream is exhausted or closed; an engine id is in the entry from the moment vLLM creates the engine
    request's output stream until that stream finishes; a doomed entry stays doomed.
    """

    def __init__(self, abort: _Abort) -> None:
        self._abort = abort
        self._by_request: dict[str, _Entry] = {}

    @contextmanager
    def collect(self, request_id: str) -> Iterator[None]:
        """Record, under `request_id`, the engine requests started in this context."""
        if request_id in self._by_request:
            # vLLM's abort() by external id would hit both requests, so a reused id is a bug upstream.
            raise ValueError(f"request id {request_id!r} is already in flight in this bundle")
        entry = self._by_request[request_id] = _Entry()
        token = _collecting.set(entry)
        try:
            yield
        finally:
            _collecting.reset(token)

    def release(self, request_id: str) -> None:
        """Forget `request_id` (idempotent)."""
        self._by_request.pop(request_id, None)

    def engine_ids(self, request_id: str) -> tuple[str, ...]:
        """The engine request ids `request_id` has running now (empty when none or unknown)."""
        entry = self._by_request.get(request_id)
        return tuple(sorted(entry.engine_ids)) if entry is not None else ()

    def all_engine_ids(self) -> tuple[str, ...]:
        """Every engine request id running for this registry's requests."""
        return tuple(sorted(set().union(*(entry.engine_ids for entry in self._by_request.values()))))

    def request_ids(self) -> tuple[str, ...]:
        """Our request ids currently in flight."""
        return tuple(self._by_request)

    async def abort(self, request_ids: Iterable[str]) -> tuple[str, ...]:
        """Abort these requests' engine work: what runs now, and what they submit later.

        Returns:
            The engine request ids aborted now (those submitted later abort themselves).
        """
        entries = [entry for request_id in request_ids if (entry := self._by_request.get(request_id))]
        for entry in entries:
            entry.doomed = True
        engine_ids = sorted(set().union(*(entry.engine_ids for entry in entries)))
        if engine_ids:
            await self._abort(engine_ids)
        return tuple(engine_ids)


class RecordingEngineClient:
    """Stands in for vLLM's `EngineClient` in front of the serving classes and records the engine request ids.

    Only `generate` and `encode` are intercepted; every other attribute is the real engine's, read on each
    access so that properties such as `errored` stay live.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, prompt: Any, sampling_params: Any, request_id: str, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """`EngineClient.generate`, recorded."""
        return self._recorded(self._engine.generate(prompt, sampling_params, request_id, **kwargs), request_id)

    def encode(self, prompt: Any, pooling_params: Any, request_id: str, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """`EngineClient.encode`, recorded."""
        return self._recorded(self._engine.encode(prompt, pooling_params, request_id, **kwargs), request_id)

    def _recorded(self, outputs: AsyncGenerator[_T, None], engine_id: str) -> AsyncGenerator[_T, None]:
        entry = _collecting.get()
        if entry is None:
            # Outside a bundle call (beam search steps submitted lazily inside a stream): nothing to record.
            return outputs
        entry.engine_ids.add(engine_id)
        return self._tracked(outputs, entry, engine_id)

    async def _tracked(
        self, outputs: AsyncGenerator[_T, None], entry: _Entry, engine_id: str
    ) -> AsyncGenerator[_T, None]:
        aborted = False
        try:
            async for output in outputs:
                if entry.doomed and not aborted:
                    # Doomed before the engine had this request, or while it had: the engine has it now, so
                    # this abort lands (vLLM ignores a second one). The next output is the final "abort" one.
                    aborted = True
                    await self._engine.abort(engine_id)
                yield output
        finally:
            entry.engine_ids.discard(engine_id)
            # Closing vLLM's generator early is what makes AsyncLLM abort the engine request; keep that.
            await outputs.aclose()


class ReleasingStream(AsyncIterator[str]):
    """An SSE chunk iterator that is released exactly once: when it ends, fails, or is closed.

    Closing it before the end first runs `abandon` (the bundle aborts the request's engine ids there): closing
    vLLM's stream generator alone leaves the engine request to be aborted whenever the garbage collector gets
    to the generator underneath. It is a class rather than an async generator because an async generator that
    never started skips its `finally` on `aclose()`, and a stream dropped before its first chunk must still be
    released.
    """

    def __init__(
        self,
        chunks: AsyncIterator[str],
        *,
        abandon: Callable[[], Awaitable[None]],
        release: Callable[[], None],
    ) -> None:
        self._chunks = chunks
        self._abandon = abandon
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> ReleasingStream:
        return self

    async def __anext__(self) -> str:
        try:
            return await self._chunks.__anext__()
        except BaseException:
            # The end, an error, or cancellation (which vLLM's AsyncLLM turns into an abort of its own): the
            # stream underneath is finished in every case.
            self._done()
            raise

    async def aclose(self) -> None:
        """Abort what is still running, close the stream underneath, and release it (idempotent)."""
        if self._release is None:
            return
        close = getattr(self._chunks, "aclose", None)
        try:
            await self._abandon()
            if close is not None:
                await close()
        finally:
            self._done()

    def _done(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release()
