"""Every error leaves the server in its API's JSON shape, with a fitting status and never a traceback.

OpenAI's ``{"error": {"message", "type", "param", "code"}}`` everywhere but the Anthropic Messages routes, which
answer Anthropic's ``{"type": "error", "error": {"type", "message"}}`` (``ANTHROPIC_EXCEPTION_HANDLERS``). 503s
carry ``Retry-After``; 401s carry ``WWW-Authenticate``. Unexpected exceptions are logged server-side and answered
with a generic 500. A stream that a switch (or a failure) ends gets its API's error event: see `ApiShape`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.types import ExceptionHandlersMap

from server.api.edge import RequestOutOfBounds, request_scope, shown_to
from server.engine import EngineError
from server.frontend import error_body, unsupported_route_body

__all__ = [
    "ANTHROPIC_API",
    "ANTHROPIC_EXCEPTION_HANDLERS",
    "EXCEPTION_HANDLERS",
    "OPENAI_API",
    "RESPONSES_API",
    "ApiShape",
    "ClientLeft",
    "RouteUnsupported",
    "anthropic_error_body",
    "anthropic_error_payload",
    "engine_error_body",
    "error_response",
    "retry_after_header",
    "sse_error_event",
]

logger = logging.getLogger("turnout.api")

#: Seconds a 503 asks the client to wait when its cause does not say.
DEFAULT_RETRY_AFTER_S: Final = 5


def error_response(
    status: int,
    message: str,
    *,
    code: str | int | None = None,
    param: str | None = None,
    retry_after: int | None = None,
    headers: dict[str, str] | None = None,
) -> Response[dict[str, Any]]:
    """An OpenAI-shaped error response; 503s always get ``Retry-After``, and 429s too when the cause says when."""
    all_headers = dict(headers or {})
    wait = retry_after_header(status, retry_after)
    if wait is not None:
        all_headers["Retry-After"] = wait
    return Response(
        error_body(status, message, code=code, param=param),
        status_code=status,
        headers=all_headers,
        media_type=MediaType.JSON,
    )


def retry_after_header(status: int, retry_after: int | None) -> str | None:
    """An error's ``Retry-After``: every 503 has one (:data:`DEFAULT_RETRY_AFTER_S` when its cause does not say
    when), a 429 when its cause says; other statuses none."""
    if status == 503:
        return str(retry_after if retry_after is not None else DEFAULT_RETRY_AFTER_S)
    if status == 429 and retry_after is not None:
        return str(retry_after)
    return None


def engine_error_body(error: EngineError) -> dict[str, Any]:
    """A Turnout error's OpenAI body, with its details (the model, the wait, the restart plan, ...)."""
    payload = error_body(error.status_code, error.message, code=error.code)
    payload["error"].update(error.details())
    return payload


def sse_error_event(error: EngineError) -> str:
    """The SSE event that ends a stream with a typed error (as vLLM ends streams that fail mid-way)."""
    return f"data: {msgspec.json.encode(engine_error_body(error)).decode()}\n\n"


def _responses_error_event(error: EngineError) -> str:
    # OpenAI's Responses streams end in a typed `error` event (ResponseErrorEvent), not a `data:` error body.
    payload = {"type": "error", "code": error.code, "message": error.message, "param": None, "sequence_number": -1}
    return f"event: error\ndata: {msgspec.json.encode(payload).decode()}\n\n"


def _anthropic_error_event(error: EngineError) -> str:
    payload = anthropic_error_body(error.status_code, error.message)
    return f"event: error\ndata: {msgspec.json.encode(payload).decode()}\n\n"


@dataclass(frozen=True, slots=True)
class ApiShape:
    """What differs between the APIs a route may speak: how a stream that cannot finish ends, and error bodies.

    Attributes:
        error_event: The SSE event that ends a stream with an error.
        done: The end marker sent after it, if the API has one.
        translate_error: Turns an OpenAI error body (vLLM's serving classes answer those) into this API's, or
            None when it is OpenAI's.
    """

    error_event: Callable[[EngineError], str]
    done: str | None
    translate_error: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None

    def error_ending(self, error: EngineError) -> list[str]:
        """The events that end a stream with ``error``: the one builder of such an ending."""
        return [self.error_event(error), *([self.done] if self.done is not None else [])]

    def refusal_ending(self, status: int, payload: dict[str, Any]) -> list[str]:
        """The events that end a stream with vLLM's error body ``payload`` (an OpenAI error, in this API's shape)."""
        body = self.translate_error(status, payload) if self.translate_error is not None else payload
        return [f"data: {msgspec.json.encode(body).decode()}\n\n", *([self.done] if self.done is not None else [])]


