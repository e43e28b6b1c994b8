"""Auto mode through the manager on fake engines: the scheduler's decisions carried out with real asyncio."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from server.engine import EngineManager, ModelLoadFailed, ModelSwitching, SwitchFailed
from server.engine.strategies import KeepStrategy
from server.engine.types.errors import AdmissionTimeout, QueueFull
from server.engine.types.report import SwitchAttempt
from server.profiles.schema import ModelProfile, Switching
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeBundleBuilder, FakeLoader
from tests.fakes.manager_views import admitted
from tests.fakes.observers import RecordingObserver


def _auto(make_manager: MakeManager, **policy: Any) -> tuple[EngineManager[Any], RecordingObserver]:
    policy.setdefault("min_residency_s", 0.05)
    manager = make_manager(switching=Switching(mode="auto", **policy))
    observer = RecordingObserver()
    manager.add_observer(observer)
    return manager, observer


async def _serve(manager: EngineManager[Any], model: str | None, hold_s: float = 0.005) -> str:
    """One request: admitted, 'generates' for ``hold_s``, answers with its bundle's model."""
    async with admitted(manager, model) as lease:
        assert lease.bundle.name == lease.model
        await asyncio.sleep(hold_s)
        name: str = lease.bundle.name
        return name


async def test_interleaved_traffic_is_served_without_thrashing(make_manager: MakeManager) -> None:
    """The issue's workload in miniature: 16 clients, 200 requests for a random model, keep strategy."""
    manager, observer = _auto(make_manager)
    await manager.initialize("a")
    rng = random.Random(5)
    wrong = 0
    left = iter(range(200))

    async def client() -> None:
        nonlocal wrong
        for _ in left:
            model = rng.choice("ab")
            if await _serve(manager, model, hold_s=rng.uniform(0.001, 0.01)) != model:
                wrong += 1

    async with asyncio.timeout(30):
        await asyncio.gather(*(client() for _ in range(16)))
    switches = [a for a in observer.attempts if a.trigger == "auto"]
    assert wrong == 0
    assert all(a.outcome == "ok" for a in switches)
    print(f"auto switches: {len(switches)}")
    assert 1 <= len(switches) <= 20, len(switches)  # FIFO swapping makes ~100 here; the livelock made thousands


async def test_a_waiter_never_starts_a_switch_while_the_active_model_is_busy(make_manager: MakeManager) -> None:
    manager, observer = _auto(make_manager, min_residency_s=1.5, max_residency_s=1.5)
    await manager.initialize("a")
    busy = asyncio.create_task(_serve(manager, "a", hold_s=3.0))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(_serve(manager, "b"))
    await asyncio.sleep(0.2)
    assert manager.switching_to is None and manager.active_model == "a"
    assert manager.snapshot().slots[1].queued == 1
    # At the end of a's quantum the scheduler switches; the busy request drains meanwhile.
    assert await waiting == "b"
    assert await busy == "a"
    assert [a.trigger for a in observer.attempts] == ["startup", "auto"]


async def test_requests_without_a_model_go_to_the_active_one(make_manager: MakeManager) -> None:
    manager, _ = _auto(make_manager)
    await manager.initialize("b")
    assert await _serve(manager, None) == "b"


async def test_a_full_queue_and_a_long_wait_get_503s_with_retry_after(make_manager: MakeManager) -> None:
    manager, observer = _auto(make_manager, min_residency_s=5.0, max_residency_s=5.0, max_wait_s=0.2, max_queue=1)
    await manager.initialize("a")
    busy = asyncio.create_task(_serve(manager, "a", hold_s=0.5))
    await asyncio.sleep(0.01)
    first = asyncio.create_task(_serve(manager, "b"))
    await asyncio.sleep(0.01)
    with pytest.raises(QueueFull) as full:
        await _serve(manager, "b")
    assert full.value.status_code == 503 and full.value.retry_after >= 1
    with pytest.raises(AdmissionTimeout) as late:
        await first
    assert late.value.status_code == 503 and late.value.retry_after >= 1
    await busy
    # The full queue refused at once; the waiter once max_wait_s had passed, not before (a generous ceiling).
    at_once, timed_out = sorted(
        seconds for model, seconds, admitted in observer.waits if (model, admitted) == ("b", False)
    )
    assert at_once < 0.2 <= timed_out < 2.0, observer.waits


