"""Load and unload without a switch, pinning, preload, idle unload and per-model concurrency, on fake engines."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from server.engine import EngineManager, ModelNotFound, NoActiveModel, SlotState
from server.engine.strategies import KeepStrategy, StopStrategy
from server.engine.types.errors import ConcurrencyLimit, LoadFailed, RequestAbortedByUnload, ResidencyRefused
from server.engine.types.strategy import SwitchStrategy
from server.profiles.schema import ModelProfile, Switching
from tests.fakes.engines import FakeBundleBuilder, FakeLoader
from tests.fakes.manager_views import admitted, served_engine, state_of
from tests.fakes.observers import RecordingObserver
from tests.waiting import until

Make = Callable[..., EngineManager[Any]]


@pytest.fixture
async def make(loader: FakeLoader, builder: FakeBundleBuilder) -> AsyncIterator[Make]:
    """A manager over models a, b and c, each with the given residency keys; shut down after the test."""
    made: list[EngineManager[Any]] = []

    def build(
        strategy: SwitchStrategy | None = None, switching: Switching | None = None, **keys: dict[str, Any]
    ) -> EngineManager[Any]:
        models = {name: ModelProfile(model=f"/models/{name}", **keys.get(name, {})) for name in ("a", "b", "c")}
        manager: EngineManager[Any] = EngineManager(
            models,
            strategy or KeepStrategy(loader),
            builder,
            switching=switching,
            memory_probe=lambda: 100.0,
            abort_grace=0.2,
        )
        made.append(manager)
        return manager

    yield build
    for manager in made:
        await manager.shutdown()


def _slot(manager: EngineManager[Any], name: str) -> Any:
    return next(slot for slot in manager.snapshot().slots if slot.name == name)


# -- load and unload ----------------------------------------------------------------------------------------------


async def test_load_makes_a_model_resident_and_switching_to_it_starts_nothing(make: Make, loader: FakeLoader) -> None:
    manager = make()
    await manager.initialize("a")
    report = await manager.load("b")
    assert report.changed and report.state == "resident" and report.active_model == "a"
    assert state_of(manager, "a") is SlotState.ACTIVE and state_of(manager, "b") is SlotState.RESIDENT
    assert (await served_engine(manager)).name == "a"  # the active model serves on
    again = await manager.load("b")
    assert not again.changed and loader.loads == ["a", "b"]
    await manager.switch("b")
    assert loader.loads == ["a", "b"] and (await served_engine(manager)).name == "b"


async def test_load_under_a_one_engine_strategy_is_refused_and_changes_nothing(make: Make, loader: FakeLoader) -> None:
    manager = make(StopStrategy(loader))
    await manager.initialize("a")
    with pytest.raises(ResidencyRefused, match="'stop' strategy holds one engine") as refused:
        await manager.load("b")
    assert refused.value.status_code == 409
    assert state_of(manager, "b") is SlotState.STOPPED and loader.loads == ["a"]


async def test_load_stays_within_max_active(make: Make, loader: FakeLoader) -> None:
    manager = make(KeepStrategy(loader, max_resident=2))
    await manager.initialize("a")
    await manager.load("b")
    await manager.load("c")  # b is the least recently used resident: evicted for c; the active a stays
    states = {slot.name: slot.state for slot in manager.snapshot().slots}
    assert states == {"a": "active", "b": "stopped", "c": "resident"} and loader.unloads == ["b"]
    single = make(KeepStrategy(FakeLoader(), max_resident=1))
    await single.initialize("a")
    with pytest.raises(ResidencyRefused, match="max_active is 1"):
        await single.load("b")


async def test_a_failed_load_marks_the_slot_failed_and_the_active_model_serves_on(
    make: Make, loader: FakeLoader
) -> None:
    manager = make()
    await manager.initialize("a")
    loader.fail_load.add("b")
    with pytest.raises(LoadFailed, match="injected load failure") as failed:
        await manager.load("b")
    assert failed.value.status_code == 500
    slot = _slot(manager, "b")
    assert slot.state == "failed" and "injected load failure for b" in slot.reason
    assert (await served_engine(manager)).name == "a"
    cleared = await manager.unload("b")  # an unload clears the failure
    assert cleared.changed and state_of(manager, "b") is SlotState.STOPPED


async def test_unload_frees_a_parked_model(make: Make, loader: FakeLoader) -> None:
    manager = make()
    await manager.initialize("a")
    await manager.switch("b")  # a resident
    report = await manager.unload("a")
    assert report.changed and report.state == "stopped" and loader.unloads == ["a"]
    assert not (await manager.unload("a")).changed
    with pytest.raises(ModelNotFound):
        await manager.unload("zzz")


async def test_unloading_the_active_model_in_manual_mode_needs_force(make: Make, loader: FakeLoader) -> None:
    manager = make()
    await manager.initialize("a")
    with pytest.raises(ResidencyRefused, match="is the active model") as refused:
        await manager.unload("a")
    assert refused.value.status_code == 409 and state_of(manager, "a") is SlotState.ACTIVE

    async def long_request() -> None:
        async with admitted(manager, "a") as lease:
            engine = lease.bundle.engine
            lease.abort_hook = lambda: engine.abort(lease.request_id)
            async for _ in engine.generate(lease.request_id, 1000, 0.01):
                pass
            lease.raise_if_aborted()

    request = asyncio.create_task(long_request())
    await asyncio.sleep(0.02)
    report = await manager.unload("a", force=True, drain_timeout=0.05)
    with pytest.raises(RequestAbortedByUnload) as aborted:
        await request
    assert aborted.value.status_code == 503 and aborted.value.retry_after == 1
    assert report.changed and report.active_model is None and loader.unloads == ["a"]
    with pytest.raises(NoActiveModel):
        await manager.acquire("a")
    await manager.switch("b")  # the device works on
    assert (await served_engine(manager)).name == "b"


async def test_auto_mode_unloads_the_active_model_and_its_next_request_reloads_it(
    make: Make, loader: FakeLoader
) -> None:
    manager = make(switching=Switching(mode="auto", min_residency_s=0))
    await manager.initialize("a")
    report = await manager.unload("a")
    assert report.active_model is None
    async with admitted(manager, "a", wait_timeout=5) as lease:
        assert lease.bundle.engine.name == "a"
    assert loader.loads == ["a", "a"]


# -- pinning ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pinned", "survivor"), [(False, "b"), (True, "a")])
async def test_a_pinned_model_is_never_the_lru_victim(
    make: Make, loader: FakeLoader, pinned: bool, survivor: str
) -> None:
    # Under lru, as the name says (the default cost rule weighs the measured costs, a millisecond apart here).
    manager = make(KeepStrategy(loader, max_resident=2), Switching(eviction="lru"), a={"pinned": pinned})
    await manager.initialize("a")
    await manager.switch("b")  # a resident, least recently used
    await manager.switch("c")  # one of a and b must go
    assert state_of(manager, survivor) is SlotState.RESIDENT
    assert _slot(manager, "a").pinned is pinned


# -- preload ------------------------------------------------------------------------------------------------------


async def test_preload_loads_marked_models_after_the_default_serves(make: Make, loader: FakeLoader) -> None:
    manager = make(b={"preload": True})
    await manager.initialize("a")
    assert manager.active_model == "a"  # initialize returned with the default serving
    await until(lambda: state_of(manager, "b") is SlotState.RESIDENT)
    assert state_of(manager, "c") is SlotState.STOPPED and loader.loads == ["a", "b"]


async def test_a_failed_preload_shows_like_a_failed_load(make: Make, loader: FakeLoader) -> None:
    manager = make(StopStrategy(loader), b={"preload": True})
    await manager.initialize("a")
    await until(lambda: state_of(manager, "b") is SlotState.FAILED)
    assert "preload refused" in (_slot(manager, "b").reason or "")
    assert (await served_engine(manager)).name == "a"


# -- idle unload --------------------------------------------------------------------------------------------------


async def test_an_idle_resident_model_is_unloaded_and_counted(make: Make, loader: FakeLoader) -> None:
    manager = make(b={"idle_unload_s": 0.3})
    observer = RecordingObserver()
    manager.add_observer(observer)
    await manager.initialize("a")
    await manager.load("b")
    countdown = _slot(manager, "b").unloads_in_s
    assert countdown is not None and 0 < countdown <= 0.3
    assert _slot(manager, "a").unloads_in_s is None  # manual mode: the active model never times out
    await until(lambda: state_of(manager, "b") is SlotState.STOPPED)
    assert observer.idle_unloaded == ["b"] and loader.unloads == ["b"] and manager.active_model == "a"


async def test_pinned_and_manual_active_models_survive_idle_time(make: Make, loader: FakeLoader) -> None:
    manager = make(switching=Switching(idle_unload_s=0.1), b={"pinned": True})
    await manager.initialize("a")
    await manager.load("b")
    await manager.load("c")
    await until(lambda: state_of(manager, "c") is SlotState.STOPPED)
    await asyncio.sleep(0.2)
    assert state_of(manager, "a") is SlotState.ACTIVE and state_of(manager, "b") is SlotState.RESIDENT
    assert loader.unloads == ["c"]


async def test_auto_mode_unloads_an_idle_active_model_and_a_request_brings_it_back(
    make: Make, loader: FakeLoader
) -> None:
    manager = make(switching=Switching(mode="auto", min_residency_s=0), a={"idle_unload_s": 0.3})
    await manager.initialize("a")
    for _ in range(3):  # use keeps it loaded
        async with admitted(manager, "a"):
            await asyncio.sleep(0.15)
    assert state_of(manager, "a") is SlotState.ACTIVE
    await until(lambda: state_of(manager, "a") is SlotState.STOPPED)
    assert manager.active_model is None
    async with admitted(manager, "a", wait_timeout=5) as lease:
        assert lease.bundle.engine.name == "a"
    assert loader.loads == ["a", "a"]


# -- per-model concurrency ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["manual", "auto"])
async def test_requests_past_the_concurrency_limit_wait_then_get_429(make: Make, mode: str) -> None:
    manager = make(switching=Switching(mode=mode, max_queue=1), a={"max_concurrent_requests": 1})  # type: ignore[arg-type]
    await manager.initialize("a")
    first = await manager.acquire("a")
    second = asyncio.create_task(manager.acquire("a", wait_timeout=5))
    await asyncio.sleep(0.05)
    assert not second.done() and _slot(manager, "a").queued == 1
    with pytest.raises(ConcurrencyLimit) as limited:
        await manager.acquire("a")
    assert limited.value.status_code == 429 and limited.value.retry_after >= 1
    manager.release(first)
    lease = await asyncio.wait_for(second, 1)
    assert _slot(manager, "a").in_flight == 1
    manager.release(lease)
    # Without a limit of its own, b admits any number at once.
    await manager.switch("b")
    leases = [await manager.acquire("b", wait_timeout=0.5) for _ in range(3)]
    for each in leases:
        manager.release(each)
