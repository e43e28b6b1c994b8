"""An SSE chunk iterator released exactly once, whichever way the stream ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["ReleasingStream"]


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
