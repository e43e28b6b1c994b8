"""One path from a profile file to a running stack (``server/api/stack/``): ``turnout serve``, a reload and a Ray
node's build all load the profile through ``StackSource.load``, and a reload reports what it cannot apply.

The manager is a stand-in over fake engines, and vLLM's engine checks are left out (``assembly.prepare_profile``
gives the profile back): what is under test is the path, not the engines.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.api import SourceOptions, StackSource
from server.api.stack import assembly
from server.cluster import build, node_options
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy
from server.profiles import Profile, ValidationResult
from tests.cli.in_process import turnout
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader
from tests.fakes.profile_files import make_workspace, write_profile
from tests.fakes.secrets import secrets_put_back
from tests.fakes.stack_spy import Built, StackSpy

PROFILE = "default_model: tiny\nmodels:\n  tiny:\n    model: models/tiny\n  other:\n    model: ./models/tiny\n"


@pytest.fixture
def profile(tmp_path: Path) -> Iterator[Path]:
    with secrets_put_back():  # each assembly withholds the key variables from os.environ in this process
        yield write_profile(make_workspace(tmp_path), PROFILE)


class LoadSpy:
    """Records the file each ``StackSource.load`` reads, then loads it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str | None] = []
        load = StackSource.load

        def spy(source: StackSource, path: str | None = None, data: bytes | None = None) -> ValidationResult:
            self.paths.append(path or source.options.path)
            return load(source, path, data)

        monkeypatch.setattr(StackSource, "load", spy)


def fake_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The assembly's manager over fake engines, and no vLLM engine checks."""

    def manager(profile: Profile, build_bundle: Any, **_: Any) -> EngineManager[Any]:
        strategy = KeepStrategy(FakeLoader())
        return EngineManager(
            profile.models, strategy, build_fake_serving_bundle, abort_grace=0.1, memory_probe=lambda: 1.0
        )

    monkeypatch.setattr(assembly, "prepare_profile", lambda profile, **_: (profile, None))
    monkeypatch.setattr(assembly, "build_manager", manager)


async def test_serve_a_reload_and_a_ray_node_load_the_profile_through_the_stack_source(
    profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = LoadSpy(monkeypatch)
    StackSpy(monkeypatch, stop=True)
    with pytest.raises(Built):  # turnout serve, stopped once its manager is built (on a socket: no port bound)
        turnout("serve", str(profile), "--uds", str(profile.parent / "turnout.sock"))
    assert loads.paths == [str(profile)]  # once, though the stack was assembled from it afterwards
    with pytest.raises(Built):
        await build.profile_node(node_options(str(profile)))  # what each Ray replica runs
    assert loads.paths == [str(profile)] * 2
    fake_engines(monkeypatch)
    source = StackSource(SourceOptions(path=str(profile)))
    source.assemble()
    await source.reloader().reload(dry_run=True)
    assert loads.paths == [str(profile)] * 4  # the start-up's load, then the reload's


async def test_a_reload_lists_a_changed_switching_key_as_restart_only(
    profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: serve prepared the new profile with the running switching section, so the change went unreported.
    fake_engines(monkeypatch)
    source = StackSource(SourceOptions(path=str(profile)))
    stack = source.assemble()
    reloader = source.reloader()
    await stack.manager.initialize("tiny")
    try:
        profile.write_text(PROFILE + "switching:\n  drain_timeout: 5\n")
        report = await reloader.reload()
        assert report.restart_only == ["switching.drain_timeout"] and report.changed and not report.applied
        assert reloader.profile.switching == stack.profile.switching  # kept as started: it applies at a restart
        without_other = PROFILE.replace("  other:\n    model: ./models/tiny\n", "")
        profile.write_text(without_other + "switching:\n  drain_timeout: 5\n")
        both = await reloader.reload()  # the models change now; the switching section still waits for a restart
        assert both.applied and both.restart_only == ["switching.drain_timeout"]
        assert list(reloader.profile.models) == ["tiny"] and reloader.profile.switching.drain_timeout == 60.0
    finally:
        await stack.manager.shutdown()


async def test_a_ray_node_gets_the_assembled_key_ring(profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a node built its parts without the key ring, and its app made another from the settings.
    fake_engines(monkeypatch)
    profile.write_text(PROFILE + "server:\n  api_key_env: STACK_NODE_KEY\n")
    with secrets_put_back():
        monkeypatch.setenv("STACK_NODE_KEY", "sk-node")
        node = await build.profile_node(node_options(str(profile)))
    assert node.key_ring is not None and node.key_ring.keyed
    assert node.key_ring.match(["sk-node"]).models is None  # the profile's one key, for every model
