"""How much one request may ask of a model: ``n``, ``best_of`` and the prompts of a batch (the model's profile
bounds ``max_n``, ``max_best_of``, ``max_batch_prompts``).

Checked on the body before admission, by the node (``admission/request_admission.py``: ``admission_target``) and
by the Ray ingress before it places (``server/cluster/gate.py``), so that a request no engine should run gets its
400 at once and never waits for the device or moves it. vLLM bounds none of these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from litestar.exceptions import ValidationException

from server.profiles import ModelProfile

__all__ = ["BATCH_FIELDS", "RequestOutOfBounds", "check_request_bounds"]

#: The body fields whose items are prompts of one batch, across vLLM's routes: completions' ``prompt`` and
#: ``prompt_embeds``, embeddings' and pooling's ``input``, batch chat's ``messages``, score's and rerank's inputs,
#: generative scoring's ``items``, Cohere's embed lists, and the structured decisions' ``questions`` (a mapping of
#: question id to question, each read by the engine on its own). vLLM bounds ``prompt_embeds`` and ``questions``
#: itself, but only once the model is loaded: checked here too, so that a huge one is refused before it waits for
#: a switch (or makes one).
BATCH_FIELDS: Final = (
    "prompt",
    "prompt_embeds",
    "input",
    "messages",
    "documents",
    "queries",
    "items",
    "text_1",
    "text_2",
    "data_1",
    "data_2",
    "texts",
    "images",
    "inputs",
    "questions",
)
#: Fields whose items may be the parts of one prompt (a token list's ids, a conversation's messages, the
#: Responses API's input items): only items that are themselves a prompt (a string or a list) count.
_PROMPT_PARTS: Final = frozenset({"prompt", "input", "messages"})


class RequestOutOfBounds(ValidationException):
    """A request asks for more than its model's bounds allow: 400, in the API's shape, naming the parameter.

    Attributes:
        param: The body field past its bound (OpenAI's ``param``).
        code: OpenAI's code for it (``integer_above_max_value``, ``array_above_max_length``).
    """

    def __init__(self, message: str, *, param: str, code: str) -> None:
        super().__init__(detail=message)
        self.param, self.code = param, code


def check_request_bounds(body: Mapping[str, Any], model: ModelProfile) -> None:
    """Refuse ``body`` when it asks ``model`` for more than its bounds allow.

    A value of the wrong type is left to vLLM's own validation (its 400 says what is wrong).

    Raises:
        RequestOutOfBounds: ``n`` or ``best_of`` above the model's bound, or a batch field with more prompts.
    """
    for param, bound in (("n", model.max_n), ("best_of", model.max_best_of)):
        value = body.get(param)
        if isinstance(value, int) and not isinstance(value, bool) and value > bound:
            raise RequestOutOfBounds(
                f"Invalid '{param}': integer above maximum value. Expected a value <= {bound}, but got {value} "
                f"instead (the model's {_PROFILE_KEYS[param]}).",
                param=param,
                code="integer_above_max_value",
            )
    for param in BATCH_FIELDS:
        count = _prompt_count(param, body.get(param))
        if count > model.max_batch_prompts:
            raise RequestOutOfBounds(
                f"Invalid '{param}': array too long. Expected an array with maximum length "
                f"{model.max_batch_prompts}, but got an array with length {count} instead (the model's "
                "max_batch_prompts; split the batch).",
                param=param,
                code="array_above_max_length",
            )


#: The profile key of each scalar bound.
_PROFILE_KEYS: Final = {"n": "max_n", "best_of": "max_best_of"}


def _prompt_count(param: str, value: Any) -> int:
    if isinstance(value, dict):
        return len(value) if param == "questions" else 0
    if not isinstance(value, list):
        return 0
    if param in _PROMPT_PARTS:
        return sum(1 for item in value if isinstance(item, str | list))
    return len(value)
