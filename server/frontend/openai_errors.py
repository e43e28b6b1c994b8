"""OpenAI's error body, ``{"error": {"message", "type", "param", "code"}}``: the one builder of it.

The frontend answers invalid requests with it, and the API layer answers everything else with it, so a client
sees one shape whichever layer refused its request. The ``type`` names are the ones vLLM and OpenAI's clients use.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Final

__all__ = ["error_body", "unsupported_route_body"]

_TYPES: Final = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def error_body(status: int, message: str, *, code: str | int | None = None, param: str | None = None) -> dict[str, Any]:
    """The OpenAI error object for an HTTP ``status``; ``code`` defaults to the status."""
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status, HTTPStatus(status).phrase.replace(" ", "") + "Error"),
            "param": param,
            "code": code if code is not None else status,
        }
    }


def unsupported_route_body(model_name: str, api: str) -> dict[str, Any]:
    """The 404 body of a route the model's tasks lack, naming the model (``vllm serve`` would not register the
    route: the status OpenAI gives a model used on the wrong endpoint; never a 5xx, the server is fine)."""
    return error_body(404, f"The model '{model_name}' does not support the {api} API.", param="model")
