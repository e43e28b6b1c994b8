"""What a bundle hands back to the API layer: a JSON body with its status, or an SSE stream.

Both are plain values so that the API layer (and its fakes) never see a vLLM type.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = ["BundleRequestError", "BundleResult", "JsonResult", "StreamResult"]


@dataclass(frozen=True, slots=True)
class JsonResult:
    """A complete JSON response.

    Attributes:
        status_code: The HTTP status; for errors it equals `payload["error"]["code"]`.
        payload: The JSON-ready body (only dicts, lists, strings, numbers, booleans and None).
    """

    status_code: int
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StreamResult:
    """A server-sent-event stream, exactly as vLLM writes it.

    Each chunk is a whole event, `"data: {...}\\n\\n"`; the last one is `"data: [DONE]\\n\\n"`. Errors that
    happen after the stream started arrive as a `data: {"error": ...}` event followed by `[DONE]`. A stream
    whose engine request was aborted ends normally, its last choice chunk carrying `"finish_reason": "abort"`.

    Iterate `chunks` to the end, or call `aclose()` when abandoning it early: closing is what aborts the
    engine request if the client went away, and what forgets the request's engine ids in its bundle.

    Attributes:
        chunks: The SSE events.
    """

    chunks: AsyncIterator[str]

    async def aclose(self) -> None:
        """Stop the stream early (idempotent); the engine request, if still running, is aborted."""
        # Async generators (fakes, vLLM's own) and the bundle's stream wrapper all have aclose().
        close = getattr(self.chunks, "aclose", None)
        if close is not None:
            await close()


BundleResult: TypeAlias = JsonResult | StreamResult


class BundleRequestError(ValueError):
    """A request rejected by a bundle method that returns a plain value rather than a result.

    Attributes:
        result: The OpenAI error response the request would have got.
    """

    def __init__(self, result: JsonResult) -> None:
        super().__init__(result.payload.get("error", {}).get("message", "request rejected"))
        self.result = result
