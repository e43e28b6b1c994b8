"""Profile values win over the CLI's defaults, field by field."""

from __future__ import annotations

from server.frontend.profile_settings import settings_for_model
from server.frontend.settings import FrontendSettings
from server.profiles.schema import ModelProfile


def test_profile_values_win_and_cli_defaults_fill_the_rest() -> None:
    defaults = FrontendSettings(
        enable_auto_tool_choice=True, tool_call_parser="llama3_json", chat_template="/cli.jinja"
    )
    model = ModelProfile(model="/m", tool_call_parser="hermes", enable_auto_tool_choice=False)
    settings = settings_for_model(model, defaults)
    assert (settings.tool_call_parser, settings.enable_auto_tool_choice) == ("hermes", False)
    assert settings.chat_template == "/cli.jinja" and settings.reasoning_parser is None


def test_an_empty_profile_takes_every_default() -> None:
    defaults = FrontendSettings(reasoning_parser="qwen3", response_role="bot")
    assert settings_for_model(ModelProfile(model="/m"), defaults) == defaults
