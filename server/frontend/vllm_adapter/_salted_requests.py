"""vLLM's request models that declare no ``cache_salt`` though vLLM's serving would use one: the same models with it.

The API layer salts every body that reaches the prefix cache with its key's group (``server/api/edge/cache_salts.py``).
vLLM's pooling serving reads ``cache_salt`` off any request into the prompts it hands the engine (its
``prompt_extras``), but its Cohere embed model declares no such field, so pydantic would drop the salt: the model
here declares it, checked as vLLM checks its other requests' salts. (The speech routes, whose serving reads no
salt at all, are salted on their engine prompts instead: ``_speech.py``.)

Written against vLLM 0.32.0, like `vllm_adapter`.
"""

from __future__ import annotations

import pydantic
from vllm.entrypoints.pooling.embed.protocol import CohereEmbedRequest as _VllmCohereEmbedRequest

from server.frontend.vllm_adapter._moved import optional

__all__ = ["CohereEmbedRequest", "check_cache_salt"]

#: vLLM's own check of a request's salt, where it has one as a function (vLLM 0.26 checks inside each model).
_VLLM_SALT_CHECK = optional("validate_cache_salt")


def check_cache_salt(salt: object) -> None:
    """Check ``salt`` as vLLM checks a request's ``cache_salt``: vLLM's own function where it has one, else what
    vLLM 0.26's request models check (a non-empty string or none).

    Raises:
        ValueError: The salt is not one vLLM takes (vLLM's validation error where it has one).
    """
    if _VLLM_SALT_CHECK is not None:
        _VLLM_SALT_CHECK(salt)
    elif salt is not None and (not isinstance(salt, str) or not salt):
        raise ValueError("Parameter 'cache_salt' must be a non-empty string if provided.")


class CohereEmbedRequest(_VllmCohereEmbedRequest):
    """vLLM's Cohere embed request with the ``cache_salt`` its other requests take (named as vLLM's, for the
    OpenAPI component): the salt reaches the prefix cache as an embeddings request's does."""

    cache_salt: str | None = None

    @pydantic.field_validator("cache_salt")
    @classmethod
    def _checked_salt(cls, value: str | None) -> str | None:
        check_cache_salt(value)
        return value
