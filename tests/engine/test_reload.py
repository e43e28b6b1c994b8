"""The manager's live model replacement (``turnout reload``), on fake engines: build aside, swap in, or keep."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from server.engine import EngineManager, ModelNotFound, ReloadFailed, ReloadRefused, SlotState
from server.engine.strategies import KeepStrategy, StopStrategy
from server.profiles.schema import ModelProfile, Switching
from tests.fakes.engines import FakeEngine, FakeLoader, InjectedFailure, fake_models
from tests.fakes.manager_views import admitted, state_of
from tests.waiting import until


@dataclass(frozen=True)
class TemplateBundle:
    """A bundle that remembers the chat template it was built with."""

    name: str
    template: str | None
    engine: FakeEngine


@dataclass
class TemplateBuilder:
    fail_for: set[str] = field(default_factory=set)
    built: list[tuple[str, str | None]] = field(default_factory=list)
    delay_s: float = 0.0

    async def __call__(self, name: str, profile: ModelProfile, engine: FakeEngine) -> TemplateBundle:
        await asyncio.sleep(self.delay_s)
        if name in self.fail_for:
            raise InjectedFailure(f"injected bundle failure for {name}")
        self.built.append((name, profile.chat_template))
        return TemplateBundle(name, profile.chat_template, engine)


def _with(models: dict[str, ModelProfile], name: str, **changes: Any) -> dict[str, ModelProfile]:
    return {**models, name: msgspec.structs.replace(models[name], **changes)}


async def _manager(strategy: str = "keep") -> tuple[EngineManager[Any], FakeLoader, TemplateBuilder]:
    loader, builder = FakeLoader(), TemplateBuilder()
    chosen = KeepStrategy(loader) if strategy == "keep" else StopStrategy(loader)
    manager: EngineManager[Any] = EngineManager(
        fake_models("a", "b"), chosen, builder, abort_grace=0.1, memory_probe=lambda: 1.0
    )
    await manager.initialize("a")
    return manager, loader, builder


async def test_a_frontend_change_republishes_while_requests_in_flight_keep_the_old_bundle() -> None:
    manager, loader, _ = await _manager()
    async with admitted(manager, "a") as old_lease:
        result = await manager.replace_models(
            _with(dict(manager.models), "a", chat_template="/t/new.jinja"), new_frontend=["a"]
        )
        assert result.republished and result.unloaded == []
        assert old_lease.bundle.template is None  # the request in flight finishes on the bundle it started with
        async with admitted(manager, "a") as new_lease:
            assert new_lease.bundle.template == "/t/new.jinja"
            assert new_lease.bundle.engine is old_lease.bundle.engine  # same engine: no reload of the weights
    assert loader.loads == ["a"]
    await manager.shutdown()


async def test_removing_the_active_model_is_refused_and_changes_nothing() -> None:
    manager, _, builder = await _manager()
    before = manager.published
    with pytest.raises(ReloadRefused, match="active model 'a'"):
        await manager.replace_models({"b": ModelProfile(model="/models/b2")}, new_engine=["b"])
    assert list(manager.models) == ["a", "b"] and manager.models["b"].model == "/models/b"
    assert manager.published is before and builder.built == [("a", None)]
    await manager.shutdown()


async def test_a_failed_bundle_build_changes_nothing() -> None:
    manager, _, builder = await _manager()
    before = manager.published
    builder.fail_for.add("a")
    new = _with(dict(manager.models), "a", chat_template="/t/broken.jinja")
    with pytest.raises(ReloadFailed, match="injected bundle failure"):
        await manager.replace_models({**new, "c": ModelProfile(model="/models/c")}, new_frontend=["a"])
    assert manager.published is before and list(manager.models) == ["a", "b"]
    assert manager.models["a"].chat_template is None
    await manager.shutdown()


async def test_a_reload_during_a_switch_applies_when_the_switch_ends() -> None:
    manager, loader, _ = await _manager()
    loader.delay_s = 0.2
    switching = asyncio.create_task(manager.switch("b"))
    await until(lambda: manager.switching_to == "b", what="the switch to b to start")
    added = {**manager.models, "c": ModelProfile(model="/models/c")}
    replaced = await manager.replace_models(added, wait_timeout=5.0)
    assert switching.done(), "the reload waited for the switch under way"
    assert manager.active_model == "b" and list(manager.models) == ["a", "b", "c"] and not replaced.republished
    await manager.shutdown()


async def test_a_reload_that_finds_no_switch_free_moment_is_refused_and_changes_nothing() -> None:
    manager, loader, _ = await _manager()
    loader.delay_s = 0.5
    switching = asyncio.create_task(manager.switch("b"))
    await until(lambda: manager.switching_to == "b", what="the switch to b to start")
    with pytest.raises(ReloadRefused, match=r"switch to .b. did not end within 0\.1 s"):
        await manager.replace_models({**manager.models, "c": ModelProfile(model="/models/c")}, wait_timeout=0.1)
    assert list(manager.models) == ["a", "b"]
    await switching
    await manager.shutdown()


async def test_no_switch_starts_while_a_reload_builds_the_new_frontend() -> None:
    manager, _, builder = await _manager()
    builder.delay_s = 0.2
    models = dict(manager.models)
    models["a"] = msgspec.structs.replace(models["a"], chat_template="new")
    reloading = asyncio.create_task(manager.replace_models(models, new_frontend=["a"]))
    await asyncio.sleep(0.05)
    report = await manager.switch("b")  # waits for the reload to let go of the device
    assert reloading.done() and report.previous_model == "a" and manager.active_model == "b"
    await manager.shutdown()


async def test_models_are_added_and_removed_and_a_removed_parked_engine_is_released() -> None:
    manager, loader, _ = await _manager()
    await manager.switch("b")
    await manager.switch("a")  # b is resident now (keep)
    assert state_of(manager, "b") is SlotState.RESIDENT
    result = await manager.replace_models({"a": manager.models["a"], "c": ModelProfile(model="/models/c")})
    assert result.unloaded == ["b"] and loader.unloads == ["b"]
    assert list(manager.models) == ["a", "c"] and state_of(manager, "c") is SlotState.STOPPED
    report = await manager.switch("c")
    assert report.current_model == "c"
    await manager.shutdown()


async def test_engine_changes_apply_at_the_next_load_even_under_keep() -> None:
    manager, loader, _ = await _manager()
    await manager.switch("b")
    await manager.switch("a")
    models = _with(_with(dict(manager.models), "a", engine_args={"max_model_len": 64}), "b", engine_args={"x": 1})
    result = await manager.replace_models(models, new_engine=["a", "b"])
    # b was parked with the old settings: released now; a is active: it keeps serving until a switch leaves it.
    assert result.unloaded == ["b"] and result.engine_pending == ["a"]
    assert manager.active_model == "a" and loader.unloads == ["b"]
    await manager.switch("b")
    assert loader.unloads == ["b", "a"] and state_of(manager, "a") is SlotState.STOPPED
    await manager.switch("a")
    assert loader.loads == ["a", "b", "b", "a"]  # both were loaded again, with the new settings
    await manager.shutdown()


async def test_a_frontend_change_of_a_parked_model_builds_its_bundle_at_the_next_activation() -> None:
    manager, _, builder = await _manager()
    await manager.switch("b")
    await manager.switch("a")
    await manager.replace_models(_with(dict(manager.models), "b", chat_template="/t/b.jinja"), new_frontend=["b"])
    await manager.switch("b")
    async with admitted(manager, "b") as lease:
        assert lease.bundle.template == "/t/b.jinja"
    assert builder.built[-1] == ("b", "/t/b.jinja")
    await manager.shutdown()


async def test_the_switch_history_keeps_outcomes_and_is_bounded() -> None:
    manager, loader, _ = await _manager(strategy="stop")
    loader.fail_load.add("b")
    with pytest.raises(Exception, match="injected load failure"):
        await manager.switch("b")
    history = manager.snapshot().recent_switches
    assert [(h.source, h.target, h.outcome, h.restored) for h in history] == [
        (None, "a", "ok", None),
        ("a", "b", "failed", "a"),
    ]
    assert history[1].error is not None and "injected load failure" in history[1].error
    assert all(h.duration_ms >= 0 and h.started_at > 0 for h in history)
    for _ in range(15):
        await manager.switch("b")
        await manager.switch("a")
    assert len(manager.snapshot().recent_switches) == 20
    await manager.shutdown()


async def test_auto_mode_queues_follow_added_and_removed_models() -> None:
    loader, builder = FakeLoader(), TemplateBuilder()
    manager: EngineManager[Any] = EngineManager(
        fake_models("a", "b"),
        KeepStrategy(loader),
        builder,
        switching=Switching(mode="auto"),
        abort_grace=0.1,
        memory_probe=lambda: 1.0,
    )
    await manager.initialize("a")
    await manager.replace_models({**manager.models, "c": ModelProfile(model="/models/c")})
    async with admitted(manager, "c", wait_timeout=10) as lease:  # a model added by reload is scheduled like any
        assert lease.model == "c" and manager.active_model == "c"
    loader.delay_s = 0.3
    async with admitted(manager, "c") as pinned:
        # A request waits for b while c serves; removing b answers it with 404 instead of leaving it queued.
        waiting = asyncio.create_task(manager.acquire("b", wait_timeout=10))
        await asyncio.sleep(0.05)
        assert manager.snapshot().slots[1].queued == 1
        await manager.replace_models({"a": manager.models["a"], "c": manager.models["c"]})
        with pytest.raises(ModelNotFound):
            await waiting
        assert pinned.model == "c"
    await manager.shutdown()


async def test_template_reloads_under_steady_auto_mode_traffic_all_apply_and_lose_nothing() -> None:
    """16 clients alternate between two models (so switches run nearly all the time) while templates are
    reloaded six times; each reload applies between switches, and every request is answered by its model."""
    loader, builder = FakeLoader(delay_s=0.02), TemplateBuilder()
    manager: EngineManager[Any] = EngineManager(
        fake_models("a", "b"),
        KeepStrategy(loader),
        builder,
        switching=Switching(mode="auto", min_residency_s=0.01, max_wait_s=30.0),
        abort_grace=0.1,
        memory_probe=lambda: 1.0,
    )
    await manager.initialize("a")
    answered: list[tuple[str, str]] = []
    stop = asyncio.Event()

    async def client(index: int) -> None:
        model = "ab"[index % 2]
        while not stop.is_set():
            async with admitted(manager, model, wait_timeout=30) as lease:
                answered.append((model, lease.bundle.name))
                await asyncio.sleep(0.005)
            model = "b" if model == "a" else "a"

    clients = [asyncio.create_task(client(index)) for index in range(16)]
    applied: list[str] = []
    for version in range(6):
        await asyncio.sleep(0.05)
        template = f"/t/v{version}.jinja"
        models = {
            name: msgspec.structs.replace(profile, chat_template=template) for name, profile in manager.models.items()
        }
        await manager.replace_models(models, new_frontend=["a", "b"], wait_timeout=10)
        applied.append(template)
        assert all(profile.chat_template == template for profile in manager.models.values())
    stop.set()
    await asyncio.gather(*clients)
    assert applied == [f"/t/v{version}.jinja" for version in range(6)]
    assert len(manager.snapshot().recent_switches) > 6, "switches ran all along"
    assert answered and all(model == served for model, served in answered), "none answered by the other model"
    async with admitted(manager, None) as lease:
        assert lease.bundle.template == "/t/v5.jinja", "the active model serves the last template"
    await manager.shutdown()
