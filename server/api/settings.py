"""The API layer's frozen settings (the scoped API keys among them), resolved once at start-up from the CLI and the
profile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server.profiles import DEFAULT_ADMIN_TOKEN_ENV

__all__ = ["ApiSettings", "ScopedKey"]


@dataclass(frozen=True, kw_only=True)
class ScopedKey:
    """One key of ``server.api_keys``, resolved.

    Attributes:
        key: The secret (never shown).
        models: The models (their own names) it may use.
        cache_group: Its prefix-cache group (``cache_group``; None: a cache of its own).
    """

    key: str = field(repr=False)
    models: frozenset[str]
    cache_group: str | None = None


@dataclass(frozen=True, kw_only=True)
class ApiSettings:
    """What the app factory needs besides the manager.

    Attributes:
        admin_token: Bearer token for the admin routes; None disables them unless ``dev_mode``.
        admin_token_env: The env var the token comes from (named in the 403 that says how to enable them).
        api_key: Key guarding ``/v1/*`` that may use every model; None leaves them open unless ``scoped_keys``.
        scoped_keys: Keys that may use only some models (``server.api_keys``); any of them also closes ``/v1/*``
            to requests without a key.
        dev_mode: Open the admin routes without a token (``--dev`` or ``VLLM_SERVER_DEV_MODE=1``).
        cors: CORS for every route, as Litestar's ``CORSConfig`` arguments (``allow_origins``, ``allow_methods``,
            ``allow_headers``, ``allow_credentials``); None: no CORS headers, preflights are not answered.
        wait_notice_interval_s: Seconds between two ``: waiting for 'NAME' to load`` comments of a stream that
            waits for its model (``server/api/streaming/waiting.py``); ``sse_keep_alive_interval_s`` when that is set.
        sse_keep_alive_interval_s: vLLM's ``--sse-keep-alive-interval``: a ``: keep-alive`` comment whenever a
            stream is idle that long (0: never).
        enable_tokenizer_info_endpoint: Serve ``GET /tokenizer_info`` (vLLM's ``--enable-tokenizer-info-endpoint``;
            off by default, as there: it shows the tokenizer's configuration and chat template to any client).
        stream_stall_timeout_s: Seconds a stream may wait for its client to take a chunk before it is ended, its
            engine request aborted and its lease released (``server.stream_stall_timeout_s``; 0: never).
        enable_request_id_headers: Every answer carries ``X-Request-Id``: the request's own, or a random one
            (vLLM's ``--enable-request-id-headers``).
        allowed_hosts: The ``Host`` names the server answers (``edge/checks.py``' ``host_allowed``); None: any.
        metrics_token: Bearer token ``/metrics`` needs (``server.metrics_token_env``); None: open, unless keys
            are configured (``edge/auth.py``' ``check_metrics_token``).
        metrics_public: ``server.metrics_public``: ``/metrics`` needs no token on a server with keys.
        api_key_cache_group: ``api_key``'s prefix-cache group (``server.api_key_cache_group``; None: its own).
    """

    admin_token: str | None = field(default=None, repr=False)
    admin_token_env: str = DEFAULT_ADMIN_TOKEN_ENV
    api_key: str | None = field(default=None, repr=False)
    scoped_keys: tuple[ScopedKey, ...] = ()
    dev_mode: bool = False
    cors: Mapping[str, Any] | None = None
    enable_tokenizer_info_endpoint: bool = False
    enable_request_id_headers: bool = False
    wait_notice_interval_s: float = 5.0
    sse_keep_alive_interval_s: float = 0.0
    allowed_hosts: tuple[str, ...] | None = None
    metrics_token: str | None = field(default=None, repr=False)
    stream_stall_timeout_s: float = 60.0
    api_key_cache_group: str | None = None
    metrics_public: bool = False

    @property
    def keyed(self) -> bool:
        """Whether the serving routes need a key."""
        return self.api_key is not None or bool(self.scoped_keys)
