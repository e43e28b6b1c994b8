"""Applying a changed profile to a running server (``POST /admin/reload``, ``turnout reload``, ``serve --watch``).

As llama-swap reloads its config: everything is validated first, with the same checks ``turnout serve`` runs, and
any error leaves the server as it was. The manager builds the new state off to the side and swaps it in, or keeps
the old one on failure. Reloads run one at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol

import msgspec

from server.api.edge import KeyEntries, KeyNotSet, KeyRing, secret_env, withhold_secrets
from server.api.reload.reload_paths import ReloadPaths
from server.engine import EngineConfigInvalid, EngineManager, MemoryBudgetExceeded, MemoryPlan, ModelsReplaced
from server.profiles import (
    ModelChange,
    Profile,
    ProfileChanges,
    ProfileIssue,
    ValidationResult,
    diff_profiles,
    file_digests,
)

__all__ = [
    "NO_PROFILE_FILE",
    "ModelReload",
    "ProfileRejected",
    "ReloadReport",
    "ReloadSource",
    "ReloadUnavailable",
    "Reloader",
]

logger = logging.getLogger("turnout.api")


class ReloadSource(Protocol):
    """Where a reloaded profile is loaded and readied, as the server's own was at start-up (the server's
    :class:`~server.api.stack.StackSource`)."""

    def load(self, path: str | None = None, data: bytes | None = None) -> ValidationResult:
        """``path`` validated as the server's profile was (live parser registries, the command line's defaults),
        from ``data``, the content the reload read from it (the file is not opened again)."""
        ...

    def prepare(self, profile: Profile) -> tuple[Profile, MemoryPlan | None]:
        """A valid ``profile`` readied to run beside what runs now: the command line's engine defaults, vLLM's check
        of every model's engine config, and the KV-cache budget; its settings that apply only at a restart
        (``switching.*``) as the file has them, so that the reload reports them.

        Raises:
            EngineConfigInvalid, MemoryBudgetExceeded: The profile cannot be served here.
        """
        ...


Effect = Literal["now", "next_activation", "next_load"]


class ReloadUnavailable(msgspec.Struct, frozen=True, kw_only=True):
    """Why a server cannot reload its profile: ``POST /admin/reload`` answers 501 ``reload_unavailable`` with
    ``reason`` (what the operator does instead), in the API's error shape."""

    reason: str


#: A server started without a profile file (an app built in code) has nothing to reload.
NO_PROFILE_FILE: Final = ReloadUnavailable(
    reason="This server was started without a profile file; it cannot reload one."
)


class ProfileRejected(Exception):
    """The profile has errors; nothing was changed. Carries every error and warning, positioned."""

    def __init__(self, errors: list[ProfileIssue], warnings: list[ProfileIssue]) -> None:
        super().__init__(f"the profile has {len(errors)} error(s)")
        self.errors = errors
        self.warnings = warnings


class ModelReload(msgspec.Struct, frozen=True, kw_only=True):
    """What a reload did to one model.

    Attributes:
        name: The model.
        change: ``added``, ``removed`` or ``changed``.
        frontend: Frontend settings that changed.
        frontend_effect: ``now`` (the active model got a new bundle) or ``next_activation``.
        engine: Engine settings that changed (the model path, ``quant_config``, engine arguments).
        engine_effect: ``next_load``: the engine running now keeps its settings until the model is next loaded.
        note: The same, in a sentence.
    """

    name: str
    change: Literal["added", "removed", "changed"]
    frontend: list[str] = msgspec.field(default_factory=list)
    frontend_effect: Effect | None = None
    engine: list[str] = msgspec.field(default_factory=list)
    engine_effect: Effect | None = None
    note: str = ""


