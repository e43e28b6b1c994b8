"""Which model's bundle holds each stored Responses-API response, so that a retrieve goes to it or says why not.

vLLM keeps stored responses (``store: true``, with ``VLLM_ENABLE_RESPONSES_API_STORE=1``, as `vllm serve`) in the
Responses serving object of the engine that made them; a bundle lives as long as its engine. So a retrieve (or
cancel) is sent to the model that created the response, and only while the same bundle is serving: after a
switch the client gets a 404 that names the model and the reason, never another model's "not found" or a 500.

A response is its key's alone: vLLM's store is one per model, shared by every key that may use the model, so
here each id also remembers the key that created it (``key_scopes.request_holder``), and to any other key (or for
an id whose creator is forgotten) it is an id this server never made: the same 404, by the same path, as an
unknown id's, whether it is retrieved, cancelled or named as a ``previous_response_id``. A server without keys
has no holders, and every client sees every response, as with vLLM.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["ResponseOwner", "StoredResponses"]

#: Ids remembered; the oldest are forgotten first (vLLM's own store is unbounded, ours is only a directory).
_CAPACITY: Final = 10_000


@dataclass(frozen=True, slots=True)
class ResponseOwner:
    """The model a response was created by, (weakly) the bundle that stores it, and the key it was created with."""

    model: str
    bundle: weakref.ref[Any]
    holder: bytes | None = field(default=None, repr=False)


class StoredResponses:
    """Response id → the model, bundle and key that created it (bounded; one per app)."""

    def __init__(self, capacity: int = _CAPACITY) -> None:
        self._owners: OrderedDict[str, ResponseOwner] = OrderedDict()
        self._capacity = capacity

    def record(self, response_id: str, model: str, bundle: Any, holder: bytes | None = None) -> None:
        """Note that ``model``'s ``bundle`` created ``response_id`` for the key ``holder`` (None: no key)."""
        self._owners[response_id] = ResponseOwner(model, weakref.ref(bundle), holder)
        self._owners.move_to_end(response_id)
        while len(self._owners) > self._capacity:
            self._owners.popitem(last=False)

    def owner(self, response_id: str, holder: bytes | None = None) -> ResponseOwner | None:
        """Who created ``response_id``, as the key ``holder`` may know it: None when this server does not know
        the id, or it was created with another key."""
        owner = self._owners.get(response_id)
        return owner if owner is not None and owner.holder == holder else None

    def withheld(self, response_id: str, holder: bytes | None) -> bool:
        """Whether ``response_id`` must be answered as an unknown id for ``holder`` without asking vLLM, whose
        store is shared by every key: a key's request for an id it did not create (or whose creator is forgotten).
        Never on a server without keys (``holder`` None), where vLLM's store answers as it would alone."""
        return holder is not None and self.owner(response_id, holder) is None
