"""Which model's bundle holds each stored Responses-API response, so that a retrieve goes to it or says why not.

vLLM keeps stored responses (``store: true``, with ``VLLM_ENABLE_RESPONSES_API_STORE=1``, as `vllm serve`) in the
Responses serving object of the engine that made them; a bundle lives as long as its engine. So a retrieve (or
cancel) is sent to the model that created the response, and only while the same bundle is serving: after a
switch the client gets a 404 that names the model and the reason, never another model's "not found" or a 500.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ResponseOwner", "StoredResponses"]

#: Ids remembered; the oldest are forgotten first (vLLM's own store is unbounded, ours is only a directory).
_CAPACITY: Final = 10_000


@dataclass(frozen=True, slots=True)
class ResponseOwner:
    """The model a response was created by, and (weakly) the bundle that stores it."""

    model: str
    bundle: weakref.ref[Any]


class StoredResponses:
    """Response id → the model and bundle that created it (bounded; one per app)."""

    def __init__(self, capacity: int = _CAPACITY) -> None:
        self._owners: OrderedDict[str, ResponseOwner] = OrderedDict()
        self._capacity = capacity

    def record(self, response_id: str, model: str, bundle: Any) -> None:
        """Note that ``model``'s ``bundle`` created ``response_id``."""
        self._owners[response_id] = ResponseOwner(model, weakref.ref(bundle))
        self._owners.move_to_end(response_id)
        while len(self._owners) > self._capacity:
            self._owners.popitem(last=False)

    def owner(self, response_id: str) -> ResponseOwner | None:
        """Who created ``response_id``, or None when this server does not know it."""
        return self._owners.get(response_id)