async def test_a_failed_model_backs_off_and_the_healthy_one_keeps_serving(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager, observer = _auto(make_manager, failure_backoff_s=30.0)
    await manager.initialize("a")
    loader.fail_load.add("b")
    with pytest.raises(ModelLoadFailed) as failed:
        await _serve(manager, "b")
    # The client learns nothing of the reason; the admin status and the log have it.
    assert "injected" not in failed.value.message and failed.value.retry_after >= 29
    attempt = manager.snapshot().last_attempt
    assert attempt is not None and attempt.outcome == "failed" and attempt.target == "b"
    assert attempt.error is not None and "injected load failure for b" in attempt.error
    assert attempt.restored == "a" and manager.active_model == "a"
    loads = list(loader.loads)
    # During the backoff: refused at once, no switch, and a's requests run undisturbed.
    busy = asyncio.create_task(_serve(manager, "a", hold_s=0.2))
    await asyncio.sleep(0.01)
    async with asyncio.timeout(0.1):
        with pytest.raises(ModelLoadFailed):
            await _serve(manager, "b")
    assert await busy == "a"
    assert loader.loads == loads and manager.switching_to is None
    assert (manager.snapshot().slots[1].retry_in_s or 0) > 25
    # An admin switch retries at once, and success ends the backoff.
    await manager.switch("b")
    assert await _serve(manager, "b") == "b" and manager.snapshot().slots[1].retry_in_s is None
    assert [a.outcome for a in observer.attempts] == ["ok", "failed", "ok"]


async def test_an_admin_switch_that_fails_is_visible_and_raises_with_details(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager, observer = _auto(make_manager)
    await manager.initialize("a")
    loader.fail_load.add("c")
    with pytest.raises(SwitchFailed) as failed:
        await manager.switch("c")
    assert "injected load failure for c" in failed.value.message  # the admin route is for admins
    assert observer.attempts[-1].trigger == "admin" and observer.attempts[-1].outcome == "failed"


async def test_shutdown_refuses_the_waiters(make_manager: MakeManager) -> None:
    manager, _ = _auto(make_manager, min_residency_s=5.0, max_residency_s=5.0)
    await manager.initialize("a")
    busy = asyncio.create_task(_serve(manager, "a", hold_s=0.3))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(_serve(manager, "b"))
    await asyncio.sleep(0.01)
    await manager.shutdown()
    results = await asyncio.gather(busy, waiting, return_exceptions=True)
    assert type(results[1]).__name__ == "ManagerClosed"


async def test_manual_mode_names_the_switch_under_way_to_a_third_model(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    loader.delay_s = 0.2
    manager = make_manager()
    await manager.initialize("a")
    switching = asyncio.create_task(manager.switch("b"))
    await asyncio.sleep(0.05)
    with pytest.raises(ModelSwitching) as third:
        await _serve(manager, "c")
    assert "switching from 'a' to 'b'" in third.value.message and "'c' is not active" in third.value.message
    with pytest.raises(ModelSwitching) as left:
        await _serve(manager, "a")
    assert "switching from 'a' to 'b'; 'a' takes no new requests" in left.value.message
    await switching


def test_a_snapshot_needs_no_running_loop() -> None:
    """The CLI builds the app (and its metrics registry, which reads a snapshot) before the loop runs."""
    manager: EngineManager[Any] = EngineManager(
        {"a": ModelProfile(model="/m/a")},
        KeepStrategy(FakeLoader()),
        FakeBundleBuilder(),
        switching=Switching(mode="auto"),
    )
    snapshot = manager.snapshot()
    assert snapshot.slots[0].queued == 0 and snapshot.slots[0].retry_in_s is None


async def test_a_failing_observer_never_breaks_a_switch_or_a_request(make_manager: MakeManager) -> None:
    class Broken(RecordingObserver):
        def switch_attempted(self, attempt: SwitchAttempt) -> None:
            raise RuntimeError("observer bug")

        def request_waited(self, model: str, seconds: float, *, admitted: bool) -> None:
            raise RuntimeError("observer bug")

    manager, observer = _auto(make_manager)
    manager.add_observer(Broken())
    await manager.initialize("a")
    assert await _serve(manager, "b") == "b"
    assert [a.outcome for a in observer.attempts] == ["ok", "ok"]


async def test_a_client_that_goes_away_leaves_the_queue_and_causes_no_switch(make_manager: MakeManager) -> None:
    manager, observer = _auto(make_manager, min_residency_s=0.2, max_residency_s=0.2)
    await manager.initialize("a")
    busy = asyncio.create_task(_serve(manager, "a", hold_s=0.5))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(_serve(manager, "b"))
    await asyncio.sleep(0.01)
    assert manager.snapshot().slots[1].queued == 1
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert manager.snapshot().slots[1].queued == 0
    assert await busy == "a"
    assert [a.trigger for a in observer.attempts] == ["startup"] and manager.active_model == "a"
