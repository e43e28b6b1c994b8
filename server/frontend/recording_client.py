"""The engine client the serving classes get: it records the engine request ids they start, and aborts doomed ones.

Nothing here imports vLLM.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, TypeVar

from server.frontend.inflight_registry import InflightEntry, collecting_entry

__all__ = ["RecordingEngineClient"]

_T = TypeVar("_T")


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
        entry = collecting_entry()
        if entry is None:
            # Outside a bundle call (beam search steps submitted lazily inside a stream): nothing to record.
            return outputs
        entry.engine_ids.add(engine_id)
        return self._tracked(outputs, entry, engine_id)

    async def _tracked(
        self, outputs: AsyncGenerator[_T, None], entry: InflightEntry, engine_id: str
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
