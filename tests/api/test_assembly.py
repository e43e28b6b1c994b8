"""The one assembly of the serving stack: the command line's options reach the engine checks, the manager and
every model's bundle, and a model's own profile keys win over them."""

from __future__ import annotations

import os
import pickle

import pytest

from server.api import ServingFlags, StackOptions, assemble_stack
from server.frontend import FrontendSettings
from server.profiles.schema import ModelProfile, Profile, ServerSection
from tests.fakes.secrets import secrets_put_back
from tests.fakes.stack_spy import StackSpy

PROFILE = Profile(
    path="/p.yaml",
    default_model="own",
    models={
        "own": ModelProfile(model="/m/own", chat_template="/own.jinja", preload=True),
        "plain": ModelProfile(model="/m/plain", preload=True),
    },
    server=ServerSection(admin_token_env="ASSEMBLY_ADMIN"),
)
OPTIONS = StackOptions(
    engine_defaults={"enable_log_requests": True, "max_model_len": 64},
    frontend_defaults={
        "chat_template": "/cli.jinja",
        "tool_call_parser": "hermes",
        "enable_auto_tool_choice": True,
        "response_role": "bot",
    },
    admission_timeout=7.0,
    no_preload=True,
)


async def test_the_options_reach_the_manager_and_every_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = StackSpy(monkeypatch)
    prepared: list[bool] = []
    monkeypatch.setenv("ASSEMBLY_ADMIN", "admin-secret")
    with secrets_put_back():
        stack = assemble_stack(
            PROFILE,
            OPTIONS,
            ServingFlags(dev=True),
            # Before the manager (and any engine process) exists, the secrets are out of os.environ.
            on_prepared=lambda served, plan: prepared.append("ASSEMBLY_ADMIN" in os.environ),
        )
    assert prepared == [False]
    assert (stack.settings.admin_token, stack.settings.dev_mode) == ("admin-secret", True)
    [built] = spy.builds
    assert built.engine_defaults == OPTIONS.engine_defaults
    assert built.kwargs["admission_timeout"] == 7.0
    assert [model.preload for model in built.profile.models.values()] == [False, False]  # --no-preload
    plain = await built.frontend("plain")
    assert plain == stack.frontend == OPTIONS.frontend_settings()
    assert (plain.chat_template, plain.tool_call_parser) == ("/cli.jinja", "hermes") and plain.enable_auto_tool_choice
    assert (plain.response_role, plain.log_requests) == ("bot", True)  # logged as the engines log them
    own = await built.frontend("own")
    assert own.chat_template == "/own.jinja" and own.tool_call_parser == "hermes"  # the profile's key wins


def test_no_options_are_the_frontend_defaults() -> None:
    assert StackOptions().frontend_settings() == FrontendSettings()


def test_the_options_travel_to_a_ray_replica_as_they_are() -> None:
    # Ray pickles a deployment's options to its replicas (`server.cluster.node_options`).
    assert pickle.loads(pickle.dumps(OPTIONS)) == OPTIONS
