"""The manager's switch, gate, drain and rollback behaviour, on fake engines."""

from __future__ import annotations

import asyncio

import pytest

from server.api.admission.request_admission import install_abort_hook
from server.engine import (
    AdmissionTimeout,
    EngineManager,
    ManagerClosed,
    ModelLoadFailed,
    ModelNotActive,
    ModelNotFound,
    ModelSwitching,
    NoActiveModel,
    RequestAbortedBySwitch,
    SlotState,
    SwitchConflict,
    SwitchFailed,
)
from server.profiles.schema import Switching
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeBundleBuilder, FakeLoader
from tests.fakes.manager_views import admitted, served_engine, state_of
from tests.waiting import until


async def _generate(manager: EngineManager, model: str | None, steps: int, step_s: float = 0.01) -> list[str]:
    async with admitted(manager, model) as lease:
        install_abort_hook(lease)  # as the API's admission does: the one abort path
        tokens = [token async for token in lease.bundle.engine.generate(lease.request_id, steps, step_s)]
        lease.raise_if_aborted()
        return tokens


async def test_initialize_publishes_the_default_model(make_manager: MakeManager) -> None:
    manager = make_manager()
    report = await manager.initialize("b")
    assert (report.previous_model, report.current_model, report.switched) == (None, "b", True)
    assert manager.active_model == "b" and manager.published is not None
    assert manager.published.bundle.name == "b"
    assert await _generate(manager, None, 2) == ["b", "b"]
    snapshot = manager.snapshot()
    assert [(s.name, s.state) for s in snapshot.slots] == [
        ("a", "stopped"),
        ("b", "active"),
        ("c", "stopped"),
    ]


async def test_keep_switch_back_is_a_pointer_swap(
    make_manager: MakeManager, loader: FakeLoader, builder: FakeBundleBuilder
) -> None:
    manager = make_manager("keep")
    await manager.initialize("a")
    first_bundle = manager.published.bundle  # type: ignore[union-attr]
    report = await manager.switch("b")
    assert (report.previous_model, report.current_model, report.strategy) == ("a", "b", "keep")
    assert state_of(manager, "a") is SlotState.RESIDENT
    await manager.switch("a")
    assert loader.loads == ["a", "b"], "switching back to a resident model must not load it again"
    assert manager.published.bundle is first_bundle  # type: ignore[union-attr]
    assert builder.built == ["a", "b"]


async def test_stop_unloads_the_model_being_left(make_manager: MakeManager, loader: FakeLoader) -> None:
    manager = make_manager("stop")
    await manager.initialize("a")
    engine_a = await served_engine(manager)
    report = await manager.switch("b", drain_timeout=0)
    assert not engine_a.alive and state_of(manager, "a") is SlotState.STOPPED
    assert report.memory_before_mb == 100.0 and report.freed_memory_mb == 0.0
    await manager.switch("a")
    assert loader.loads == ["a", "b", "a"]


async def test_switch_to_the_active_model_changes_nothing(make_manager: MakeManager) -> None:
    manager = make_manager()
    await manager.initialize("a")
    report = await manager.switch("a")
    assert report.switched is False and report.current_model == "a"


async def test_same_target_joins_and_other_target_conflicts(make_manager: MakeManager, loader: FakeLoader) -> None:
    loader.delay_s = 0.1
    manager = make_manager()
    await manager.initialize("a")
    first = asyncio.create_task(manager.switch("b"))
    await until(lambda: manager.switching_to == "b", what="the switch to b to start")
    second = asyncio.create_task(manager.switch("b"))
    with pytest.raises(SwitchConflict) as conflict:
        await manager.switch("c")
    assert conflict.value.in_progress == "b"
    assert await first == await second
    assert loader.loads == ["a", "b"]


async def test_unknown_and_inactive_models_are_refused(make_manager: MakeManager) -> None:
    manager = make_manager(switching=Switching(mode="manual"))
    await manager.initialize("a")
    with pytest.raises(ModelNotFound):
        await _generate(manager, "nope", 1)
    with pytest.raises(ModelNotActive) as not_active:
        await _generate(manager, "b", 1)
    assert not_active.value.active == "a"
    with pytest.raises(ModelNotFound):
        await manager.switch("nope")


