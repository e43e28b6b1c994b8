"""vLLM's request models as JSON Schema, for the OpenAPI document (``server/api/app.py`` gets them from the CLI)."""

from __future__ import annotations

from typing import Any

import pydantic
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.pooling.embed.protocol import EmbeddingRequest
from vllm.entrypoints.serve.tokenize.protocol import DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest

from server.frontend.vllm_adapter._operations import REQUEST_BODIES as OPERATION_REQUEST_BODIES

__all__ = ["request_body_schemas"]

#: The request model of each documented request body, named as its OpenAPI component.
_REQUEST_BODIES: dict[str, Any] = {
    "ChatCompletionRequest": ChatCompletionRequest,
    "CompletionRequest": CompletionRequest,
    "EmbeddingRequest": EmbeddingRequest,
    "TokenizeRequest": TokenizeCompletionRequest | TokenizeChatRequest,
    "DetokenizeRequest": DetokenizeRequest,
    **OPERATION_REQUEST_BODIES,
}


def request_body_schemas(ref_prefix: str = "#/components/schemas/") -> dict[str, dict[str, Any]]:
    """vLLM's request models as JSON Schema, for the OpenAPI document (as `vllm serve` documents them).

    Returns:
        Component name to schema: one per entry of `_REQUEST_BODIES` (`ChatCompletionRequest`, ...), plus the
        definitions they refer to as `{ref_prefix}{name}`.
    """
    adapters = [(name, "validation", pydantic.TypeAdapter(model)) for name, model in _REQUEST_BODIES.items()]
    tops, definitions = pydantic.TypeAdapter.json_schemas(adapters, ref_template=ref_prefix + "{model}")  # type: ignore[arg-type]
    schemas: dict[str, dict[str, Any]] = dict(definitions.get("$defs", {}))
    for (name, _), schema in tops.items():
        if schema.get("$ref") != f"{ref_prefix}{name}":  # unions come back inline, models as a reference
            schemas[name] = dict(schema)
    # OpenAI requires a prompt; vLLM's model leaves it optional only for prompt_embeds, which this server does
    # not enable (vLLM answers 400 when both are missing).
    completion = schemas["CompletionRequest"]
    completion["required"] = sorted({*completion.get("required", []), "prompt"})
    return schemas
