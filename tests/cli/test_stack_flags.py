"""``turnout serve`` and ``turnout ray-serve`` take the options that shape the serving stack alike, and both
assemble the stack through the one assembly: the same flags give ``turnout serve``'s manager and a Ray node's
the same bundle defaults, engine defaults and admission timeout (issue 42: a node built bare ``FrontendSettings()``).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.cluster import build
from tests.cli.in_process import turnout
from tests.fakes.profile_files import write_profile
from tests.fakes.secrets import secrets_put_back
from tests.fakes.stack_spy import Built, StackSpy

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

#: ``auto`` wants tool calls and leaves the parser and the template to the command line.
PROFILE = """\
default_model: tiny
models:
  tiny:
    model: models/tiny
  auto:
    model: ./models/tiny
    enable_auto_tool_choice: true
"""


@pytest.fixture
def profile(workspace: Path) -> Iterator[Path]:
    with secrets_put_back():  # each assembly withholds the key variables from os.environ in this process
        yield write_profile(workspace, PROFILE)


def _ray_serve_node_options(monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    """The options ``turnout ray-serve ARGS`` hands its nodes (no Ray cluster is started)."""
    import server.cli.ray_ingress as ray_ingress_module
    import server.cli.ray_serve as ray_serve_module
    from server.cluster import application

    built: dict[str, Any] = {}
    for module, name in ((ray, "init"), (ray, "shutdown"), (serve, "start"), (serve, "run"), (serve, "shutdown")):
        monkeypatch.setattr(module, name, lambda *_, **__: None)
    monkeypatch.setattr(ray_serve_module, "_token_auth", lambda _: None)
    monkeypatch.setattr(ray_serve_module, "listener_or_exit", lambda *_: socket.socket())  # closed by the command
    monkeypatch.setattr(ray_ingress_module, "run_ingress", lambda *_: None)
    monkeypatch.setattr(application, "node_application", lambda **kwargs: built.update(kwargs))
    result = turnout("ray-serve", *args)
    assert result.returncode == 0, result.stderr
    options: dict[str, Any] = built["options"]
    return options


async def test_serve_and_a_ray_node_assemble_the_same_stack_from_the_same_flags(
    profile: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = str(workspace / "templates" / "tools.jinja")
    flags = ["--chat-template", template, "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]
    flags += ["--enable-auto-tool-choice", "--admission-timeout", "7"]
    spy = StackSpy(monkeypatch, stop=True)
    with pytest.raises(Built):  # turnout serve, stopped once its manager is built (on a socket: no port bound)
        turnout("serve", str(profile), *flags, "--uds", str(workspace / "turnout.sock"))
    options = _ray_serve_node_options(monkeypatch, str(profile), *flags)
    with pytest.raises(Built):
        await build.profile_node(options)  # what each replica runs
    served, node = spy.builds  # both through the one assembly
    for model in ("tiny", "auto"):
        assert await node.frontend(model) == await served.frontend(model)
    auto = await node.frontend("auto")
    assert (auto.chat_template, auto.tool_call_parser, auto.reasoning_parser) == (template, "hermes", "qwen3")
    assert node.engine_defaults == served.engine_defaults == {"reasoning_parser": "qwen3"}
    assert node.kwargs["admission_timeout"] == served.kwargs["admission_timeout"] == 7.0


def test_ray_serve_hands_a_relative_chat_template_to_its_nodes_as_an_absolute_path(
    profile: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace)  # a replica runs in another folder
    parser = ("--tool-call-parser", "hermes")  # the profile's auto tool choice needs one
    options = _ray_serve_node_options(monkeypatch, str(profile), "--chat-template", "templates/tools.jinja", *parser)
    assert options["stack"].frontend_defaults["chat_template"] == str(workspace / "templates" / "tools.jinja")
    named = _ray_serve_node_options(monkeypatch, str(profile), "--chat-template", "chatml", *parser)
    assert named["stack"].frontend_defaults["chat_template"] == "chatml"  # not a file here: left as given


def test_ray_serve_refuses_auto_tool_choice_without_a_parser_as_serve_does(profile: Path) -> None:
    refused = turnout("ray-serve", str(profile))
    assert refused.returncode == 1 and "enable_auto_tool_choice is true but no tool_call_parser" in refused.stderr


def test_ray_serve_takes_the_stack_options_of_serve() -> None:
    help_text = turnout("ray-serve", "--help").stdout
    for option in ("--chat-template", "--tool-call-parser", "--enable-auto-tool-choice", "--reasoning-parser"):
        assert option in help_text
    assert "--admission-timeout" in help_text and "--no-preload" in help_text
