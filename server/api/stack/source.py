"""The one path from a profile file to a running stack: :class:`StackSource`.

``turnout serve``, a reload (``POST /admin/reload``, ``turnout reload``, ``serve --watch``) and a Ray node each
load, validate and assemble here, with the command line's :class:`SourceOptions`: the profile is validated once a
process with the same parser registries and defaults, and its stack assembled by the one :func:`assemble_stack`.
This module is the only one that calls the profile loader (``turnout validate`` aside; ``tests/test_layers.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import msgspec

from server.api.app import BackgroundTask, create_app
from server.api.edge import check_secret_sources, read_keys, secret_env, secret_names
from server.api.reload import Reloader, ReloadUnavailable
from server.api.settings import ApiSettings
from server.api.stack.assembly import ServingStack, assemble_stack, edge_settings, prepare_stack
from server.api.stack.options import SourceOptions
from server.profiles import (
    ParserRegistry,
    Profile,
    ProfileInvalid,
    ValidationResult,
    source_parser_registry,
    validate_profile,
)

if TYPE_CHECKING:
    from litestar import Litestar

    from server.engine import MemoryPlan

__all__ = ["StackSource"]

logger = logging.getLogger("turnout.api")


class StackSource:
    """A profile file and the command line's options, and everything a server builds from them.

    The steps in the order a server takes them: :meth:`check` (before vLLM is imported), :meth:`require` (the
    profile, loaded once), :meth:`assemble` (the stack), :meth:`reloader` and :meth:`app`; a reload calls
    :meth:`load` and :meth:`prepare` back. The Ray ingress takes :meth:`edge` alone.

    Args:
        options: The profile file and the command line's part.
    """

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._profile: Profile | None = None
        self._stack: ServingStack | None = None

    @property
    def options(self) -> SourceOptions:
        """What the command line gave."""
        return self._options

    def check(self) -> ValidationResult | None:
        """The profile validated against vLLM's source tables, before vLLM is imported (that takes seconds); None
        where vLLM is not installed (serving fails later, saying so).

        The tables list exactly vLLM's live registries (a test holds that), so the errors are those :meth:`load`
        gives, as long as no parser plugin is loaded: a plugin's names are in the live registries alone.
        """
        registry = source_parser_registry()
        if registry is None:
            return None
        return self._validate(self._options.path, registry)

    @staticmethod
    def check_keys(profile: Profile) -> None:
        """Refuse an unset key variable, or one given twice (``VAR`` and ``VAR_FILE``), without Litestar or vLLM.

        Raises:
            KeyNotSet, SecretSourceInvalid: As ``read_keys`` and ``check_secret_sources``.
        """
        check_secret_sources(secret_names(profile))
        read_keys(profile, secret_env())

    def load(self, path: str | None = None, data: bytes | None = None) -> ValidationResult:
        """``path`` (default: the options') validated with vLLM's live parser registries and the command line's
        defaults; ``data``: the file's content, already read (a reload's; the file is not opened again)."""
        from server.frontend import parser_registry  # it imports vLLM

        return self._validate(path or self._options.path, parser_registry(), data)

    def require(self) -> Profile:
        """The profile, loaded (:meth:`load`) on the first call only; its warnings are logged.

        Raises:
            ProfileInvalid: The profile has errors; carries every one.
        """
        if self._profile is None:
            self._profile = self._required(self.load())
        return self._profile

    def edge(self) -> tuple[Profile, ApiSettings]:
        """The profile and the app's settings (``edge_settings``: the secrets then leave ``os.environ``), for the
        Ray ingress: validated without vLLM's parser registry, as the ingress renders no chat (each node checks
        the parser names as it starts).

        Raises:
            ProfileInvalid: The profile has errors.
            KeyNotSet, SecretSourceInvalid: As ``edge_settings``.
        """
        profile = self._required(self._validate(self._options.path, None))
        return profile, edge_settings(profile, self._options.flags, self._options.extra_secrets)

    def prepare(self, profile: Profile) -> tuple[Profile, MemoryPlan | None]:
        """``profile`` readied to run as the assembled stack runs (``prepare_stack``): with its running
        ``switching`` section and start-up memory reading (the engines running now are part of what the budget
        already counts), then given back the file's ``switching``, which a reload reports as restart-only.

        Raises:
            EngineConfigInvalid, MemoryBudgetExceeded, StrategyUnavailable: As ``prepare_stack``.
        """
        stack = self._stack
        if stack is None:
            return prepare_stack(profile, self._options.stack)
        memory = stack.memory_plan.memory if stack.memory_plan is not None else None
        running = msgspec.structs.replace(profile, switching=stack.profile.switching)
        prepared, plan = prepare_stack(running, self._options.stack, memory=memory)
        return msgspec.structs.replace(prepared, switching=profile.switching), plan

    def assemble(
        self,
        *,
        on_prepared: Callable[[Profile, MemoryPlan | None], None] | None = None,
        warm_launcher: bool = False,
    ) -> ServingStack:
        """The stack of :meth:`require`'s profile (``assemble_stack``: settings, key ring, bundle builder,
        manager); :meth:`prepare` and :meth:`reloader` work from it afterwards.

        Raises:
            ProfileInvalid: As :meth:`require`.
            KeyNotSet, SecretSourceInvalid, EngineConfigInvalid, MemoryBudgetExceeded, StrategyUnavailable: As
                ``assemble_stack``.
        """
        options = self._options
        self._stack = assemble_stack(
            self.require(),
            options.stack,
            options.flags,
            extra_secrets=options.extra_secrets,
            on_prepared=on_prepared,
            warm_launcher=warm_launcher,
        )
        return self._stack

    def reloader(self) -> Reloader:
        """The reloader of the assembled stack: each reloaded version goes through :meth:`load` and
        :meth:`prepare`, and its keys into the stack's key ring."""
        stack = self._assembled()
        return Reloader(stack.manager, stack.profile, self, key_ring=stack.key_ring)

    def app(
        self,
        *,
        reloader: Reloader | ReloadUnavailable,
        settings: ApiSettings | None = None,
        loading_status: Callable[[str], AbstractContextManager[None]] | None = None,
        background: Sequence[BackgroundTask] = (),
        request_schemas: Any = None,
    ) -> Litestar:
        """The app over the assembled stack (``create_app``), which loads the default model as it starts.

        Args:
            reloader: :meth:`reloader`'s, or why this server cannot reload.
            settings: The stack's settings as the CLI completed them (a generated admin token); None: the stack's.
            loading_status: As ``create_app``.
            background: As ``create_app``.
            request_schemas: As ``create_app``.
        """
        stack = self._assembled()
        return create_app(
            stack.manager,
            stack.settings if settings is None else settings,
            default_model=stack.profile.default_model,
            loading_status=loading_status,
            reloader=reloader,
            background=background,
            request_schemas=request_schemas,
            key_ring=stack.key_ring,
        )

    def _assembled(self) -> ServingStack:
        if self._stack is None:
            raise RuntimeError("the stack is not assembled yet: call assemble() first")
        return self._stack

    def _validate(
        self, path: str | None, parsers: ParserRegistry | None, data: bytes | None = None
    ) -> ValidationResult:
        defaults = self._options.stack.frontend_settings()
        return validate_profile(
            path,
            parsers=parsers,
            default_tool_call_parser=defaults.tool_call_parser,
            default_enable_auto_tool_choice=defaults.enable_auto_tool_choice,
            data=data,
            env=secret_env(),  # the key variables are read there once withheld from os.environ
        )

    @staticmethod
    def _required(result: ValidationResult) -> Profile:
        if result.profile is None:
            raise ProfileInvalid(result.errors, result.warnings)
        for warning in result.warnings:
            logger.warning("%s", warning)
        return result.profile
