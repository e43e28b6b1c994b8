"""vLLM's request models that declare no ``cache_salt`` though vLLM's serving would use one: the same models with it.

The API layer salts every body that reaches the prefix cache with its key's group (``server/api/cache_salts.py``).
vLLM's pooling serving reads ``cache_salt`` off any request into the prompts it hands the engine (its
``prompt_extras``), but its Cohere embed model declares no such field, so pydantic would drop the salt: the model
here declares it, checked as vLLM checks its other requests' salts. (The speech routes, whose serving reads no
salt at all, are salted on their engine prompts instead: ``_speech.py``.)

Written against vLLM 0.32.0, like `vllm_adapter`.
"""

from __future__ import annotations

import pydantic
from vllm.entrypoints.generate.base.protocol import validate_cache_salt
from vllm.entrypoints.pooling.embed.protocol import CohereEmbedRequest as _VllmCohereEmbedRequest

__all__ = ["CohereEmbedRequest"]


class CohereEmbedRequest(_VllmCohereEmbedRequest):
    """vLLM's Cohere embed request with the ``cache_salt`` its other requests take (named as vLLM's, for the
    OpenAPI component): the salt reaches the prefix cache as an embeddings request's does."""

    cache_salt: str | None = None

    @pydantic.field_validator("cache_salt")
    @classmethod
    def _checked_salt(cls, value: str | None) -> str | None:
        validate_cache_salt(value)
        return value
