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


class _Stop(Exception):
    pass


def test_a_local_cluster_gets_the_secrets_as_file_paths_never_their_values(
    workspace: Path, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Ray's processes start with: ``ray.init``'s runtime environment, and the driver's ``os.environ`` then."""
    import os

    from server.cli import ray_serve
    from tests.fakes.secrets import secrets_put_back

    text = "models:\n  tiny:\n    model: models/tiny\n"
    text += "server:\n  api_keys:\n    - {key_env: RAY_TEAM_KEY, models: [tiny]}\n"
    profile = write_profile(workspace, text)
    key_file = tmp_path / "team"
    key_file.write_text("team-secret\n")
    seen: dict[str, object] = {}

    def fake_init(**kwargs: object) -> None:
        seen.update(kwargs, environ=dict(os.environ))
        raise _Stop

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray_serve, "_token_auth", lambda version: None)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for name, value in {**env, "TURNOUT_ADMIN_TOKEN": "admin-secret", "RAY_TEAM_KEY_FILE": str(key_file)}.items():
        monkeypatch.setenv(name, value)
    with secrets_put_back():
        result = CliRunner().invoke(main, ["ray-serve", str(profile)])
        assert isinstance(result.exception, _Stop), result.output
        files = seen["runtime_env"]["env_vars"]  # type: ignore[index]
        assert set(files) == {"TURNOUT_ADMIN_TOKEN_FILE", "RAY_TEAM_KEY_FILE"}
        assert Path(files["RAY_TEAM_KEY_FILE"]).read_text() == "team-secret"
        assert Path(files["TURNOUT_ADMIN_TOKEN_FILE"]).parent.parent == tmp_path / "state" / "turnout"
        environ = seen["environ"]
        assert "admin-secret" not in str(environ) and "team-secret" not in str(environ)
        assert "TURNOUT_ADMIN_TOKEN" not in environ and "RAY_TEAM_KEY_FILE" not in environ  # type: ignore[operator]
