"""The API layer's frozen settings, resolved once at start-up from the CLI and the profile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server.profiles.schema import DEFAULT_ADMIN_TOKEN_ENV

__all__ = ["ApiSettings"]


@dataclass(frozen=True, kw_only=True)
class ApiSettings:
    """What the app factory needs besides the manager.

    Attributes:
        admin_token: Bearer token for the admin routes; None disables them unless ``dev_mode``.
        admin_token_env: The env var the token comes from (named in the 403 that says how to enable them).
        api_key: Key guarding ``/v1/*``; None leaves them open.
        dev_mode: Open the admin routes without a token (``--dev`` or ``VLLM_SERVER_DEV_MODE=1``).
        cors: CORS for every route, as Litestar's ``CORSConfig`` arguments (``allow_origins``, ``allow_methods``,
            ``allow_headers``, ``allow_credentials``); None: no CORS headers, preflights are not answered.
        enable_tokenizer_info_endpoint: Serve ``GET /tokenizer_info`` (vLLM's ``--enable-tokenizer-info-endpoint``;
            off by default, as there: it shows the tokenizer's configuration and chat template to any client).
        enable_request_id_headers: Every answer carries ``X-Request-Id``: the request's own, or a random one
            (vLLM's ``--enable-request-id-headers``).
    """

    admin_token: str | None = field(default=None, repr=False)
    admin_token_env: str = DEFAULT_ADMIN_TOKEN_ENV
    api_key: str | None = field(default=None, repr=False)
    dev_mode: bool = False
    cors: Mapping[str, Any] | None = None
    enable_tokenizer_info_endpoint: bool = False
    enable_request_id_headers: bool = False
