"""A server's secrets leave ``os.environ`` once read, so that the processes it spawns cannot inherit them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from server.api import SecretSourceInvalid, check_secret_sources, secret_env, secrets_as_files, withhold_secrets
from server.api.edge.withheld_env import read_secret_file, secret_names
from server.profiles.schema import ApiKeyScope, ModelProfile, Profile, ServerSection
from tests.fakes.secrets import secrets_put_back

SERVER = ServerSection(
    admin_token_env="W_ADMIN",
    api_key_env="W_KEY",
    metrics_token_env="W_METRICS",
    api_keys=[ApiKeyScope(key_env="W_TEAM", models=["m"])],
)
PROFILE = Profile(path="/p.yaml", default_model="m", models={"m": ModelProfile(model="/m")}, server=SERVER)
SECRETS = {name: f"value-of-{name}" for name in ("W_ADMIN", "W_KEY", "W_METRICS", "W_TEAM", "VLLM_API_KEY", "W_CLI")}


def test_every_secret_variable_is_named() -> None:
    assert secret_names(PROFILE, ["W_CLI", None]) == set(SECRETS)


def test_withheld_secrets_reach_no_child_and_stay_readable(monkeypatch: pytest.MonkeyPatch) -> None:
    with secrets_put_back():
        for name, value in SECRETS.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("W_PLAIN", "kept")
        assert withhold_secrets(PROFILE, ["W_CLI"]) == set(SECRETS)
        assert not set(SECRETS) & set(os.environ)
        assert {name: secret_env()[name] for name in SECRETS} == SECRETS
        assert secret_env()["W_PLAIN"] == "kept"
        # A child started now (as vLLM spawns its engine core: a copy of the current environment) has none.
        shown = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(k for k in os.environ if k.startswith(('W_', 'VLLM_A'))))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert shown.strip() == "['W_PLAIN']"


async def test_a_reload_reads_a_new_key_variable_then_withholds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's own reloader (no ``env`` given) reads keys from the withheld store and os.environ, and a
    variable a reloaded profile names for the first time leaves os.environ too."""
    from server.api import KeyRing, Reloader
    from server.api.edge.key_ring import KeySet
    from tests.api.served_profile import serve_profile

    text = "models:\n  tools:\n    model: models/tiny\nswitching:\n  strategy: keep\n"
    served = await serve_profile(tmp_path, text)
    try:
        with secrets_put_back():
            monkeypatch.setenv("W_NEW_TEAM", "team-key")
            ring = KeyRing(KeySet())
            reloader = Reloader(served.manager, served.reloader.profile, served.reloader._source, key_ring=ring)
            served.write(text + "server:\n  api_keys:\n    - {key_env: W_NEW_TEAM, models: [tools]}\n")
            report = await reloader.reload()
            assert report.keys_changed and ring.match(["team-key"]).models == frozenset({"tools"})
            assert "W_NEW_TEAM" not in os.environ and secret_env()["W_NEW_TEAM"] == "team-key"
            assert not (await reloader.reload()).keys_changed  # read again from the withheld store: unchanged
    finally:
        await served.close()


# -- secrets from files (VAR_FILE) ------------------------------------------------------------------------------


def _secret_file(folder: Path, name: str, text: str, mode: int = 0o600) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_secret_is_read_from_the_file_its_file_variable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("W_KEY", raising=False)
    monkeypatch.setenv("W_KEY_FILE", str(_secret_file(tmp_path, "key", "from-file\n")))
    assert secret_env()["W_KEY"] == "from-file"  # one trailing newline stripped
    assert secret_env().get("W_UNSET") is None and "W_KEY" in secret_env()
    assert read_secret_file(_secret_file(tmp_path, "two", " a b\r\n\n")) == " a b\r\n"  # only one newline goes
    assert read_secret_file(_secret_file(tmp_path, "crlf", "k\r\n")) == "k"


def test_a_secret_given_both_ways_is_refused_naming_both_never_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("W_ADMIN", "the-plain-value")
    monkeypatch.setenv("W_ADMIN_FILE", str(_secret_file(tmp_path, "admin", "the-file-value")))
    with secrets_put_back():
        with pytest.raises(SecretSourceInvalid) as refused:
            withhold_secrets(PROFILE)
        assert os.environ["W_ADMIN"] == "the-plain-value"  # nothing moved
    message = str(refused.value)
    assert "W_ADMIN and W_ADMIN_FILE" in message
    assert "the-plain-value" not in message and "the-file-value" not in message


def test_an_unreadable_secret_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TEAM_FILE", str(tmp_path / "missing"))
    with pytest.raises(SecretSourceInvalid, match=r"W_TEAM_FILE: cannot read the file .*missing"):
        check_secret_sources(secret_names(PROFILE))


def test_a_secret_file_others_may_read_is_warned_of_without_its_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = _secret_file(tmp_path, "metrics", "metrics-secret", mode=0o644)
    monkeypatch.setenv("W_METRICS_FILE", str(path))
    check_secret_sources(["W_METRICS"])
    check_secret_sources(["W_METRICS"])
    warnings = [record.getMessage() for record in caplog.records if "W_METRICS_FILE" in record.getMessage()]
    assert len(warnings) == 1 and "chmod 600" in warnings[0] and "metrics-secret" not in warnings[0]


def test_secrets_handed_over_as_files_leave_only_paths_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``turnout ray-serve`` does before ``ray.init``: its local cluster's processes inherit this environment."""
    from server.engine import StateDir

    folder = StateDir(tmp_path / "run")
    with secrets_put_back():
        for name, value in SECRETS.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("W_KEY")
        monkeypatch.setenv("W_KEY_FILE", str(_secret_file(tmp_path, "key", SECRETS["W_KEY"] + "\n")))
        files = secrets_as_files(PROFILE, folder, ["W_CLI"])

        assert set(files) == {f"{name}_FILE" for name in SECRETS}
        for name, value in SECRETS.items():
            path = Path(files[f"{name}_FILE"])
            assert path.parent == folder.root and stat.S_IMODE(path.stat().st_mode) == 0o600
            assert read_secret_file(path) == value
            assert secret_env()[name] == value  # this process still reads them
        assert not {*SECRETS, *files} & set(os.environ)
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(open(f'/proc/{os.getpid()}/environ').read())"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **files},  # as Ray's runtime environment adds them
        ).stdout
        assert not [value for value in SECRETS.values() if value in child]
        assert files["W_ADMIN_FILE"] in child
