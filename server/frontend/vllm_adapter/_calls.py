"""How a call into one of vLLM's serving objects becomes a `JsonResult` or `StreamResult`.

Shared by `_frontend` (the serving objects `vllm serve` builds for every model) and `_operations` (the rest of
vLLM's routes): body validation into vLLM's request models, the mapping of what a serving call returns or
raises, and the OpenAI error results.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Container, Mapping
from typing import Any

import pydantic
from vllm.exceptions import VLLMValidationError
from vllm.v1.engine.exceptions import EngineDeadError

from server.frontend.openai_errors import error_body, unsupported_route_body
from server.frontend.results import BundleResult, JsonResult, StreamResult
from server.frontend.vllm_adapter._moved import moved

__all__ = [
    "Dump",
    "bad_request",
    "call_serving",
    "error_result",
    "exception_result",
    "parse_request",
    "unsupported",
]

_log = logging.getLogger("server.frontend.vllm_adapter")

create_error_response: Callable[[BaseException], Any] = moved("create_error_response")
ErrorResponse: type[pydantic.BaseModel] = moved("ErrorResponse")
clean_loc_for_param: Callable[[tuple[Any, ...]], str] = moved("clean_loc_for_param")

# Reported per validation error; vLLM's own handler caps them too, since pydantic echoes input in every error.
_MAX_REPORTED_ERRORS = 5

#: How a pydantic response model becomes JSON bytes (routes differ: Responses dumps by alias, Messages drops nulls).
Dump = Callable[[pydantic.BaseModel], bytes]


def _dump_json(response: pydantic.BaseModel) -> bytes:
    # Serialized by pydantic-core straight to bytes: no dict dump, no second encoder.
    return response.model_dump_json().encode()


def parse_request(
    validate: Callable[[Any], Any],
    body: Any,
    *,
    model_name: str,
    request_id: str | None = None,
    adapters: Container[str] = (),
) -> Any:
    """Validate `body` into a vLLM request model, or return the 400 `JsonResult` for it.

    The model name is overwritten with `model_name`: routing is the API layer's job, and vLLM would answer an
    alias with a 404. A name in `adapters` (the model's loaded LoRA adapters) stays: vLLM's serving classes
    turn it into the request's `LoRARequest`. `request_id` becomes the base of the engine request ids.
    """
    if not isinstance(body, Mapping):
        return bad_request("The request body must be a JSON object.")
    asked = body.get("model")
    data = {**body, "model": asked if isinstance(asked, str) and asked in adapters else model_name}
    if request_id is not None:
        data["request_id"] = request_id
    try:
        return validate(data)
    except pydantic.ValidationError as exc:
        return _invalid_body(exc)
    except Exception as exc:
        # pydantic lets anything but ValueError/AssertionError out of a validator unwrapped: vLLM's
        # VLLMValidationError, and also the crash of a vLLM validator on a field of a type it did not expect
        # (`"structured_outputs": ""` raises AttributeError). Both are the body's fault: 400, never 500.
        error = create_error_response(exc)
        if error.error.code < 500:
            return error_result(error)
        _log.info("vLLM's request validation failed on a client body: %r", exc)
        return bad_request(f"The request body is invalid: {type(exc).__name__}: {exc}")


async def call_serving(pending: Awaitable[Any], *, dump: Dump | None = None) -> BundleResult:
    """Await a serving call and turn what it returns (or raises) into a result.

    A generator comes back as a `StreamResult` of what it yields (the caller makes SSE strings of objects).
    """
    try:
        response = await pending
    except Exception as exc:
        # vLLM reports many request errors by raising; its FastAPI exception handlers map them, so do we.
        return exception_result(exc)
    if (task := asyncio.current_task()) is not None and task.cancelling():
        # vLLM's non-streaming chat and completion swallow CancelledError and answer 400 "Client disconnected"
        # (the engine request is aborted all the same). Restore the cancellation for our caller's timeouts.
        raise asyncio.CancelledError
    if isinstance(response, ErrorResponse):
        return error_result(response)
    if isinstance(response, AsyncGenerator):
        return StreamResult(response)
    if isinstance(response, pydantic.BaseModel):
        return JsonResult(200, body=(dump or _dump_json)(response))
    # The pooling classes answer with a Starlette JSONResponse: take its rendered body.
    return JsonResult(int(response.status_code), json.loads(bytes(response.body)))


def error_result(error: Any) -> JsonResult:
    """vLLM's error response (an `ErrorResponse`) as an OpenAI error result."""
    return JsonResult(int(error.error.code), error.model_dump(mode="json"))


def exception_result(exc: Exception) -> JsonResult:
    """The error result vLLM's exception handlers would give `exc`; 5xx are logged with their traceback."""
    error = create_error_response(exc)
    if isinstance(exc, EngineDeadError):
        # The engine died: its watch reports the cause once, and vLLM has logged the traceback already; a
        # traceback per request it failed would bury that report.
        _log.warning("vLLM failed a request: its engine is dead (%s)", error.error.message)
    elif error.error.code >= 500 and not isinstance(exc, NotImplementedError):
        # The client gets vLLM's sanitized message; the traceback belongs in our log.
        _log.error("vLLM failed a request: %s", error.error.message, exc_info=exc)
    return error_result(error)


def bad_request(message: str, *, param: str | None = None) -> JsonResult:
    """A 400 in OpenAI's shape."""
    return JsonResult(400, error_body(400, message, param=param))


def unsupported(model_name: str, api: str) -> JsonResult:
    """The 404 for a route the model's tasks lack, naming the model."""
    return JsonResult(404, unsupported_route_body(model_name, api))


def _invalid_body(exc: pydantic.ValidationError) -> JsonResult:
    errors = exc.errors(include_url=False)
    param: str | None = None
    for error in errors:
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, VLLMValidationError):
            param = cause.parameter
            break
    if param is None and errors:
        param = clean_loc_for_param(tuple(errors[0]["loc"])) or None
    shown = [_describe(error) for error in errors[:_MAX_REPORTED_ERRORS]]
    if len(errors) > len(shown):
        shown.append(f"...and {len(errors) - len(shown)} more")
    count = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}"
    return bad_request(f"{count}: " + "; ".join(shown), param=param)


def _describe(error: Mapping[str, Any]) -> str:
    where = clean_loc_for_param(tuple(error.get("loc", ())))
    return f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid"))
