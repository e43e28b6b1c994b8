"""A dead engine, on fake engines: the slot fails, its requests end at once, nothing else moves, and it heals."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from server.api.admission.request_admission import install_abort_hook
from server.engine import EngineDied, EngineManager, SlotState
from server.profiles.schema import Switching
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeLoader
from tests.fakes.manager_views import admitted, served_engine, state_of
from tests.fakes.observers import RecordingObserver

CAUSE = "engine died: killed by signal 9 (SIGKILL)"


async def _generate(manager: EngineManager[Any], model: str | None, steps: int) -> list[str]:
    async with admitted(manager, model, wait_timeout=10) as lease:
        install_abort_hook(lease)
        tokens = [token async for token in lease.bundle.engine.generate(lease.request_id, steps, 0.01)]
        lease.raise_if_aborted()
        return tokens


async def _until(check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_dead_active_engine_ends_its_requests_and_restarts_by_itself(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager = make_manager("stop")
    counter = RecordingObserver()
    manager.add_observer(counter)
    await manager.initialize("a")
    engine = await served_engine(manager)
    streaming = asyncio.create_task(_generate(manager, "a", 500))
    await asyncio.sleep(0.05)
    await manager.engine_died(engine, CAUSE)
    with pytest.raises(EngineDied) as died:
        await asyncio.wait_for(streaming, 1.0)
    assert (died.value.status_code, died.value.code, died.value.retry_after) == (503, "engine_died", 5)
    assert died.value.cause == CAUSE and "signal" not in died.value.message  # the cause is for admins
    assert loader.unloads == ["a"]  # what was left of the engine is released
    # Manual mode heals: the model that was active restarts on a new engine, and a request waits for it.
    assert await _generate(manager, "a", 2) == ["a", "a"]
    assert await served_engine(manager) is not engine and loader.loads == ["a", "a"]
    assert [death[0] for death in counter.deaths] == ["a"] and counter.restarts == [("a", True)]
    history = manager.snapshot().recent_switches
    assert history[-1].trigger == "restart" and history[-1].outcome == "ok"


async def test_a_model_whose_engine_fails_every_restart_backs_off_then_stays_failed(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager = make_manager("stop", switching=Switching(failure_backoff_s=0.1, max_failure_backoff_s=10, max_restarts=3))
    counter = RecordingObserver()
    manager.add_observer(counter)
    await manager.initialize("a")
    loader.always_fail.add("a")
    engine = await served_engine(manager)
    await manager.engine_died(engine, CAUSE)
    await _until(lambda: len(counter.restarts) == 3 and manager.switching_to is None)
    attempts = [attempt for attempt in manager.snapshot().recent_switches if attempt.trigger == "restart"]
    gaps = [later.started_at - earlier.started_at for earlier, later in itertools.pairwise(attempts)]
    assert len(attempts) == 3 and counter.restarts == [("a", False)] * 3
    assert 0.09 <= gaps[0] < gaps[1] and gaps[1] >= 0.19, gaps  # 0 s, then 0.1 s, then 0.2 s
    await asyncio.sleep(0.5)
    assert len(counter.restarts) == 3 and state_of(manager, "a") is SlotState.FAILED, "it stays failed"
    loader.always_fail.discard("a")
    await manager.switch("a")  # an admin switch asks again
    assert state_of(manager, "a") is SlotState.ACTIVE


async def test_a_dead_resident_engine_leaves_the_active_model_alone(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager = make_manager("keep")
    await manager.initialize("a")
    resident = await served_engine(manager)
    await manager.switch("b")
    assert state_of(manager, "a") is SlotState.RESIDENT
    streaming = asyncio.create_task(_generate(manager, "b", 20))
    await manager.engine_died(resident, CAUSE)
    assert await streaming == ["b"] * 20
    assert state_of(manager, "a") is SlotState.FAILED and manager.active_model == "b"
    assert loader.unloads == ["a"]
    await manager.switch("a")
    assert loader.loads == ["a", "b", "a"]  # a fresh engine, not the dead resident one


async def test_a_death_of_an_engine_no_serving_slot_holds_is_ignored(make_manager: MakeManager) -> None:
    manager = make_manager("keep")
    await manager.initialize("a")
    await manager.engine_died(object(), CAUSE)
    assert state_of(manager, "a") is SlotState.ACTIVE and await _generate(manager, None, 1) == ["a"]


async def test_auto_mode_serves_a_dead_model_again_at_its_next_request(make_manager: MakeManager) -> None:
    manager = make_manager("keep", switching=Switching(mode="auto"))
    await manager.initialize("a")
    await manager.engine_died(await served_engine(manager), CAUSE)
    assert state_of(manager, "a") is SlotState.FAILED and manager.active_model is None
    assert await asyncio.wait_for(_generate(manager, "a", 2), 5.0) == ["a", "a"]
    assert state_of(manager, "a") is SlotState.ACTIVE


async def test_a_request_that_failed_on_a_dead_engine_is_told_engine_died(make_manager: MakeManager) -> None:
    manager = make_manager("keep", switching=Switching(max_restarts=0))
    await manager.initialize("a")
    lease = await manager.acquire("a")
    assert manager.failure_of(lease) is None
    engine = lease.bundle.engine
    engine.errored = True  # vLLM's flag, before the watch reports
    failure = manager.failure_of(lease)
    assert isinstance(failure, EngineDied) and failure.model == "a"
    await manager.engine_died(engine, CAUSE)
    assert manager.failure_of(lease) is lease.aborted_by and isinstance(lease.aborted_by, EngineDied)
    manager.release(lease)


async def test_a_request_that_answers_in_the_step_its_engine_is_marked_dead_is_told_engine_died(
    make_manager: MakeManager,
) -> None:
    # The slot gives up its dead engine before its requests' abort hooks run: a request whose engine call failed
    # just then (vLLM's 500) must still learn why, in the very next loop step (a clean-clone CI run saw a 500).
    manager = make_manager("stop", switching=Switching(max_restarts=0))
    await manager.initialize("a")
    lease = await manager.acquire("a")
    dying = asyncio.create_task(manager.engine_died(lease.bundle.engine, CAUSE))
    await asyncio.sleep(0)  # the death runs up to its first await; this request's answer comes next
    assert isinstance(manager.failure_of(lease), EngineDied)
    await dying
    manager.release(lease)


async def test_an_engine_that_dies_right_after_each_restart_stops_after_max_restarts(
    make_manager: MakeManager,
) -> None:
    # Each restart succeeds, and its engine dies at once (a crash loop): were the count to start again at each
    # death, it would restart forever.
    manager = make_manager("stop", switching=Switching(failure_backoff_s=0.05, max_failure_backoff_s=1, max_restarts=2))
    counter = RecordingObserver()
    manager.add_observer(counter)
    await manager.initialize("a")
    for restarts in (1, 2):
        await manager.engine_died(await served_engine(manager), CAUSE)
        await _until(lambda restarts=restarts: len(counter.restarts) == restarts and manager.switching_to is None)
        assert state_of(manager, "a") is SlotState.ACTIVE
    await manager.engine_died(await served_engine(manager), CAUSE)
    await asyncio.sleep(0.3)  # four times the backoff a third restart would have waited
    assert counter.restarts == [("a", True)] * 2 and state_of(manager, "a") is SlotState.FAILED
    plan = next(slot.restart for slot in manager.snapshot().slots if slot.name == "a")
    assert plan is not None and plan.given_up and plan.restarts == 2
