"""Facts that packages share are stated once, in the lowest layer that needs them: these tests hold the ones a
scan or a comparison can hold (each can fail: the scans see a planted copy, the comparisons read both sides)."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

from server.frontend import FrontendSettings
from server.profiles import ModelProfile, Switching

SERVER = Path(__file__).resolve().parents[1] / "server"
#: Where the mode may be compared to its names: the schema that defines it, and the engine, whose checks go
#: through its ``SchedulerPolicy`` (the one place that turns the profile's string into ``policy.auto``).
MODE_OWNERS = ("profiles", "engine")


def mode_comparisons(source: str) -> list[int]:
    """The lines that compare a ``mode`` attribute to ``"auto"`` or ``"manual"``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(isinstance(side, ast.Attribute) and side.attr in ("mode", "_mode") for side in sides)
            literal = any(isinstance(side, ast.Constant) and side.value in ("auto", "manual") for side in sides)
            if named and literal:
                lines.append(node.lineno)
    return lines


def test_the_mode_scan_sees_a_comparison() -> None:
    assert mode_comparisons('if snapshot.mode == "auto":\n    pass\n') == [1]
    assert mode_comparisons('if "manual" != self._mode:\n    pass\n') == [1]
    assert mode_comparisons("if switching.auto:\n    pass\n") == []


def test_the_mode_is_checked_through_switching_auto() -> None:
    found = [
        f"{path.relative_to(SERVER.parent)}:{line}"
        for path in sorted(SERVER.rglob("*.py"))
        if path.relative_to(SERVER).parts[0] not in MODE_OWNERS
        for line in mode_comparisons(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_switching_auto_is_the_mode() -> None:
    assert Switching(mode="auto").auto
    assert not Switching(mode="manual").auto
    assert not Switching().auto


def test_the_frontend_settings_take_the_profiles_types() -> None:
    # A per-model frontend key has one type, the schema's (`None` there: the flag's default applies).
    profile = typing.get_type_hints(ModelProfile)
    settings = typing.get_type_hints(FrontendSettings)
    shared = sorted(set(profile) & set(settings))
    assert "tool_strict_level" in shared
    differ = [key for key in shared if profile[key] not in (settings[key], settings[key] | None)]
    assert differ == []


ENV_NAME = re.compile(r"(TURNOUT|VLLM)_[A-Z0-9_]+")


def env_names(source: str) -> list[str]:
    """The environment variable names (``TURNOUT_...``, ``VLLM_...``) a module states as string constants, those
    of ``__all__`` left out (they name Python names)."""
    tree = ast.parse(source)
    exported = {
        id(element)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for element in ast.walk(node.value)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and ENV_NAME.fullmatch(node.value)
        and id(node) not in exported
    ]


def test_the_env_name_scan_sees_names_not_exports() -> None:
    assert env_names('__all__ = ["VLLM_PREFIX"]\nX = "TURNOUT_ADMIN_TOKEN"\nos.environ["VLLM_PLUGINS"]\n') == [
        "TURNOUT_ADMIN_TOKEN",
        "VLLM_PLUGINS",
    ]


def test_each_environment_variable_is_named_once() -> None:
    # The admin token's variable, the profile's, ...: a second copy of a name drifts from the first.
    places: dict[str, list[str]] = {}
    for path in sorted(SERVER.rglob("*.py")):
        for name in env_names(path.read_text(encoding="utf-8")):
            places.setdefault(name, []).append(str(path.relative_to(SERVER.parent)))
    assert "TURNOUT_ADMIN_TOKEN" in places
    assert {name: files for name, files in places.items() if len(files) > 1} == {}