async def test_gate_requests_for_target_wait_and_old_model_is_refused(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    loader.delay_s = 0.1
    manager = make_manager()
    await manager.initialize("a")
    switching = asyncio.create_task(manager.switch("b"))
    await until(lambda: manager.switching_to == "b", what="the switch to b to start")
    with pytest.raises(ModelSwitching):
        await _generate(manager, "a", 1)
    assert await _generate(manager, "b", 2) == ["b", "b"]
    assert await _generate(manager, None, 1) == ["b"]
    await switching


async def test_drain_lets_a_short_request_finish(make_manager: MakeManager) -> None:
    manager = make_manager()
    await manager.initialize("a")
    engine_a = await served_engine(manager)
    request = asyncio.create_task(_generate(manager, "a", 5, 0.01))
    await until(lambda: engine_a.running == 1, what="the request to start")
    report = await manager.switch("b", drain_timeout=5)
    assert await request == ["a"] * 5
    assert report.aborted_requests == 0 and report.drain_ms > 0


async def test_drain_timeout_aborts_with_the_switch_error(make_manager: MakeManager) -> None:
    manager = make_manager()
    await manager.initialize("a")
    engine_a = await served_engine(manager)
    request = asyncio.create_task(_generate(manager, "a", 1000, 0.01))
    await until(lambda: engine_a.running == 1, what="the request to start")
    report = await manager.switch("b", drain_timeout=0.05)
    with pytest.raises(RequestAbortedBySwitch) as aborted:
        await request
    assert "switched from 'a' to 'b'" in aborted.value.message
    assert report.aborted_requests == 1 and len(engine_a.aborted) == 1


async def test_failed_load_rolls_back_to_the_previous_model(make_manager: MakeManager, loader: FakeLoader) -> None:
    manager = make_manager("stop")
    await manager.initialize("a")
    loader.fail_load.add("b")
    with pytest.raises(SwitchFailed) as failed:
        await manager.switch("b")
    assert failed.value.restored == "a" and "injected load failure" in failed.value.reason
    assert manager.active_model == "a" and state_of(manager, "b") is SlotState.FAILED
    assert "injected load failure" in (manager.snapshot().slots[1].reason or "")
    assert await _generate(manager, "a", 1) == ["a"]
    assert (await served_engine(manager)).alive
    await manager.switch("b")  # a failed model can be retried
    assert manager.active_model == "b"


async def test_failed_bundle_rolls_back_and_keeps_the_previous_bundle(
    make_manager: MakeManager, builder: FakeBundleBuilder
) -> None:
    manager = make_manager("keep")
    await manager.initialize("a")
    bundle_a = manager.published.bundle  # type: ignore[union-attr]
    builder.fail_for.add("b")
    with pytest.raises(SwitchFailed):
        await manager.switch("b")
    assert manager.published.bundle is bundle_a  # type: ignore[union-attr]


async def test_when_rollback_fails_nothing_is_active_until_a_new_switch(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager = make_manager("stop")
    await manager.initialize("a")
    loader.fail_load.update({"a", "b"})
    with pytest.raises(SwitchFailed) as failed:
        await manager.switch("b")
    assert failed.value.restored is None and manager.active_model is None
    with pytest.raises(NoActiveModel):
        await _generate(manager, None, 1)
    await manager.switch("c")
    assert await _generate(manager, None, 1) == ["c"]


async def test_request_waiting_for_a_failing_target_gets_a_typed_error(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    loader.delay_s = 0.05
    manager = make_manager()
    await manager.initialize("a")
    loader.fail_load.add("b")
    switching = asyncio.create_task(manager.switch("b"))
    await until(lambda: manager.switching_to == "b", what="the switch to b to start")
    with pytest.raises(ModelLoadFailed):
        await _generate(manager, "b", 1)
    with pytest.raises(SwitchFailed):
        await switching


async def test_waiting_is_bounded(make_manager: MakeManager, loader: FakeLoader) -> None:
    loader.delay_s = 0.5
    manager = make_manager(admission_timeout=0.05)
    await manager.initialize("a")
    switching = asyncio.create_task(manager.switch("b"))
    await until(lambda: manager.switching_to == "b", what="the switch to b to start")
    with pytest.raises(AdmissionTimeout):
        await _generate(manager, "b", 1)
    await switching


async def test_auto_mode_switches_on_request(make_manager: MakeManager) -> None:
    manager = make_manager(switching=Switching(mode="auto"))
    await manager.initialize("a")
    assert await _generate(manager, "c", 2) == ["c", "c"]
    assert manager.active_model == "c"


async def test_shutdown_refuses_requests_and_unloads(make_manager: MakeManager, loader: FakeLoader) -> None:
    manager = make_manager("keep")
    await manager.initialize("a")
    await manager.switch("b")
    await manager.shutdown()
    assert loader.live == []
    assert {s.state for s in manager.snapshot().slots} == {"stopped"}
    with pytest.raises(ManagerClosed):
        await _generate(manager, None, 1)
