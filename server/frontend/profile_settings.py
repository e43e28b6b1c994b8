"""A model's frontend settings: the profile's values win, the server's CLI flags fill in what it leaves unset."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from server.frontend.settings import FrontendSettings
from server.profiles import FRONTEND_SETTING_KEYS, ModelProfile

if TYPE_CHECKING:
    from server.frontend.bundle import FrontendBundle

__all__ = ["build_bundle_for_profile", "settings_for_model"]


def settings_for_model(model: ModelProfile, defaults: FrontendSettings) -> FrontendSettings:
    """``defaults`` (from the CLI) overridden by every frontend field the model's profile sets."""
    overrides: dict[str, Any] = {key: getattr(model, key) for key in FRONTEND_SETTING_KEYS}
    return dataclasses.replace(defaults, **{key: value for key, value in overrides.items() if value is not None})


async def build_bundle_for_profile(
    name: str, model: ModelProfile, engine: Any, defaults: FrontendSettings
) -> FrontendBundle:
    """The engine manager's bundle builder: ``name``'s bundle with its profile's frontend settings."""
    from server.frontend.bundle import build_bundle

    return await build_bundle(name, engine, settings_for_model(model, defaults))
