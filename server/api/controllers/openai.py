"""The OpenAI routes: each admits the request, then hands it to the bundle of the model it was admitted to."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Controller, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

from server.api.admission import AdmittedRequest, ServingBundle, provide_admitted
from server.api.openapi import request_body
from server.api.responses import respond
from server.engine import EngineManager

__all__ = ["OpenAIController", "TokenizeController"]

_ADMITTED = {"admitted": Provide(provide_admitted)}
# The JSON body is read by the admission dependency; request_body() documents it in the OpenAPI schema.
_BODY_DOC = "An OpenAI request object; see https://platform.openai.com/docs/api-reference"

#: What a route asks of the bundle its request was admitted to.
BundleCall = Callable[[AdmittedRequest], Awaitable[Any]]


def _bundle_route(path: str, component: str, name: str, call: BundleCall, summary: str) -> HTTPRouteHandler:
    """A POST route (a controller method named ``name``) that admits the request and answers with ``call``.

    Args:
        path: The route's path below the controller's.
        component: The OpenAPI component of the request body (see :func:`request_body`).
        name: The handler's name (Litestar derives the OpenAPI operation id from it).
        call: The bundle call for the admitted request.
        summary: The handler's docstring (the operation's summary in the OpenAPI document).
    """

    async def handler(self: Controller, admitted: NamedDependency[AdmittedRequest]) -> Response[Any] | Stream:
        return respond(admitted, await call(admitted))

    handler.__name__ = handler.__qualname__ = name
    handler.__doc__ = summary
    decorate = post(
        path, operation_class=request_body(component), dependencies=_ADMITTED, status_code=200, description=_BODY_DOC
    )
    return decorate(handler)


class OpenAIController(Controller):
    """``/v1``: chat, completions, embeddings and the model list."""

    path = "/v1"
    tags = ["OpenAI"]

    chat_completions = _bundle_route(
        "/chat/completions",
        "ChatCompletionRequest",
        "chat_completions",
        lambda admitted: admitted.bundle.chat(admitted.body, admitted.lease.request_id),
        "Create a chat completion (``stream: true`` for SSE) with the active model's frontend.",
    )
    completions = _bundle_route(
        "/completions",
        "CompletionRequest",
        "completions",
        lambda admitted: admitted.bundle.completion(admitted.body, admitted.lease.request_id),
        "Create a text completion (``stream: true`` for SSE).",
    )
    embeddings = _bundle_route(
        "/embeddings",
        "EmbeddingRequest",
        "embeddings",
        lambda admitted: admitted.bundle.embeddings(admitted.body, admitted.lease.request_id),
        "Create embeddings (pooling models only).",
    )

    @get("/models")
    async def list_models(self, manager: NamedDependency[EngineManager[ServingBundle]]) -> dict[str, Any]:
        """Every configured model in OpenAI's shape, with its ``status`` and whether it is ``active``."""
        active = manager.active_model
        snapshot = {slot.name: slot for slot in manager.snapshot().slots}
        created = int(time.time())
        cards: list[dict[str, Any]] = []
        for name, profile in manager.models.items():
            slot = snapshot[name]
            max_len = slot.max_model_len or profile.engine_args.get("max_model_len")
            cards.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "turnout",
                    "root": profile.model,
                    "parent": None,
                    "max_model_len": max_len,
                    "permission": [],
                    "status": slot.state,
                    "active": name == active,
                }
            )
        return {"object": "list", "data": cards}


class TokenizeController(Controller):
    """``/tokenize`` and ``/detokenize``, with the active model's tokenizer and chat template."""

    path = "/"
    tags = ["Tokenization"]

    tokenize = _bundle_route(
        "/tokenize",
        "TokenizeRequest",
        "tokenize",
        lambda admitted: admitted.bundle.tokenize(admitted.body),
        "Tokenize a prompt or a chat (rendered with the model's chat template).",
    )
    detokenize = _bundle_route(
        "/detokenize",
        "DetokenizeRequest",
        "detokenize",
        lambda admitted: admitted.bundle.detokenize(admitted.body),
        "Turn token ids back into text.",
    )
