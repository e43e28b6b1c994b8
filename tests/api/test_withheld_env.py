"""A server's secrets leave ``os.environ`` once read, so that the processes it spawns cannot inherit them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.api import secret_env, withhold_secrets
from server.api.withheld_env import secret_names
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
    from server.api.key_ring import KeySet
    from tests.api.served_profile import serve_profile

    text = "models:\n  tools:\n    model: models/tiny\nswitching:\n  strategy: keep\n"
    served = await serve_profile(tmp_path, text)
    try:
        with secrets_put_back():
            monkeypatch.setenv("W_NEW_TEAM", "team-key")
            ring = KeyRing(KeySet())
            reloader = Reloader(served.manager, served.reloader.profile, served.reloader._validate, key_ring=ring)
            served.write(text + "server:\n  api_keys:\n    - {key_env: W_NEW_TEAM, models: [tools]}\n")
            report = await reloader.reload()
            assert report.keys_changed and ring.match(["team-key"]).models == frozenset({"tools"})
            assert "W_NEW_TEAM" not in os.environ and secret_env()["W_NEW_TEAM"] == "team-key"
            assert not (await reloader.reload()).keys_changed  # read again from the withheld store: unchanged
    finally:
        await served.close()
