"""What the command line gives the serving stack: the same frozen options for ``turnout serve``, a reload and a Ray
node (``turnout ray-serve`` hands them to each replica inside the application's options)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server.api.stack.serving_settings import ServingFlags
from server.frontend import FrontendSettings

__all__ = ["SourceOptions", "StackOptions"]


@dataclass(frozen=True, kw_only=True)
class StackOptions:
    """What the command line adds to a profile's serving stack: the same for ``turnout serve`` and a Ray node.

    Attributes:
        engine_defaults: Engine arguments every model gets (``AsyncEngineArgs`` fields: vLLM's engine flags and
            the default reasoning parser); a model's own key wins.
        frontend_defaults: ``FrontendSettings`` fields every model gets (``--tool-call-parser``,
            ``--chat-template``, vLLM's per-model frontend flags, ...); a model's own profile key wins.
        fingerprint_mode: vLLM's ``--fingerprint-mode``: the ``system_fingerprint`` of every model's answers.
        fingerprint_value: The fingerprint of ``--fingerprint-mode custom``.
        admission_timeout: Most seconds a request waits for a switch (None: the manager's default).
        no_preload: ``--no-preload``: only the default model loads at start.
        keep_costs: Keep the measured reload costs in this user's private state folder, so that a restart starts
            with them (``turnout serve``; a Ray replica keeps them in memory).
    """

    engine_defaults: Mapping[str, Any] = field(default_factory=dict)
    frontend_defaults: Mapping[str, Any] = field(default_factory=dict)
    fingerprint_mode: str = "full"
    fingerprint_value: str | None = None
    admission_timeout: float | None = None
    no_preload: bool = False
    keep_costs: bool = False

    def frontend_settings(self) -> FrontendSettings:
        """The frontend defaults of every model: the requests are logged when the engines log them."""
        log_requests = bool(self.engine_defaults.get("enable_log_requests", False))
        return FrontendSettings(**{"log_requests": log_requests, **self.frontend_defaults})


@dataclass(frozen=True, kw_only=True)
class SourceOptions:
    """Everything a :class:`~server.api.stack.StackSource` is given: the profile file and the command line's part.

    Attributes:
        path: The profile file (None: ``$VLLM_HPU_MULTI_MODEL_CONFIG`` names it).
        stack: What the command line adds to the stack (its frontend defaults also shape the validation: a model
            with auto tool choice and no parser of its own is fine when the command line gives one).
        flags: The command line's part of the app's settings.
        extra_secrets: More variables to withhold from ``os.environ`` besides the profile's (``--api-key-env``).
    """

    path: str | None = None
    stack: StackOptions = field(default_factory=StackOptions)
    flags: ServingFlags = field(default_factory=ServingFlags)
    extra_secrets: tuple[str | None, ...] = ()
