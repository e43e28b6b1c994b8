"""profiles/demo.yaml serves the tiny models with their own templates, and validates cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.profiles import validate_profile
from server.tinymodels import TINY_PLAIN, TINY_TOOLS
from server.tinymodels.spec import REPO_ROOT

DEMO = REPO_ROOT / "profiles" / "demo.yaml"


def test_demo_profile_serves_the_tiny_models(tiny_models: dict[str, Path]) -> None:
    result = validate_profile(DEMO)

    assert (result.errors, result.warnings) == ([], [])
    assert result.profile is not None
    models = result.profile.models
    if {Path(models["tools"].model), Path(models["plain"].model)} != set(tiny_models.values()):
        pytest.skip("$TURNOUT_TINY_MODELS moved the models away from the demo profile's paths")
    assert Path(models["tools"].model) == tiny_models[TINY_TOOLS.name]
    assert Path(models["plain"].model) == tiny_models[TINY_PLAIN.name]
    assert models["tools"].chat_template == str(TINY_TOOLS.template_path)
    assert models["plain"].chat_template == str(TINY_PLAIN.template_path)
    assert (models["tools"].tool_call_parser, models["tools"].enable_auto_tool_choice) == ("hermes", True)
    assert models["plain"].tool_call_parser is None
