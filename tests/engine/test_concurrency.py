"""Randomized concurrency test of the manager on fake strategies' engines.

Each seed interleaves many requests and switches with injected load, unload and bundle failures, and checks:
    1. no request is served by a model other than the one it was admitted for;
    2. every request ends, completed or with a typed ``EngineError``;
    3. the gate never deadlocks: every scenario finishes within a bound.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from hypothesis import settings

from server.api.admission.request_admission import install_abort_hook
from server.engine import EngineError, EngineManager, SlotState
from server.engine.strategies import KeepStrategy, SleepStrategy, StopStrategy
from server.engine.types.strategy import SwitchStrategy
from server.profiles.schema import Switching
from tests.fakes.engines import FakeBundleBuilder, FakeLoader, fake_models
from tests.fakes.manager_views import admitted, state_of

NAMES = ("alpha", "beta", "gamma")
#: As many seeds as the loaded Hypothesis profile's examples (tests/conftest.py): 40 in the suite, 400 thorough.
SEEDS = range(settings().max_examples)


def _strategy(name: str, loader: FakeLoader) -> SwitchStrategy:
    if name == "stop":
        return StopStrategy(loader)
    if name == "keep":
        return KeepStrategy(loader, max_resident=2)
    return SleepStrategy(loader, level=1 + len(loader.loads) % 2)


async def _request(manager: EngineManager, model: str | None, steps: int, outcomes: Counter[str]) -> None:
    try:
        async with admitted(manager, model, wait_timeout=0.5) as lease:
            assert model in (None, lease.model)
            assert lease.bundle.name == lease.model
            install_abort_hook(lease)  # as the API's admission does: a switch aborts through the bundle
            rid = lease.request_id
            received = 0
            async for token in lease.bundle.engine.generate(rid, steps):
                # Invariant 1: every token comes from the model the request was admitted for.
                assert token == lease.model, f"{rid} admitted for {lease.model} got a token from {token}"
                received += 1
            if received < steps:
                assert lease.aborted_by is not None, "the engine cut short a request no switch aborted"
            lease.raise_if_aborted()
        outcomes["completed"] += 1
    except EngineError as exc:
        outcomes[type(exc).__name__] += 1


async def _switch(manager: EngineManager, target: str, drain: float, outcomes: Counter[str]) -> None:
    try:
        report = await manager.switch(target, drain_timeout=drain)
        assert report.current_model == target
        outcomes["switch_ok"] += 1
    except EngineError as exc:
        outcomes["switch_" + type(exc).__name__] += 1


async def _scenario(seed: int, strategy_name: str, mode: str) -> Counter[str]:
    rng = random.Random(seed)
    loader = FakeLoader(rng=rng, load_failure_rate=0.15, unload_failure_rate=0.1)
    builder = FakeBundleBuilder(rng=rng, failure_rate=0.05)
    manager = EngineManager(
        fake_models(*NAMES),
        _strategy(strategy_name, loader),
        builder,
        switching=Switching(mode=mode),  # type: ignore[arg-type]
        admission_timeout=0.5,
        abort_grace=0.05,
        memory_probe=lambda: 0.0,
    )
    outcomes: Counter[str] = Counter()
    loader.fail_load.clear()
    try:
        await manager.initialize("alpha")
    except EngineError:
        outcomes["init_failed"] += 1
    tasks = []
    for _ in range(rng.randint(10, 40)):
        await asyncio.sleep(rng.random() * 0.004)
        if rng.random() < 0.2:
            target = rng.choice(NAMES)
            tasks.append(asyncio.create_task(_switch(manager, target, rng.choice((0.0, 0.002, 0.02)), outcomes)))
        else:
            model = rng.choice((*NAMES, None)) if mode == "auto" or rng.random() < 0.3 else manager.active_model
            tasks.append(asyncio.create_task(_request(manager, model, rng.randint(1, 12), outcomes)))
    # Invariant 3: everything finishes (no deadlock), well within the bound.
    async with asyncio.timeout(15):
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # Auto mode may leave a switch running whose requesters gave up waiting; it must end too.
        while manager.switching_to is not None:
            await asyncio.sleep(0.005)
    # Invariant 2: nothing ended with an untyped error (assertion failures included).
    for result in results:
        if isinstance(result, BaseException):
            raise result
    active = [name for name in NAMES if state_of(manager, name) is SlotState.ACTIVE]
    assert active == ([manager.active_model] if manager.active_model else []), (active, manager.active_model)
    if manager.published is not None:
        engine = manager._slots.slots[manager.published.model].engine  # the invariant is about the device's state
        assert engine.alive and not engine.asleep
        # The published bundle was built for the engine the active slot holds (never a stale one).
        assert manager.published.bundle.engine is engine
    assert manager.snapshot().in_flight == 0
    await manager.shutdown()
    assert loader.live == [], "shutdown left engines running"
    return outcomes


@pytest.mark.parametrize("strategy_name", ["stop", "keep", "sleep"])
@pytest.mark.parametrize("mode", ["manual", "auto"])
async def test_randomized_switching_keeps_invariants(strategy_name: str, mode: str) -> None:
    totals: Counter[str] = Counter()
    for seed in SEEDS:
        totals += await _scenario(seed, strategy_name, mode)
    # The schedule must really exercise the interesting paths, or the invariants prove nothing.
    assert totals["completed"] > 100
    assert totals["switch_ok"] > 50
    assert totals["switch_SwitchFailed"] > 0
    assert totals["RequestAbortedBySwitch"] + totals["ModelSwitching"] + totals["ModelNotActive"] > 0
