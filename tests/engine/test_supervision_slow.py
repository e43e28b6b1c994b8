"""Health checks during slow engine operations: a sleep or a wake holds the engine core's busy loop, and the watch
must neither take that for a hang nor wait forever for one that hangs.

Only testable with fakes here: vLLM refuses sleep mode on CPU. The fake's core serves one utility at a time, as
vLLM's busy loop does, so a health check sent during a wake waits behind it as it would on a real engine.
"""

from __future__ import annotations

import asyncio

from server.engine.strategies.sleep import SleepStrategy
from server.engine.supervision.watch import EngineWatches, Supervision
from server.profiles.schema import ModelProfile
from tests.fakes.engines import FakeLoader
from tests.fakes.supervised import FakeSleepingEngine, KillRecorder

#: Health checks every 50 ms, each given 100 ms: a wake step of 300 ms is far past the plain timeout.
FAST = Supervision(health_interval_s=0.05, health_timeout_s=0.1, poll_interval_s=0.01)
PROFILE = ModelProfile(model="/models/a")


class _NoRoom:
    """The level-2 wake never asks for room nor reads the models (it wakes the engine it holds)."""


async def _watched(engine: FakeSleepingEngine) -> tuple[EngineWatches, list[str]]:
    deaths: list[str] = []

    async def on_death(_engine: object, cause: str) -> None:
        deaths.append(cause)

    watches = EngineWatches(FAST, kill=KillRecorder(engine))
    watches.supervise(on_death)
    watches.watch("a", engine)
    await asyncio.sleep(0.12)  # a few health checks answered first
    assert engine.calls and not deaths
    return watches, deaths


async def _park_and_wake(strategy: SleepStrategy, engine: FakeSleepingEngine) -> None:
    await strategy.park("a", engine)
    await strategy.bring_up("a", PROFILE, engine, _NoRoom())  # type: ignore[arg-type]


async def test_a_slow_level_2_wake_is_not_taken_for_a_hang() -> None:
    engine = FakeSleepingEngine(step_s=0.3)
    watches, deaths = await _watched(engine)
    strategy = SleepStrategy(FakeLoader(), level=2, watches=watches, slow_timeout_s=2.0)
    await _park_and_wake(strategy, engine)
    await asyncio.sleep(0.2)  # the checks that waited behind the wake answer, later ones as usual
    assert deaths == []
    assert engine.steps == ["sleep(2)", "wake_up(['weights'])", "reload_weights", "wake_up(['kv_cache'])"]
    calls = len(engine.calls)
    await asyncio.sleep(0.2)
    assert len(engine.calls) > calls, "the watch kept checking after the wake"
    await watches.stop_all()


def _hung(timeout: str) -> str:
    """The cause of a fake engine's hang: a late round trip and no CPU time used (its pid is no process)."""
    return (
        f"engine hung: no answer to a health check within {timeout} s and no progress "
        f"(its busiest thread used 0.00 s of CPU time in the last {timeout} s, all its processes 0.00 s; "
        "no output of it arrived)"
    )


async def test_without_the_widened_check_the_same_wake_is_killed() -> None:
    # The case the strategy's widening exists for: the plain timeout takes the slow wake for a hang.
    engine = FakeSleepingEngine(step_s=0.3)
    watches, deaths = await _watched(engine)
    strategy = SleepStrategy(FakeLoader(), level=2)
    try:
        await _park_and_wake(strategy, engine)
    except RuntimeError as exc:
        assert "died" in str(exc)
    assert deaths == [_hung("0.1")]
    await watches.stop_all()


async def test_a_wake_that_hangs_ends_at_the_widened_timeout() -> None:
    engine = FakeSleepingEngine(step_s=0.05)
    watches, deaths = await _watched(engine)
    strategy = SleepStrategy(FakeLoader(), level=2, watches=watches, slow_timeout_s=0.5)
    await strategy.park("a", engine)
    engine.step_s = 60.0  # the wake never finishes on its own
    waking = asyncio.create_task(strategy.bring_up("a", PROFILE, engine, _NoRoom()))  # type: ignore[arg-type]
    for _ in range(300):
        if deaths:
            break
        await asyncio.sleep(0.01)
    assert deaths == [_hung("0.5")]
    assert engine.process.exitcode == -9  # killed: the wake cannot come back later and hold the device
    waking.cancel()
    await asyncio.gather(waking, return_exceptions=True)
    await watches.stop_all()
