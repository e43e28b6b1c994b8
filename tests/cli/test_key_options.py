"""The API key is named on the command line (a variable or a file), never given: a command line is public."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from server.api import read_keys
from server.cli.key_options import cli_api_key
from server.profiles.schema import ModelProfile, Profile, ServerSection
from tests.cli.in_process import turnout


def test_an_api_key_on_the_command_line_is_refused_naming_the_alternatives(tmp_path: Path) -> None:
    # Before: --api-key VALUE was Turnout's own option, the key readable by any local user in ps.
    result = turnout("serve", str(tmp_path / "p.yaml"), "--api-key", "sk-visible-in-ps")
    assert result.returncode == 2, result.stderr
    for alternative in ("--api-key-env NAME", "--api-key-file PATH", "VLLM_API_KEY", "server.api_key_env"):
        assert alternative in result.stderr
    assert "Traceback" not in result.stderr


def _serve_options(monkeypatch: pytest.MonkeyPatch, *args: str, env: dict[str, str] | None = None) -> Any:
    """The options ``turnout serve ARGS`` would run the server with (nothing is loaded or started)."""
    import server.cli.serve as serve_module

    seen: list[Any] = []
    monkeypatch.setattr(serve_module, "refuse_invalid_profile", lambda *_: None)
    monkeypatch.setattr(serve_module, "refuse_taken_port", lambda *_: None)
    monkeypatch.setattr(serve_module, "load_serving_profile", lambda *_: None)
    monkeypatch.setattr(serve_module, "run_server", lambda _profile, options: seen.append(options))
    result = turnout("serve", "p.yaml", *args, env=env)
    assert result.returncode == 0, result.stderr
    return seen[0]


def test_the_key_comes_from_the_named_variable_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = _serve_options(monkeypatch, "--api-key-env", "MY_TURNOUT_KEY", env={"MY_TURNOUT_KEY": "sk-env"})
    assert options.api_key == "sk-env" and options.api_key_env == "MY_TURNOUT_KEY"
    assert "sk-env" not in repr(options)
    key_file = tmp_path / "key"
    key_file.write_text("sk-file\n")
    key_file.chmod(0o600)
    assert _serve_options(monkeypatch, "--api-key-file", str(key_file)).api_key == "sk-file"


def test_a_named_key_that_is_missing_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(click.UsageError, match="the variable NOPE is not set"):
        cli_api_key("NOPE", None, {})
    with pytest.raises(click.UsageError, match="not both"):
        cli_api_key("K", str(tmp_path / "k"), {"K": "v"})
    with pytest.raises(click.UsageError, match="cannot read it"):
        cli_api_key(None, str(tmp_path / "missing"), {})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(click.UsageError, match="is empty"):
        cli_api_key(None, str(tmp_path / "empty"), {})
    assert cli_api_key(None, None, {"VLLM_API_KEY": "x"}) is None


def test_vllm_api_key_is_honoured_after_the_profiles_variable() -> None:
    profile = Profile(path="/p.yaml", default_model="m", models={"m": ModelProfile(model="/m")}, server=ServerSection())
    assert read_keys(profile, {"VLLM_API_KEY": "sk-vllm"}).api_key == "sk-vllm"
    assert read_keys(profile, {"VLLM_API_KEY": "sk-vllm", "TURNOUT_API_KEY": "sk-t"}).api_key == "sk-t"
    assert read_keys(profile, {"VLLM_API_KEY": "sk-vllm"}, "sk-cli").api_key == "sk-cli"
    assert read_keys(profile, {}).api_key is None
