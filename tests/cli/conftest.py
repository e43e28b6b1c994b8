"""CLI test fixtures: a profile workspace on disk and an isolated environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.profile_files import isolated_env, make_workspace


@pytest.fixture(autouse=True)
def _inc_present(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whether Intel Neural Compressor is installed depends on the machine; tests must not.
    monkeypatch.setattr("server.profiles._quant.inc_installed", lambda: True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


@pytest.fixture
def env(workspace: Path) -> dict[str, str]:
    return isolated_env(workspace)
