"""A Ray node assembles its serving stack as ``turnout serve`` does, with the options ``turnout ray-serve`` gave:
its bundles get the command line's frontend defaults, not a bare ``FrontendSettings()`` (issue 42)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.api import StackOptions
from server.cluster import build, node_options
from server.frontend import FrontendSettings
from server.profiles import ProfileInvalid
from tests.fakes.profile_files import make_workspace, write_profile
from tests.fakes.secrets import secrets_put_back
from tests.fakes.stack_spy import StackSpy

#: ``tiny`` sets its own template; ``auto`` wants tool calls and leaves the parser to the command line.
PROFILE = """\
default_model: tiny
models:
  tiny:
    model: models/tiny
    chat_template: templates/tools.jinja
  auto:
    model: ./models/tiny
    enable_auto_tool_choice: true
"""
STACK = StackOptions(
    engine_defaults={"max_model_len": 64},
    frontend_defaults={"tool_call_parser": "hermes", "chat_template": "/cli.jinja", "response_role": "bot"},
    admission_timeout=7.0,
)


@pytest.fixture
def profile(tmp_path: Path) -> Iterator[str]:
    with secrets_put_back():  # a node's edge withholds the key variables from os.environ in this process
        yield str(write_profile(make_workspace(tmp_path), PROFILE))


async def test_a_node_builds_every_bundle_with_the_command_lines_defaults(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = StackSpy(monkeypatch)
    node = await build.profile_node(node_options(profile, host="127.0.0.1", stack=STACK))
    [built] = spy.builds  # through the one assembly
    auto = await built.frontend("auto")
    # Before: FrontendSettings() whatever the options (no template, no parser, role "assistant").
    assert (auto.chat_template, auto.tool_call_parser, auto.response_role) == ("/cli.jinja", "hermes", "bot")
    assert (await built.frontend("tiny")).chat_template == str(Path(profile).parent / "templates" / "tools.jinja")
    assert built.engine_defaults == {"max_model_len": 64} and built.kwargs["admission_timeout"] == 7.0
    assert node.edge.settings.allowed_hosts is not None  # the edge from the same options, as before


async def test_a_node_validates_the_profile_with_the_command_lines_tool_parser(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # auto tool choice without a parser is an error unless the command line gives the default parser, as under
    # `turnout serve --tool-call-parser`; before, a node refused the profile that `turnout ray-serve` accepted.
    StackSpy(monkeypatch)
    with pytest.raises(ProfileInvalid, match="tool"):
        await build.profile_node(node_options(profile))
    await build.profile_node(node_options(profile, stack=STACK))


async def test_a_node_without_options_keeps_the_frontend_defaults(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Ray Serve config file without `stack`: what a node built before.
    spy = StackSpy(monkeypatch)
    plain = write_profile(Path(profile).parent, PROFILE.replace("    enable_auto_tool_choice: true\n", ""), "p.yaml")
    await build.profile_node(node_options(str(plain)))
    [built] = spy.builds
    assert await built.frontend("auto") == FrontendSettings()
    assert built.engine_defaults == {} and built.kwargs["admission_timeout"] is None
