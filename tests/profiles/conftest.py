"""Profile test fixtures: a workspace with real support files, an isolated env, a fake parser registry, and
vLLM's engine-arg fields as recorded (so these tests pass without vLLM; ``test_without_vllm.py`` holds that)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server.profiles import ValidationResult, validate_profile
from tests.fakes.engine_args import RECORDED_ENGINE_ARG_FIELDS
from tests.fakes.parsers import FakeParserRegistry
from tests.fakes.profile_files import isolated_env, make_workspace, write_profile

Check = Callable[..., ValidationResult]


@pytest.fixture(autouse=True)
def _inc_present(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whether Intel Neural Compressor is installed depends on the machine; tests must not. Tests that
    # check the "INC missing" warning patch it back.
    monkeypatch.setattr("server.profiles.quant_checks.inc_installed", lambda: True)


@pytest.fixture(autouse=True)
def _recorded_engine_args(monkeypatch: pytest.MonkeyPatch) -> None:
    # Validation reads AsyncEngineArgs' fields from the installed vLLM's source; the tests use a recording of
    # them instead, so they neither need vLLM nor change when it does. Tests of the "no vLLM" path patch it again.
    monkeypatch.setattr("server.profiles.loader.engine_arg_fields", lambda: RECORDED_ENGINE_ARG_FIELDS)


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
