"""``turnout serve``'s parsed options (:class:`ServeOptions`, frozen; no ``Namespace``) and what the stack source
gets from them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.cli.frontend_flags import FrontendFlags
from server.cli.logging_setup import LoggingSetup

if TYPE_CHECKING:
    from server.api import ServingFlags, SourceOptions, StackOptions

__all__ = ["ServeOptions", "engine_defaults"]


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """Everything ``turnout serve`` takes besides the profile (frozen; no ``Namespace``).

    ``engine_defaults`` holds the vLLM engine flags given on the command line, as ``AsyncEngineArgs`` fields;
    ``frontend`` the vLLM frontend flags (``server/cli/frontend_flags.py`` says what each does).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = field(default=None, repr=False)
    dev: bool = False
    log_level: str = "info"
    admission_timeout: float | None = None  # None: the manager's default
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    chat_template: str | None = None
    reasoning_parser: str | None = None
    generate_admin_token: bool = False
    watch: bool = False
    no_preload: bool = False
    timeout_keep_alive: int | None = None  # None: the profile's server.keep_alive_timeout_s
    engine_defaults: Mapping[str, Any] = field(default_factory=dict)
    frontend: FrontendFlags = field(default_factory=lambda: FrontendFlags(server={}, model_defaults={}))
    api_key_env: str | None = None
    inject_fault: tuple[str, ...] = ()  # armed by the command before the options are built
    log_format: str = "text"
    logging_setup: LoggingSetup | None = None  # None: as set up by the caller (tests), text

    @property
    def stack(self) -> StackOptions:
        """The options that shape the serving stack, as ``assemble_stack`` takes them (a Ray node gets the same)."""
        from server.api import StackOptions

        server = self.frontend.server
        frontend_defaults = {
            "enable_auto_tool_choice": self.enable_auto_tool_choice,
            "tool_call_parser": self.tool_call_parser,
            "chat_template": self.chat_template,
            "reasoning_parser": self.reasoning_parser,
            **self.frontend.model_defaults,
        }
        return StackOptions(
            engine_defaults=self.engine_defaults,
            frontend_defaults=frontend_defaults,
            fingerprint_mode=server.get("fingerprint_mode", "full"),
            fingerprint_value=server.get("fingerprint_value"),
            admission_timeout=self.admission_timeout,
            no_preload=self.no_preload,
            keep_costs=True,
        )

    @property
    def flags(self) -> ServingFlags:
        """The command line's part of the app's settings."""
        from server.api import ServingFlags

        server = self.frontend.server
        return ServingFlags(
            api_key=self.api_key,
            host=self.host,
            machine_names=True,
            dev=self.dev,
            cors=self.frontend.cors(),
            sse_keep_alive_interval_s=float(server.get("sse_keep_alive_interval", 0) or 0),
            enable_tokenizer_info_endpoint=bool(server.get("enable_tokenizer_info_endpoint")),
            enable_request_id_headers=bool(server.get("enable_request_id_headers")),
        )

    def source(self, path: str | None) -> SourceOptions:
        """What the stack source of the profile at ``path`` gets (``--api-key-env`` is withheld too)."""
        from server.api import SourceOptions

        return SourceOptions(path=path, stack=self.stack, flags=self.flags, extra_secrets=(self.api_key_env,))


def engine_defaults(
    flags: Mapping[str, Any], reasoning_parser: str | None, frontend: FrontendFlags | None = None
) -> dict[str, Any]:
    """The engine arguments every model gets from the command line: vLLM's engine flags, and the default reasoning
    parser, which the engine needs as well as the frontend (structured output must know where reasoning ends).

    ``--no-enable-flash-late-interaction`` also reaches every engine's pooler config, as vLLM's
    ``propagate_flash_late_interaction`` does (a model whose profile sets its own ``pooler_config`` keeps it).
    """
    defaults = dict(flags)
    if reasoning_parser is not None:
        defaults["reasoning_parser"] = reasoning_parser
    if frontend is not None and frontend.model_defaults.get("enable_flash_late_interaction") is False:
        pooler = defaults.get("pooler_config")
        if pooler is None:
            defaults["pooler_config"] = {"enable_flash_late_interaction": False}  # vLLM converts a mapping
        else:
            # vLLM's parser gave a PoolerConfig, whose validator refuses replace(); vLLM sets the field as here.
            pooler = copy.copy(pooler)
            pooler.enable_flash_late_interaction = False
            defaults["pooler_config"] = pooler
    return defaults
