"""The restart plan of a model whose engine died, on fake engines: what the status surfaces show comes from here."""

from __future__ import annotations

import asyncio
from typing import Any

from server.engine import EngineManager, RestartPlan
from server.engine.supervision.healing import GIVEN_UP
from server.profiles.schema import Switching
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeLoader
from tests.fakes.manager_views import served_engine
from tests.fakes.observers import RecordingObserver
from tests.waiting import until

CAUSE = "engine died: killed by signal 9 (SIGKILL)"


def _plan(manager: EngineManager[Any], name: str) -> RestartPlan | None:
    return next(slot.restart for slot in manager.snapshot().slots if slot.name == name)


async def _restarts(counter: RecordingObserver, count: int, manager: EngineManager[Any], planned: bool = False) -> None:
    """Wait until ``count`` restarts ended and no switch runs (and, when ``planned``, the next one is timed: the
    healer times it a moment after the failed restart's switch closed)."""
    for _ in range(1000):
        plan = _plan(manager, "a")
        timed = plan is not None and plan.next_restart_in_s is not None
        if len(counter.restarts) >= count and manager.switching_to is None and (timed or not planned):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(counter.restarts)} restarts, {count} expected")


async def test_manual_mode_shows_each_restart_its_backoff_and_then_that_it_gave_up(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    switching = Switching(failure_backoff_s=1.0, max_failure_backoff_s=10, max_restarts=3)
    manager = make_manager("stop", switching=switching)
    counter = RecordingObserver()
    manager.add_observer(counter)
    await manager.initialize("a")
    assert _plan(manager, "a") is None  # serving: no plan
    loader.always_fail.add("a")
    loader.delay_s = 0.2  # each restart's load takes a moment: the plan says it is under way
    await manager.engine_died(await served_engine(manager), CAUSE)
    restarting = RestartPlan(restarts=1, max_restarts=3, restarting=True, note="restarting (1 of 3)")
    await until(lambda: _plan(manager, "a") == restarting, what="the first restart to be under way")
    await _restarts(counter, 1, manager, planned=True)
    plan = _plan(manager, "a")
    assert plan is not None and (plan.restarts, plan.max_restarts, plan.restarting) == (1, 3, False)
    assert plan.next_restart_in_s is not None and 0.5 < plan.next_restart_in_s <= 1.0  # failure_backoff_s x 2^0
    assert plan.note == "restart 2 of 3 in 1 s"
    await _restarts(counter, 2, manager, planned=True)
    plan = _plan(manager, "a")
    assert plan is not None and plan.next_restart_in_s is not None and 1.5 < plan.next_restart_in_s <= 2.0  # x 2^1
    assert plan.note == "restart 3 of 3 in 2 s"
    await _restarts(counter, 3, manager)
    given_up = RestartPlan(restarts=3, max_restarts=3, note=GIVEN_UP, given_up=True)
    await until(lambda: _plan(manager, "a") == given_up, what="the plan to give up")
    loader.always_fail.discard("a")
    await manager.switch("a")  # an admin switch asks again, and the model serves: no plan any more
    assert _plan(manager, "a") is None


async def test_manual_mode_without_restarts_says_it_stays_failed(make_manager: MakeManager) -> None:
    manager = make_manager("stop", switching=Switching(max_restarts=0))
    await manager.initialize("a")
    await manager.engine_died(await served_engine(manager), CAUSE)
    assert _plan(manager, "a") == RestartPlan(restarts=0, max_restarts=0, note=GIVEN_UP, given_up=True)


async def test_an_admin_switch_elsewhere_ends_the_planned_restarts(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager = make_manager("stop", switching=Switching(failure_backoff_s=30, max_restarts=3))
    counter = RecordingObserver()
    manager.add_observer(counter)
    await manager.initialize("a")
    loader.always_fail.add("a")
    await manager.engine_died(await served_engine(manager), CAUSE)
    await _restarts(counter, 1, manager, planned=True)
    assert (plan := _plan(manager, "a")) is not None and plan.note == "restart 2 of 3 in 30 s"
    await manager.switch("b")
    assert (plan := _plan(manager, "a")) is not None and plan.given_up and plan.note == GIVEN_UP


async def test_auto_mode_plans_the_restart_for_the_next_request(make_manager: MakeManager) -> None:
    manager = make_manager("keep", switching=Switching(mode="auto"))
    await manager.initialize("a")
    await manager.engine_died(await served_engine(manager), CAUSE)
    plan = _plan(manager, "a")
    assert plan == RestartPlan(restarts=0, note="restarts at its next request")
    assert plan.max_restarts is None and not plan.given_up
