"""``turnout ray-serve`` starts its local Ray cluster with Ray's token authentication on, its token private."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from server.cli.main import main
from server.cli.ray_auth import AUTH_MODE_ENV, RayAuth, local_ray_auth, private_token_file
from tests.fakes.profile_files import write_profile


def test_token_auth_is_asked_for_wherever_ray_has_it() -> None:
    assert local_ray_auth("2.60.0", {}) == RayAuth(env={AUTH_MODE_ENV: "token"})
    assert local_ray_auth("2.52.0", {AUTH_MODE_ENV: "token"}) == RayAuth(env={AUTH_MODE_ENV: "token"})
    older = local_ray_auth("2.51.1", {})
    assert older.env == {} and older.warning is not None and "2.52.0" in older.warning
    kept = local_ray_auth("2.60.0", {AUTH_MODE_ENV: "disabled"})
    assert kept.env == {} and kept.warning is not None and "RAY_AUTH_MODE=disabled" in kept.warning


def test_the_token_file_is_created_private_and_never_replaced(tmp_path: Path) -> None:
    token = tmp_path / "home" / ".ray" / "auth_token"
    assert private_token_file({}, token) == token
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    first = token.read_text()
    assert len(first) == 64 and int(first, 16) >= 0
    assert private_token_file({}, token) is None and token.read_text() == first
    other = tmp_path / "other" / "auth_token"
    assert private_token_file({"RAY_AUTH_TOKEN": "given"}, other) is None and not other.exists()


class _Started(Exception):
    """Stands in for the cluster start: the test stops there."""


def test_ray_serve_starts_its_local_cluster_with_token_auth(
    tmp_path: Path, workspace: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: ray.init was called with whatever RAY_AUTH_MODE the shell had (none: Ray < 2.60 left it off).
    ray = pytest.importorskip("ray")
    seen: dict[str, str | None] = {}

    def init(**_: object) -> None:
        seen["mode"] = os.environ.get(AUTH_MODE_ENV)
        raise _Started

    monkeypatch.setattr(ray, "init", init)
    # The command sets RAY_AUTH_MODE in this process: setenv first, so that the test puts back its absence (a
    # leaked `token` made a later real ray.init in this worker start a GCS its driver could not authenticate to).
    monkeypatch.setenv(AUTH_MODE_ENV, "unset-by-the-test")
    monkeypatch.delenv(AUTH_MODE_ENV)
    home = tmp_path / "home"
    home.mkdir()
    profile = write_profile(workspace, "models:\n  tiny:\n    model: models/tiny\n")
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner(env={**env, "HOME": str(home)}).invoke(main, ["ray-serve", str(profile)])
    assert isinstance(result.exception, _Started), result.output
    assert seen["mode"] == "token"
    assert stat.S_IMODE((home / ".ray" / "auth_token").stat().st_mode) == 0o600
