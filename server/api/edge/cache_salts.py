"""Each API key's prefix-cache salt: a key's requests reuse only the cached prompt blocks of its own cache group.

vLLM's prefix cache (and the KV blocks a ``keep`` switch keeps, filed by vLLM's block hash) is shared by every
request to a model: a request whose prompt starts as another's reuses the other's blocks, which shows in
``usage.prompt_tokens_details.cached_tokens`` and in the time to the first token, so one key's team could learn
what another's sent. vLLM folds a request's ``cache_salt`` into its first block's hash, so requests with different
salts share no block. Here each key's group (its ``cache_group``, else the key alone) has a salt, an HMAC-SHA256 of
the group's name (or of the key's digest) under a secret the server draws at start, so the salt says nothing of
the key and nobody outside the server can compute a group's salt from its name. Every request that reaches the
prefix cache carries its key's salt, combined with the request's own ``cache_salt`` (an HMAC of that under the
group's salt): a client may narrow its sharing within its group, never reach another group's blocks. Without keys
nothing is added (one group, as in vLLM), and a request's own ``cache_salt`` goes to vLLM unchanged.

Every route that admits a request to a model is salted, a new one too, but those in :data:`UNSALTED_ROUTES`, each
with the reason it never reaches the prefix cache. Where vLLM's request takes no ``cache_salt`` (Cohere's embed,
the speech forms), the frontend carries the salt into the engine's prompts itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from litestar.connection import ASGIConnection
from litestar.exceptions import ValidationException

__all__ = [
    "UNSALTED_ROUTES",
    "group_salt",
    "new_salt_secret",
    "record_cache_salt",
    "request_cache_salt",
    "route_salted",
    "salted",
]

#: The connection state key the guard records the key's salt under (absent: no key, nothing added).
_STATE_KEY: Final = "turnout_cache_salt"
#: The admitted routes whose body is left unsalted (by path), each with the reason: they never run the model, so
#: nothing they do reaches (or shows) the prefix cache. Every other admitted route is salted.
UNSALTED_ROUTES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "/tokenize": "only renders and tokenizes the prompt; the model never runs",
        "/detokenize": "only turns token ids back into text; the model never runs",
        "/v1/messages/count_tokens": "only renders the prompt and counts its tokens; the model never runs",
    }
)


def new_salt_secret() -> bytes:
    """The server's secret salts are drawn under: random, for this server's life (its caches end with it)."""
    return secrets.token_bytes(32)


def group_salt(secret: bytes, key_digest: bytes, cache_group: str | None) -> str:
    """The salt of a key's cache group: its ``cache_group``'s, else its own (from its digest), under ``secret``."""
    name = b"group\x00" + cache_group.encode() if cache_group is not None else b"key\x00" + key_digest
    return hmac.new(secret, name, hashlib.sha256).hexdigest()


def record_cache_salt(connection: ASGIConnection[Any, Any, Any, Any], salt: str) -> None:
    """Note the salt of the connection's key's cache group."""
    connection.state[_STATE_KEY] = salt


def request_cache_salt(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The salt of the connection's key's cache group; None when no key was matched (a server without keys)."""
    salt: str | None = connection.state.get(_STATE_KEY)
    return salt


def route_salted(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    """Whether the connection's route carries the key's salt: every admitted route but :data:`UNSALTED_ROUTES`."""
    return connection.scope.get("path_template") not in UNSALTED_ROUTES


def salted(body: dict[str, Any], salt: str | None) -> dict[str, Any]:
    """``body`` with ``cache_salt`` set to ``salt`` combined with the body's own (unchanged when ``salt`` is None).

    Raises:
        ValidationException: the body's own ``cache_salt`` is not a non-empty string (vLLM's rule; a 400).
    """
    if salt is None:
        return body
    own = body.get("cache_salt")
    if own is None:
        return {**body, "cache_salt": salt}
    if not isinstance(own, str) or not own:
        raise ValidationException("Parameter 'cache_salt' must be a non-empty string if provided.")
    return {**body, "cache_salt": hmac.new(salt.encode(), own.encode(), hashlib.sha256).hexdigest()}
