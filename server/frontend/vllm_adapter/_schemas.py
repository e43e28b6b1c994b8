"""vLLM's request models as JSON Schema, for the OpenAPI document (``server/api/app.py`` gets them from the CLI)."""

from __future__ import annotations

from typing import Any

import pydantic

from server.frontend.vllm_adapter._operations import REQUEST_BODIES

__all__ = ["request_body_schemas"]


def request_body_schemas(ref_prefix: str = "#/components/schemas/") -> dict[str, dict[str, Any]]:
    """vLLM's request models as JSON Schema, for the OpenAPI document (as `vllm serve` documents them).

    Returns:
        Component name to schema: one per entry of the adapter's `REQUEST_BODIES` (`ChatCompletionRequest`, ...),
        plus the definitions they refer to as `{ref_prefix}{name}`.
    """
    adapters = [(name, "validation", pydantic.TypeAdapter(model)) for name, model in REQUEST_BODIES.items()]
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
