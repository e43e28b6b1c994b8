"""The names of the serving operations a bundle runs beyond chat, completions, embeddings and tokenization.

Each is one of vLLM's own routes, served by the serving object `vllm serve` builds for it; the API layer maps
its routes onto these names (``server/api/controllers/serving_routes.py``) and the adapter maps the names onto
vLLM (``server/frontend/vllm_adapter/_operations.py``). Nothing here imports vLLM.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = ["OPERATIONS", "Operation"]

Operation = Literal[
    "responses.create",
    "responses.retrieve",
    "responses.cancel",
    "messages.create",
    "messages.count_tokens",
    "chat.batch",
    "generative_scoring",
    "structured_decision",
    "pooling",
    "classify",
    "score",
    "rerank",
    "embed.cohere",
]
"""A serving operation. ``responses.retrieve`` and ``responses.cancel`` take ``{"response_id", ...}`` bodies
built from the path and query; the others take the request's JSON body."""

#: Every operation, in the order the API documents them (the Literal's own order: one list, not two).
OPERATIONS: Final[tuple[Operation, ...]] = get_args(Operation)
