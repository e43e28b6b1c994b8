"""Profile test fixtures: a workspace with real support files, an isolated env, a fake parser registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server.profiles import ValidationResult, validate_profile
from tests.fakes.parsers import FakeParserRegistry
from tests.fakes.profile_files import isolated_env, make_workspace, write_profile

Check = Callable[..., ValidationResult]


@pytest.fixture(autouse=True)
def _inc_present(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whether Intel Neural Compressor is installed depends on the machine; tests must not. Tests that
    # check the "INC missing" warning patch it back.
    monkeypatch.setattr("server.profiles.quant_checks.inc_installed", lambda: True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


@pytest.fixture
def env(workspace: Path) -> dict[str, str]:
    return isolated_env(workspace)


@pytest.fixture
def parsers() -> FakeParserRegistry:
    return FakeParserRegistry()


@pytest.fixture
def check(workspace: Path, env: dict[str, str], parsers: FakeParserRegistry) -> Check:
    """Write a profile into the workspace and validate it with the fake registry."""

    def run(text: str, name: str = "profile.yaml", **overrides: Any) -> ValidationResult:
        path = write_profile(workspace, text, name)
        options: dict[str, Any] = {"env": env, "parsers": parsers, **overrides}
        return validate_profile(path, **options)

    return run


def where(result: ValidationResult, severity: str = "error") -> list[str]:
    """``line:col: message`` for each issue of one severity, in order."""
    issues = result.errors if severity == "error" else result.warnings
    return [f"{issue.line}:{issue.col}: {issue.message}" for issue in issues]
