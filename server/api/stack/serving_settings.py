"""The one assembly of the app's settings from the profile, the environment and the command line.

``turnout serve`` and every Ray Serve node and ingress call :func:`api_settings`; a setting added here reaches all
of them, so the edges of the cluster cannot drift from one node's (a second assembly is how Ray Serve once
ignored ``server.api_keys``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server.api.edge import default_allowed_hosts, read_keys
from server.api.settings import ApiSettings
from server.profiles import Profile

__all__ = ["DEV_MODE_ENV", "ServingFlags", "api_settings"]

#: vLLM's switch for its development routes; Turnout opens its admin routes without a token when it is ``1``.
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


@dataclass(frozen=True, kw_only=True)
class ServingFlags:
    """The command line's part of the settings (``turnout serve``'s flags; ``turnout ray-serve`` has ``--dev``).

    Attributes:
        api_key: The command line's key (``--api-key-env``, ``--api-key-file``): replaces the profile's
            ``api_key_env``.
        host: The address the server is bound to (``--host``): on loopback, ``server.allowed_hosts`` defaults to
            loopback names; None (a Ray node, reached only through its ingress): any ``Host``.
        machine_names: ``host`` is bound by this process on this machine (``turnout serve``): on another address
            than loopback, ``server.allowed_hosts`` defaults to this machine's names and addresses
            (``edge/checks.py``: ``machine_hosts``). False (a Ray node or ingress, whose requests may come under any
            machine's name): any ``Host`` there.
        dev: ``--dev``: open the admin routes without a token.
        cors: vLLM's CORS flags as Litestar's ``CORSConfig`` arguments; None: no CORS.
        sse_keep_alive_interval_s: vLLM's ``--sse-keep-alive-interval`` (0: never); it paces the waiting
            comments of a stream too.
        enable_tokenizer_info_endpoint: vLLM's ``--enable-tokenizer-info-endpoint``.
        enable_request_id_headers: vLLM's ``--enable-request-id-headers``.
    """

    api_key: str | None = field(default=None, repr=False)
    host: str | None = None
    machine_names: bool = False
    dev: bool = False
    cors: Mapping[str, Any] | None = None
    sse_keep_alive_interval_s: float = 0.0
    enable_tokenizer_info_endpoint: bool = False
    enable_request_id_headers: bool = False


def _secret(env: Mapping[str, str], name: str) -> str | None:
    return env.get(name, "").strip() or None


def api_settings(profile: Profile, flags: ServingFlags, env: Mapping[str, str]) -> ApiSettings:
    """The app's settings: the admin token, the API key and the scoped keys (``server.api_keys``) and the metrics
    token read from ``env`` under the profile's variable names, whether ``/metrics`` is public, dev mode, the
    allowed ``Host`` names, CORS, SSE pacing, the stream stall timeout and the optional routes and headers.

    Raises:
        KeyNotSet: A ``server.api_keys`` item's variable is unset or empty (the server must not start).
    """
    server = profile.server
    keep_alive = flags.sse_keep_alive_interval_s
    keys = read_keys(profile, env, flags.api_key)
    return ApiSettings(
        admin_token=_secret(env, server.admin_token_env),
        admin_token_env=server.admin_token_env,
        api_key=keys.api_key,
        scoped_keys=keys.scoped,
        api_key_cache_group=keys.api_key_cache_group,
        allowed_hosts=default_allowed_hosts(flags.host, server.allowed_hosts, machine_names=flags.machine_names),
        metrics_token=_secret(env, server.metrics_token_env) if server.metrics_token_env else None,
        metrics_public=server.metrics_public,
        dev_mode=flags.dev or env.get(DEV_MODE_ENV) == "1",
        cors=flags.cors,
        sse_keep_alive_interval_s=keep_alive,
        **({"wait_notice_interval_s": keep_alive} if keep_alive > 0 else {}),
        stream_stall_timeout_s=server.stream_stall_timeout_s,
        enable_tokenizer_info_endpoint=flags.enable_tokenizer_info_endpoint,
        enable_request_id_headers=flags.enable_request_id_headers,
    )
