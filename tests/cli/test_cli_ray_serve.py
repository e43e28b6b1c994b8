"""``turnout ray-serve``: registered, and a bad profile stops it before any Ray cluster starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from server.cli.main import main
from tests.fakes.profile_files import write_profile

ray = pytest.importorskip("ray")


def test_ray_serve_is_a_command_with_its_options() -> None:
    result = CliRunner().invoke(main, ["ray-serve", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--replicas", "--address", "--num-gpus", "--max-ongoing-requests", "--dev"):
        assert option in result.output


def test_a_profile_with_errors_exits_1_before_ray_starts(workspace: Path, env: dict[str, str]) -> None:
    profile = write_profile(workspace, "default_model: missing\nmodels: {}\n")
    result = CliRunner(env=env).invoke(main, ["ray-serve", str(profile), "--replicas", "2"])
    assert result.exit_code == 1, result.output
    assert "error" in result.output
    assert not ray.is_initialized()


def test_an_unset_scoped_key_variable_exits_1_before_ray_starts(workspace: Path, env: dict[str, str]) -> None:
    text = "models:\n  tiny:\n    model: models/tiny\n"
    text += "server:\n  api_keys:\n    - {key_env: RAY_UNSET_KEY, models: [tiny]}\n"
    profile = write_profile(workspace, text)
    result = CliRunner(env={**env, "RAY_UNSET_KEY": ""}).invoke(main, ["ray-serve", str(profile)])
    assert result.exit_code == 1, result.output
    assert "server.api_keys[0].key_env: the environment variable RAY_UNSET_KEY is not set" in result.output
    assert not ray.is_initialized()
