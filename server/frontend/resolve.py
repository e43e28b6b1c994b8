"""A model's frontend settings: the profile's values win, the server's CLI flags fill in what it leaves unset."""

from __future__ import annotations

import dataclasses

from server.frontend.settings import FrontendSettings
from server.profiles.schema import ModelProfile

__all__ = ["settings_for_model"]


def settings_for_model(model: ModelProfile, defaults: FrontendSettings) -> FrontendSettings:
    """``defaults`` (from the CLI) overridden by every frontend field the model's profile sets."""
    overrides = {
        "enable_auto_tool_choice": model.enable_auto_tool_choice,
        "tool_call_parser": model.tool_call_parser,
        "chat_template": model.chat_template,
        "reasoning_parser": model.reasoning_parser,
    }
    return dataclasses.replace(defaults, **{key: value for key, value in overrides.items() if value is not None})
