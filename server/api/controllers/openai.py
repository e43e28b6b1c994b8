"""The OpenAI routes: each admits the request, then hands it to the bundle of the model it was admitted to."""

from __future__ import annotations

import time
from typing import Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency

from server.api.admission import ServingBundle
from server.api.controllers.bundle_routes import bundle_route
from server.api.key_scopes import visible
from server.engine import EngineManager

__all__ = ["OpenAIController", "TokenizeController"]


class OpenAIController(Controller):
    """``/v1``: chat, completions, embeddings and the model list."""

    path = "/v1"
    tags = ["OpenAI"]

    chat_completions = bundle_route(
        "/chat/completions",
        "ChatCompletionRequest",
        "chat_completions",
        lambda admitted: admitted.bundle.chat(admitted.body, admitted.lease.request_id),
        "Create a chat completion (``stream: true`` for SSE) with the active model's frontend.",
    )
    completions = bundle_route(
        "/completions",
        "CompletionRequest",
        "completions",
        lambda admitted: admitted.bundle.completion(admitted.body, admitted.lease.request_id),
        "Create a text completion (``stream: true`` for SSE).",
    )
    embeddings = bundle_route(
        "/embeddings",
        "EmbeddingRequest",
        "embeddings",
        lambda admitted: admitted.bundle.embeddings(admitted.body, admitted.lease.request_id),
        "Create embeddings (pooling models only).",
    )

    @get("/models")
    async def list_models(
        self, request: Request[Any, Any, Any], manager: NamedDependency[EngineManager[ServingBundle]]
    ) -> dict[str, Any]:
        """Every configured model (and alias) in OpenAI's shape, with its ``status`` and whether it is ``active``.

        A key limited to some models (``server.api_keys``) sees only those.
        """
        active = manager.active_model
        snapshot = {slot.name: slot for slot in manager.snapshot().slots}
        created = int(time.time())
        cards: list[dict[str, Any]] = []
        for name, profile in manager.models.items():
            if not visible(request, name):
                continue
            slot = snapshot[name]
            max_len = slot.max_model_len or profile.engine_args.get("max_model_len")
            # An alias (served_model_name) is a name of its own, as in vLLM's list; `parent` says whose.
            for card_id in (name, *(alias for alias in profile.aliases if alias != name)):
                cards.append(
                    {
                        "id": card_id,
                        "object": "model",
                        "created": created,
                        "owned_by": "turnout",
                        "root": profile.model,
                        "parent": None if card_id == name else name,
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

    tokenize = bundle_route(
        "/tokenize",
        "TokenizeRequest",
        "tokenize",
        lambda admitted: admitted.bundle.tokenize(admitted.body),
        "Tokenize a prompt or a chat (rendered with the model's chat template).",
    )
    detokenize = bundle_route(
        "/detokenize",
        "DetokenizeRequest",
        "detokenize",
        lambda admitted: admitted.bundle.detokenize(admitted.body),
        "Turn token ids back into text.",
    )
