"""A spy inside the one assembly of the serving stack (``server/api/stack/assembly.py``): what each assembly
prepared and built, without vLLM's engine checks or an engine.

It stands in for the three calls the assembly makes into the layers below it (``prepare_profile``,
``build_manager`` and ``build_bundle_for_profile``), so whatever reaches them went through ``assemble_stack``:
``turnout serve`` and a Ray node are seen by the same spy only if both assemble their stack there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from server.api.stack import assembly
from server.engine import BundleBuilder
from server.frontend import FrontendSettings, settings_for_model
from server.profiles import ModelProfile, Profile

__all__ = ["Built", "StackBuild", "StackSpy"]


class Built(Exception):
    """Raised by the spy's ``build_manager`` when it was asked to stop the caller there (``turnout serve`` would
    go on to serve)."""


@dataclass(frozen=True)
class StackBuild:
    """One assembly: the profile the manager got, its bundle builder and its other arguments, and the engine
    defaults the profile was prepared with."""

    profile: Profile
    build_bundle: BundleBuilder[Any]
    kwargs: Mapping[str, Any]
    engine_defaults: Mapping[str, Any]

    async def frontend(self, name: str) -> FrontendSettings:
        """The frontend settings ``name``'s bundle is built with, when the manager publishes it."""
        settings: FrontendSettings = await self.build_bundle(name, self.profile.models[name], None)
        return settings


class StackSpy:
    """Installed on ``assembly`` for the test; ``builds`` lists every assembly in order.

    Args:
        stop: Raise :class:`Built` once the manager is built (``run_server`` would go on to serve).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, stop: bool = False) -> None:
        self.builds: list[StackBuild] = []
        self._stop = stop
        self._engine_defaults: list[Mapping[str, Any]] = []
        monkeypatch.setattr(assembly, "prepare_profile", self._prepare)
        monkeypatch.setattr(assembly, "build_manager", self._build_manager)
        monkeypatch.setattr(assembly, "build_bundle_for_profile", self._bundle)

    def _prepare(
        self, profile: Profile, *, engine_defaults: Mapping[str, Any], memory: Any = None
    ) -> tuple[Profile, None]:
        self._engine_defaults.append(dict(engine_defaults))
        return profile, None

    def _build_manager(self, profile: Profile, build_bundle: BundleBuilder[Any], **kwargs: Any) -> str:
        self.builds.append(StackBuild(profile, build_bundle, kwargs, self._engine_defaults[-1]))
        if self._stop:
            raise Built
        return "manager"

    @staticmethod
    async def _bundle(_: str, model: ModelProfile, __: Any, defaults: FrontendSettings) -> FrontendSettings:
        return settings_for_model(model, defaults)
