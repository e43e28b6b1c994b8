"""The names of the serving operations a bundle runs: every generating or pooling route, chat included.

Each is one of vLLM's own routes, served by the serving object `vllm serve` builds for it; the API layer maps
its routes onto these names (``server/api/controllers/serving_routes.py``) and the adapter maps the names onto
vLLM (``server/frontend/vllm_adapter/_operations.py``). Nothing here imports vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

__all__ = ["OPERATIONS", "WITHHELD", "AudioUpload", "Operation"]

Operation = Literal[
    "chat.completions",
    "completions",
    "embeddings",
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
    "audio.transcriptions",
    "audio.translations",
]
"""A serving operation. ``responses.retrieve`` and ``responses.cancel`` take ``{"response_id", ...}`` bodies
built from the path and query (with :data:`WITHHELD` they answer as for an id vLLM's store lacks, whatever it
holds: another API key's response; so does ``responses.create`` for its ``previous_response_id``); the two
``audio.*`` operations take the request's multipart form fields, its ``file`` an `AudioUpload`; the others take
the request's JSON body."""

#: The body key (set true) by which the API layer asks the Responses operations to answer the response id they
#: name as one vLLM's store lacks: another API key's response (vLLM's store is one per model, shared by every key).
WITHHELD: Final = "turnout_withheld"

#: Every operation, in the order the API documents them (the Literal's own order: one list, not two).
OPERATIONS: Final[tuple[Operation, ...]] = get_args(Operation)


@dataclass(frozen=True, slots=True)
class AudioUpload:
    """The ``file`` part of a speech request's multipart form, read by the API layer.

    Attributes:
        data: The file's bytes, as uploaded (vLLM decodes them: WAV, FLAC, MP3, ...).
        filename: The name the client gave, if any.
        content_type: The part's content type, if any.
    """

    data: bytes
    filename: str | None = None
    content_type: str | None = None