#: nginx's status for a request whose client closed the connection first (logged, never read).
CLIENT_CLOSED_REQUEST: Final = 499

#: Chat, completions and every other OpenAI stream of vLLM's: a `data:` error body, then `[DONE]`.
OPENAI_API: Final = ApiShape(sse_error_event, "data: [DONE]\n\n")
#: The Responses API: an `error` event, and no `[DONE]` (vLLM's Responses streams have none).
RESPONSES_API: Final = ApiShape(_responses_error_event, None)
#: Anthropic's Messages API: an `error` event (the SDK raises it as an APIStatusError).
ANTHROPIC_API: Final = ApiShape(
    _anthropic_error_event, None, lambda status, body: anthropic_error_payload(status, body)
)

#: Anthropic's error type for each status (https://docs.anthropic.com/en/api/errors).
_ANTHROPIC_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error object for an HTTP ``status``."""
    kind = _ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_error_payload(status: int, openai_payload: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI error body (as vLLM's serving classes give it) in Anthropic's shape, as vLLM's router does."""
    error = openai_payload.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return anthropic_error_body(status, str(message or "request failed"))


def _engine_error(request: Request[Any, Any, Any], exc: EngineError) -> Response[dict[str, Any]]:
    scope = request_scope(request)
    if scope is not None:  # a key limited to some models is told no other model's name (app.state: the manager)
        manager = request.app.state.get("manager")  # none on the Ray ingress, whose errors are made for the key
        exc = shown_to(exc, scope, manager.models if manager is not None else {})
    response = error_response(exc.status_code, exc.message, code=exc.code, retry_after=exc.retry_after)
    response.content["error"].update(exc.details())
    return response


def _validation_error(_: Request[Any, Any, Any], exc: ValidationException) -> Response[dict[str, Any]]:
    details = exc.extra if isinstance(exc.extra, list) else []
    where = "; ".join(f"{d.get('key') or 'body'}: {d.get('message')}" for d in details if isinstance(d, dict))
    return error_response(400, f"{exc.detail}{': ' + where if where else ''}", code="invalid_request")


def _out_of_bounds(_: Request[Any, Any, Any], exc: RequestOutOfBounds) -> Response[dict[str, Any]]:
    return error_response(400, str(exc.detail), code=exc.code, param=exc.param)


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    status = exc.status_code
    headers = dict(exc.headers or {})
    if status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")
    return error_response(status, str(exc.detail), headers=headers)


class ClientLeft(Exception):
    """The client disconnected before its answer; its work was cancelled (``streaming/disconnects.py``). Answered
    with nginx's 499 and no body (here), which nobody reads."""


class RouteUnsupported(NotFoundException):
    """A route the model's tasks lack, found before admission: the 404 its bundle would give (``vllm serve``
    would not register the route).

    Args:
        model: The model's own name.
        api: The route's API (``Transcriptions``).
    """

    def __init__(self, model: str, api: str) -> None:
        super().__init__(f"The model '{model}' does not support the {api} API.")
        self.model, self.api = model, api


def _route_unsupported(_: Request[Any, Any, Any], exc: RouteUnsupported) -> Response[dict[str, Any]]:
    return Response(unsupported_route_body(exc.model, exc.api), status_code=404, media_type=MediaType.JSON)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "Internal server error; see the server log.", code="internal_error")


def _client_left(_: Request[Any, Any, Any], exc: ClientLeft) -> Response[bytes]:
    return Response(b"", status_code=CLIENT_CLOSED_REQUEST)


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    ClientLeft: _client_left,
    EngineError: _engine_error,
    RequestOutOfBounds: _out_of_bounds,
    ValidationException: _validation_error,
    RouteUnsupported: _route_unsupported,
    HTTPException: _http_error,
    Exception: _unexpected,
}


def _in_anthropic_shape(handler: Callable[..., Response[dict[str, Any]]]) -> Callable[..., Response[Any]]:
    def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
        response = handler(request, exc)
        response.content = anthropic_error_payload(response.status_code or 500, response.content)
        return response

    return handle


#: The Anthropic routes' handlers: the same statuses and headers as ``EXCEPTION_HANDLERS``, Anthropic's body.
ANTHROPIC_EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    kind: handler if kind is ClientLeft else _in_anthropic_shape(handler)
    for kind, handler in EXCEPTION_HANDLERS.items()
}
