"""The OpenAI routes: each admits the request, then hands it to the bundle of the model it was admitted to."""

from __future__ import annotations

import time
from typing import Any

from litestar import Controller, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.response import Stream

from server.api.admission import AdmittedRequest, ServingBundle, provide_admitted
from server.api.openapi import request_body
from server.api.responses import respond
from server.engine import EngineManager

__all__ = ["OpenAIController", "TokenizeController"]

_ADMITTED = {"admitted": Provide(provide_admitted)}
# The JSON body is read by the admission dependency; request_body() documents it in the OpenAPI schema.
_BODY_DOC = "An OpenAI request object; see https://platform.openai.com/docs/api-reference"


class OpenAIController(Controller):
    """``/v1``: chat, completions, embeddings and the model list."""

    path = "/v1"
    tags = ["OpenAI"]

    @post(
        "/chat/completions",
        operation_class=request_body("ChatCompletionRequest"),
        dependencies=_ADMITTED,
        status_code=200,
        description=_BODY_DOC,
    )
    async def chat_completions(self, admitted: NamedDependency[AdmittedRequest]) -> Response[Any] | Stream:
        """Create a chat completion (``stream: true`` for SSE) with the active model's frontend."""
        return respond(admitted, await admitted.bundle.chat(admitted.body, admitted.lease.request_id))

    @post(
        "/completions",
        operation_class=request_body("CompletionRequest"),
        dependencies=_ADMITTED,
        status_code=200,
        description=_BODY_DOC,
    )
    async def completions(self, admitted: NamedDependency[AdmittedRequest]) -> Response[Any] | Stream:
        """Create a text completion (``stream: true`` for SSE)."""
        return respond(admitted, await admitted.bundle.completion(admitted.body, admitted.lease.request_id))

    @post(
        "/embeddings",
        operation_class=request_body("EmbeddingRequest"),
        dependencies=_ADMITTED,
        status_code=200,
        description=_BODY_DOC,
    )
    async def embeddings(self, admitted: NamedDependency[AdmittedRequest]) -> Response[Any] | Stream:
        """Create embeddings (pooling models only)."""
        return respond(admitted, await admitted.bundle.embeddings(admitted.body, admitted.lease.request_id))

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
    dependencies = _ADMITTED

    @post("/tokenize", operation_class=request_body("TokenizeRequest"), status_code=200, description=_BODY_DOC)
    async def tokenize(self, admitted: NamedDependency[AdmittedRequest]) -> Response[Any] | Stream:
        """Tokenize a prompt or a chat (rendered with the model's chat template)."""
        return respond(admitted, await admitted.bundle.tokenize(admitted.body))

    @post("/detokenize", operation_class=request_body("DetokenizeRequest"), status_code=200, description=_BODY_DOC)
    async def detokenize(self, admitted: NamedDependency[AdmittedRequest]) -> Response[Any] | Stream:
        """Turn token ids back into text."""
        return respond(admitted, await admitted.bundle.detokenize(admitted.body))
