"""The API keys the serving routes accept, held as SHA-256 digests and swapped whole when a reload changes them.

As vLLM compares keys: each given key is hashed and its digest compared with every configured key's digest by
``hmac.compare_digest``, every key, with no early exit, so neither which key matched nor a key's length shows in
the time a check takes. A reload that changes ``server.api_keys`` (or ``api_key_env``) reads the keys again and
installs the new set in one assignment: a request checked before it keeps its admission and finishes, the next
request of a revoked key gets 401. Each key also carries its cache group's salt (``cache_salts.py``), drawn under a
secret the ring keeps for its life: a reload keeps every group's salt, so its cached prefixes stay its own.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from server.api.edge.cache_salts import group_salt, new_salt_secret
from server.api.edge.key_scopes import scoped_keys
from server.api.settings import ApiSettings, ScopedKey
from server.profiles import Profile

__all__ = [
    "NO_MATCH",
    "VLLM_API_KEY_ENV",
    "KeyEntries",
    "KeyMatch",
    "KeyRing",
    "KeySet",
    "digest",
    "every_model_key",
    "read_keys",
]

#: vLLM's variable for ``vllm serve``'s key; honoured as vLLM does, after the profile's ``server.api_key_env``.
VLLM_API_KEY_ENV: Final = "VLLM_API_KEY"

#: What :meth:`KeyRing.match` answers when no configured key matched.
NO_MATCH: Final[Any] = object()


@dataclass(frozen=True, slots=True)
class KeyMatch:
    """What a configured key grants.

    Attributes:
        models: The models it may use (None: every model).
        cache_salt: Its cache group's salt (``cache_salts.group_salt``).
        holder: The key's own identity (its digest): what it creates (a stored response) is its alone.
    """

    models: frozenset[str] | None
    cache_salt: str = field(repr=False)
    holder: bytes = field(repr=False)


#: The keys as the ring holds them: each key's digest and what it grants.
KeyEntries = tuple[tuple[bytes, KeyMatch], ...]


def digest(secret: str) -> bytes:
    """A key's SHA-256 digest: what is kept and compared (equal length whatever the key)."""
    return hashlib.sha256(secret.encode()).digest()


@dataclass(frozen=True, kw_only=True)
class KeySet:
    """The keys as resolved from a profile and the environment.

    Attributes:
        api_key: The key that may use every model (``--api-key-env``/``--api-key-file``, else
            ``server.api_key_env``'s variable, else ``VLLM_API_KEY``).
        scoped: The keys of ``server.api_keys``, each limited to its models.
        api_key_cache_group: ``api_key``'s cache group (``server.api_key_cache_group``; None: its own).
    """

    api_key: str | None = field(default=None, repr=False)
    scoped: tuple[ScopedKey, ...] = ()
    api_key_cache_group: str | None = None


def read_keys(profile: Profile, env: Mapping[str, str], cli_api_key: str | None = None) -> KeySet:
    """The keys ``profile`` configures, read from ``env``: the key for every model is ``cli_api_key`` (from
    ``--api-key-env`` or ``--api-key-file``), else ``server.api_key_env``'s variable, else ``VLLM_API_KEY``.

    Raises:
        KeyNotSet: An item of ``server.api_keys`` names an unset variable.
    """
    scoped = scoped_keys(profile.server.api_keys, profile.models, env)
    api_key = every_model_key(profile, env, cli_api_key)
    return KeySet(api_key=api_key, scoped=scoped, api_key_cache_group=profile.server.api_key_cache_group)


def every_model_key(profile: Profile, env: Mapping[str, str], cli_api_key: str | None = None) -> str | None:
    """The key that may use every model: ``cli_api_key``, else ``server.api_key_env``'s variable, else
    ``VLLM_API_KEY`` (None: no key is required)."""
    return (
        cli_api_key or env.get(profile.server.api_key_env, "").strip() or env.get(VLLM_API_KEY_ENV, "").strip() or None
    )


def _entries(keys: KeySet, secret: bytes) -> KeyEntries:
    def entry(key: str, models: frozenset[str] | None, cache_group: str | None) -> tuple[bytes, KeyMatch]:
        key_digest = digest(key)
        salt = group_salt(secret, key_digest, cache_group)
        return key_digest, KeyMatch(models=models, cache_salt=salt, holder=key_digest)

    every: Iterable[tuple[bytes, KeyMatch]] = (
        [entry(keys.api_key, None, keys.api_key_cache_group)] if keys.api_key else []
    )
    return (*every, *(entry(scoped.key, scoped.models, scoped.cache_group) for scoped in keys.scoped))


class KeyRing:
    """The serving routes' keys: matched in constant time, replaced atomically.

    Args:
        keys: The keys the server starts with.
        cli_api_key: The command line's key (``--api-key-env``/``--api-key-file``): kept across reloads (a reload
            re-reads only what the profile names).
    """

    def __init__(self, keys: KeySet, *, cli_api_key: str | None = None) -> None:
        self._salt_secret = new_salt_secret()  # for the ring's life: reloads keep every group's salt
        self._entries = _entries(keys, self._salt_secret)
        self._cli_api_key = cli_api_key

    @classmethod
    def of(cls, settings: ApiSettings, *, cli_api_key: str | None = None) -> KeyRing:
        """A ring of ``settings``' keys (the single API key and the scoped keys)."""
        keys = KeySet(
            api_key=settings.api_key, scoped=settings.scoped_keys, api_key_cache_group=settings.api_key_cache_group
        )
        return cls(keys, cli_api_key=cli_api_key)

    def __deepcopy__(self, memo: dict[int, Any]) -> KeyRing:
        # Litestar deep-copies a router (and the guards on it) as it registers it: a copy would not see reloads.
        return self

    @property
    def keyed(self) -> bool:
        """Whether any key is configured (the serving routes then need one)."""
        return bool(self._entries)

    def match(self, given: Iterable[str | None]) -> KeyMatch:
        """What the configured key among ``given`` grants, or :data:`NO_MATCH`.

        Every given value is compared with every configured key, whatever matched before.
        """
        entries = self._entries  # one read: a reload swapping the set mid-check cannot mix two sets
        candidates = [digest(value or "") for value in given]
        matched = NO_MATCH
        for secret, grant in entries:
            for candidate in candidates:
                if hmac.compare_digest(candidate, secret) and matched is NO_MATCH:
                    matched = grant
        return matched  # type: ignore[no-any-return]

    def read(self, profile: Profile, env: Mapping[str, str]) -> KeyEntries:
        """The key set ``profile`` configures now, for :meth:`install` (raises ``KeyNotSet`` as :func:`read_keys`)."""
        return _entries(read_keys(profile, env, self._cli_api_key), self._salt_secret)

    def differs(self, entries: KeyEntries) -> bool:
        """Whether ``entries`` (from :meth:`read`) differ from the keys in use."""
        return entries != self._entries

    def install(self, entries: KeyEntries) -> None:
        """Use ``entries`` from the next check on (one assignment: no check sees half of each set)."""
        self._entries = entries
