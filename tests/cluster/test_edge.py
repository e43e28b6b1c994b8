"""The nodes and the ingress of a Ray Serve application are built from one edge, by the same settings builder
``turnout serve`` uses: a setting read from the profile reaches all of them, or none."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.api import secret_env
from server.api.edge.checks import LOOPBACK_HOSTS
from server.api.settings import ScopedKey
from server.api.stack import assembly
from server.api.stack.serving_settings import ServingFlags, api_settings
from server.cluster import build, node_options
from server.cluster.edge import profile_edge
from server.profiles import load_profile
from tests.fakes.profile_files import make_workspace, write_profile
from tests.fakes.secrets import secrets_put_back

PROFILE = """\
default_model: tiny
models:
  tiny:
    model: models/tiny
    served_model_name: [tiny, small]
  other:
    model: ./models/tiny
server:
  admin_token_env: EDGE_ADMIN
  api_key_env: EDGE_KEY
  api_keys:
    - key_env: EDGE_SMALL_KEY
      models: [small]
"""
ENV = {"EDGE_ADMIN": "admin-secret", "EDGE_KEY": "full-secret", "EDGE_SMALL_KEY": "small-secret"}


@pytest.fixture
def profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with secrets_put_back():  # a node's edge withholds the key variables from os.environ in this process
        for name, value in ENV.items():
            monkeypatch.setenv(name, value)
        yield str(write_profile(make_workspace(tmp_path), PROFILE))


async def test_the_edge_reads_every_key_as_turnout_serve_does(profile: str) -> None:
    parts = await profile_edge({"profile": profile, "dev": True})
    settings = parts.settings
    assert (settings.admin_token, settings.api_key, settings.dev_mode) == ("admin-secret", "full-secret", True)
    assert settings.scoped_keys == (ScopedKey(key="small-secret", models=frozenset({"tiny"})),)
    # `turnout serve --dev` assembles the same settings from the same profile.
    assert settings == api_settings(load_profile(profile), ServingFlags(dev=True), secret_env())
    assert (list(parts.models), parts.default_model) == (["tiny", "other"], "tiny")


async def test_a_node_and_the_ingress_get_the_same_edge(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def spy(*args: Any) -> Any:
        calls.append(args[0].path)
        return api_settings(*args)

    monkeypatch.setattr(assembly, "api_settings", spy)
    # The node's engines are not the point here: its manager is a stand-in, its edge the real one.
    monkeypatch.setattr(assembly, "prepare_profile", lambda loaded, **_: (loaded, None))
    monkeypatch.setattr(assembly, "build_manager", lambda *args, **kwargs: "manager")
    options = {"profile": profile, "dev": False}
    node = await build.profile_node(options)
    ingress = await profile_edge(options)
    assert node.edge == ingress
    assert node.edge.settings.scoped_keys and node.edge.settings.admin_token == "admin-secret"
    assert len(calls) == 2  # each through the one builder


async def test_the_edge_defaults_its_hosts_by_the_ingress_bind_address(profile: str) -> None:
    # Issue 39: the nodes allowed any Host; a loopback-bound cluster now answers loopback names only, everywhere.
    loopback = await profile_edge(node_options(profile, host="127.0.0.1"))
    assert loopback.settings.allowed_hosts == LOOPBACK_HOSTS
    assert (await profile_edge(node_options(profile, host="0.0.0.0"))).settings.allowed_hosts is None
    assert (await profile_edge(node_options(profile))).settings.allowed_hosts is None  # a config file without it


async def test_metrics_public_reaches_the_settings(profile: str, tmp_path: Path) -> None:
    assert (await profile_edge({"profile": profile})).settings.metrics_public is False
    public = Path(profile).with_name("public.yaml")
    public.write_text(Path(profile).read_text() + "  metrics_public: true\n")
    assert (await profile_edge({"profile": str(public)})).settings.metrics_public is True


async def test_a_node_takes_the_keys_out_of_the_environment_its_engines_inherit(profile: str) -> None:
    # Before: the node read them from os.environ and left them there, so every engine process it spawned (vLLM
    # copies os.environ into the engine core and its workers) had the admin token and every key.
    parts = await profile_edge({"profile": profile, "dev": False})
    assert parts.settings.admin_token == "admin-secret" and parts.settings.api_key == "full-secret"
    assert not set(ENV) & set(os.environ)
    assert {name: secret_env()[name] for name in ENV} == ENV  # what a reload reads them from
    again = await profile_edge({"profile": profile, "dev": False})  # another edge in the same process
    assert again == parts
