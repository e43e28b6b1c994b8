"""Every error leaves the server in OpenAI's JSON shape, with a fitting status and never a traceback.

``{"error": {"message", "type", "param", "code"}}``. 503s carry ``Retry-After``; 401s carry
``WWW-Authenticate``. Unexpected exceptions are logged server-side and answered with a generic 500.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.types import ExceptionHandlersMap

from server.engine import EngineError
from server.frontend.openai_errors import error_body

__all__ = ["EXCEPTION_HANDLERS", "error_response", "sse_error_event"]

logger = logging.getLogger("turnout.api")


def error_response(
    status: int,
    message: str,
    *,
    code: str | int | None = None,
    param: str | None = None,
    retry_after: int | None = None,
    headers: dict[str, str] | None = None,
) -> Response[dict[str, Any]]:
    """An OpenAI-shaped error response; 503s always get ``Retry-After``."""
    all_headers = dict(headers or {})
    if status == 503:
        all_headers["Retry-After"] = str(retry_after if retry_after is not None else 5)
    return Response(
        error_body(status, message, code=code, param=param),
        status_code=status,
        headers=all_headers,
        media_type=MediaType.JSON,
    )


def sse_error_event(error: EngineError) -> str:
    """The SSE event that ends a stream with a typed error (as vLLM ends streams that fail mid-way)."""
    payload = error_body(error.status_code, error.message, code=error.code)
    return f"data: {msgspec.json.encode(payload).decode()}\n\n"


def _engine_error(_: Request[Any, Any, Any], exc: EngineError) -> Response[dict[str, Any]]:
    return error_response(exc.status_code, exc.message, code=exc.code, retry_after=exc.retry_after)


def _validation_error(_: Request[Any, Any, Any], exc: ValidationException) -> Response[dict[str, Any]]:
    details = exc.extra if isinstance(exc.extra, list) else []
    where = "; ".join(f"{d.get('key') or 'body'}: {d.get('message')}" for d in details if isinstance(d, dict))
    return error_response(400, f"{exc.detail}{': ' + where if where else ''}", code="invalid_request")


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    status = exc.status_code
    headers = dict(exc.headers or {})
    if status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")
    return error_response(status, str(exc.detail), headers=headers)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "Internal server error; see the server log.", code="internal_error")


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    EngineError: _engine_error,
    ValidationException: _validation_error,
    HTTPException: _http_error,
    Exception: _unexpected,
}
