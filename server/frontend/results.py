"""What a bundle hands back to the API layer: a JSON body with its status, or an SSE stream.

Both are plain values so that the API layer (and its fakes) never see a vLLM type.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import msgspec

__all__ = ["BundleResult", "JsonResult", "StreamResult"]


class JsonResult:
    """A complete JSON response, given as a JSON-ready dict or as the JSON bytes themselves.

    vLLM's responses are pydantic models that serialize themselves to JSON (in Rust) faster than a dump to dicts
    followed by any encoder, so the bundle hands those over as `body` bytes and the API layer sends them as they
    are; each form is derived from the other only when someone asks for it (tests, error messages). Treat it as
    immutable.

    Attributes:
        status_code: The HTTP status; for errors it equals `payload["error"]["code"]`.
    """

    __slots__ = ("_body", "_payload", "status_code")

    def __init__(self, status_code: int, payload: dict[str, Any] | None = None, *, body: bytes | None = None) -> None:
        if (payload is None) == (body is None):
            raise TypeError("JsonResult takes exactly one of payload and body")
        self.status_code = status_code
        self._payload = payload
        self._body = body

    @property
    def payload(self) -> dict[str, Any]:
        """The body as JSON-ready data (only dicts, lists, strings, numbers, booleans and None)."""
        if self._payload is None:
            assert self._body is not None
            self._payload = msgspec.json.decode(self._body)
        return self._payload

    @property
    def body(self) -> bytes:
        """The body encoded as JSON."""
        if self._body is None:
            self._body = msgspec.json.encode(self._payload)
        return self._body

    def __repr__(self) -> str:
        return f"JsonResult({self.status_code}, {self.payload!r})"


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