class ReloadReport(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a reload.

    Attributes:
        profile: The profile file that was read.
        applied: Whether the changes were applied (False for a dry run or when nothing changed).
        changed: Whether anything differs from what the server runs.
        keys_changed: Whether the API keys differ (``server.api_keys``, ``api_key_env`` or their variables'
            values); applied with the rest, from the next request on.
        models: One entry per added, removed or changed model.
        restart_only: Settings that changed but apply only when the server restarts (``switching.*``,
            ``server.*``, ``default_model``); the server keeps its current values.
        warnings: The profile's warnings, each as ``file:line:col: message``.
    """

    profile: str
    applied: bool
    changed: bool
    keys_changed: bool = False
    models: list[ModelReload]
    restart_only: list[str]
    warnings: list[str]


class Reloader:
    """Holds the profile a server runs and applies new versions of it to the manager.

    Args:
        manager: The running manager.
        profile: The profile the server started with.
        source: Where the server's profile came from: each reloaded version is loaded and readied there.
        key_ring: The serving routes' keys, read again from each reloaded profile and ``env`` (None: keys fixed).
        env: Where the keys' variables are read (default: the server's environment, ``secret_env``, whose newly
            named key variables a reload then withholds from ``os.environ`` as start-up did).
    """

    def __init__(
        self,
        manager: EngineManager[Any],
        profile: Profile,
        source: ReloadSource,
        *,
        key_ring: KeyRing | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._manager = manager
        self._profile = profile
        self._digests = file_digests(profile)
        self._source = source
        self._paths = ReloadPaths(profile.path, profile.server.reload_dirs)
        self._key_ring = key_ring
        self._env = secret_env() if env is None else env
        self._withhold = env is None
        self._lock = asyncio.Lock()

    @property
    def profile(self) -> Profile:
        """The profile as applied: its models are what the server runs (restart-only settings stay as started)."""
        return self._profile

    async def reload(self, path: str | None = None, *, dry_run: bool = False) -> ReloadReport:
        """Validate ``path`` (default: the applied profile's file) and apply what changed.

        Raises:
            ProfileRejected: The profile has errors; nothing changed.
            ReloadPathInvalid: ``path`` has a NUL byte; nothing was opened.
            ReloadPathRefused: ``path`` is neither the served profile nor under ``server.reload_dirs``, or a symlink
                took its place after the check; not read.
            ReloadRefused: It removes the active model, or a switch is under way; nothing changed.
            ReloadFailed: The active model's new frontend could not be built; nothing changed.
        """
        async with self._lock:
            source = path or self._profile.path
            # Validation reads files and renders templates: keep it off the event loop.
            result = await asyncio.to_thread(self._read_and_validate, source)
            if result.profile is None:
                raise ProfileRejected(result.errors, result.warnings)
            new, plan = await asyncio.to_thread(self._prepared, result)
            keys = self._read_keys(new, result)
            keys_changed = keys is not None and self._key_ring is not None and self._key_ring.differs(keys)
            digests = await asyncio.to_thread(file_digests, new)
            changes = diff_profiles(self._profile, self._digests, new, digests)
            warnings = [str(warning) for warning in result.warnings]
            if dry_run or not (changes.models or keys_changed):
                return self._report(new.path, changes, None, applied=False, warnings=warnings, keys=keys_changed)
            replaced = None
            if changes.models:
                # The models, their memory plan and the stale engines change together, between switches.
                replaced = await self._manager.replace_models(
                    new.models,
                    new_frontend=[change.name for change in changes.models if change.frontend],
                    new_engine=[change.name for change in changes.models if change.engine],
                    memory_plan=plan,
                )
            if keys_changed:
                assert keys is not None and self._key_ring is not None
                self._key_ring.install(keys)
            # Restart-only settings keep their running values, so a later reload reports them again.
            server = msgspec.structs.replace(
                self._profile.server, api_keys=new.server.api_keys, api_key_env=new.server.api_key_env
            )
            self._profile = msgspec.structs.replace(self._profile, path=new.path, models=new.models, server=server)
            self._digests = digests
            report = self._report(new.path, changes, replaced, applied=True, warnings=warnings, keys=keys_changed)
            notes = [model.note for model in report.models] + (["the API keys changed"] if keys_changed else [])
            logger.info("reload of %s applied: %s", new.path, "; ".join(notes))
            return report

    def _read_and_validate(self, source: str) -> ValidationResult:
        """``source`` read once through the checked descriptor (``ReloadPaths.read``), then validated from that
        content; a file that cannot be read rejects the profile (as the loader would say it)."""
        try:
            data = self._paths.read(source)
        except OSError as exc:
            message = f"cannot read the profile: {exc.strerror or exc}"
            raise ProfileRejected([ProfileIssue(file=source, line=1, col=1, message=message)], []) from None
        return self._source.load(source, data)

    def _read_keys(self, new: Profile, result: ValidationResult) -> KeyEntries | None:
        """The key set ``new`` configures (None without a key ring); an unset variable rejects the profile."""
        if self._key_ring is None:
            return None
        try:
            keys = self._key_ring.read(new, self._env)
        except KeyNotSet as unset:
            raise ProfileRejected(
                [ProfileIssue(file=new.path, line=1, col=1, message=str(unset))], result.warnings
            ) from None
        if self._withhold:
            withhold_secrets(new)  # a variable this version names for the first time leaves os.environ too
        return keys

    def _prepared(self, result: ValidationResult) -> tuple[Profile, MemoryPlan | None]:
        assert result.profile is not None
        try:
            return self._source.prepare(result.profile)
        except (EngineConfigInvalid, MemoryBudgetExceeded) as refused:
            # vLLM's own checks know no positions: each problem names the model and the key instead.
            path = result.profile.path
            errors = [ProfileIssue(file=path, line=1, col=1, message=problem) for problem in refused.problems]
            raise ProfileRejected(errors, result.warnings) from None

    def _report(
        self,
        path: str,
        changes: ProfileChanges,
        replaced: ModelsReplaced | None,
        *,
        applied: bool,
        warnings: list[str],
        keys: bool = False,
    ) -> ReloadReport:
        active = self._manager.active_model
        return ReloadReport(
            profile=path,
            applied=applied,
            changed=not changes.empty or keys,
            keys_changed=keys,
            models=[self._describe(change, active, replaced) for change in changes.models],
            restart_only=changes.restart_only,
            warnings=warnings,
        )

    def _describe(self, change: ModelChange, active: str | None, replaced: ModelsReplaced | None) -> ModelReload:
        name = change.name
        if change.kind != "changed":
            note = f"'{name}' is {change.kind}" if replaced else f"'{name}' would be {change.kind}"
            if change.kind == "removed" and replaced and name in replaced.unloaded:
                note += "; its parked engine was unloaded"
            return ModelReload(name=name, change=change.kind, note=note)
        frontend_effect: Effect | None = None
        engine_effect: Effect | None = "next_load" if change.engine else None
        parts = []
        if change.frontend:
            frontend_effect = "now" if name == active else "next_activation"
            when = "now" if frontend_effect == "now" else "when it is next activated"
            parts.append(f"frontend ({', '.join(change.frontend)}) applies {when}")
        if change.engine:
            text = f"engine settings ({', '.join(change.engine)}) apply at its next load"
            if replaced and name in replaced.unloaded:
                text += "; its parked engine was unloaded"
            elif name == active:
                text += "; the running engine keeps the old ones until a switch leaves it"
            parts.append(text)
        if change.residency:
            parts.append(f"residency ({', '.join(change.residency)}) applies now")
        prefix = f"'{name}': " if replaced else f"'{name}' (not applied): "
        return ModelReload(
            name=name,
            change="changed",
            frontend=change.frontend,
            frontend_effect=frontend_effect,
            engine=change.engine,
            engine_effect=engine_effect,
            note=prefix + "; ".join(parts),
        )
