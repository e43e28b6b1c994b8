"""The proof of a wake and of a stash restore, against fakes that follow vLLM's contracts (vLLM refuses sleep mode
on CPU, so no real wake runs here: these show the proof's decisions, not vLLM's wake)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.engine import SlotState, StateDir, SwitchFailed
from server.engine.strategies import SleepStrategy
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeLoader, fake_models, fake_probe
from tests.fakes.manager_views import served_engine, state_of
from tests.fakes.observers import RecordingObserver


async def test_a_wake_from_zeroed_weights_is_caught_and_a_plain_start_serves(
    make_manager: MakeManager, loader: FakeLoader, tmp_path: Path
) -> None:
    manager = make_manager(
        SleepStrategy(loader, level=2),
        probe=fake_probe,
        state=StateDir(tmp_path / "state"),
        models=fake_models("a", "b"),
    )
    observer = RecordingObserver()
    manager.add_observer(observer)
    await manager.initialize("a")
    await manager.switch("b")
    woken = await manager.switch("a")
    assert woken.verify is not None
    assert (woken.verify.outcome, woken.verify.path, woken.verify.detail) == (
        "passed",
        "wake",
        "first fingerprint recorded",
    )
    engine_a = await served_engine(manager)
    await manager.switch("b")
    engine_a.reload_misses = True  # its level-2 wake forgets reload_weights: zeroed weights answer
    report = await manager.switch("a")

    assert report.verify is not None and (report.verify.outcome, report.verify.path) == ("fell_back", "wake")
    fresh = await served_engine(manager)
    assert fresh is not engine_a and not fresh.weights_zeroed, "a plain start serves, never the zeroed engine"
    assert not engine_a.alive and loader.loads == ["a", "b", "a"]
    assert state_of(manager, "a") is SlotState.ACTIVE
    assert [(model, v.outcome) for model, v in observer.verified] == [
        ("a", "passed"),
        ("b", "passed"),
        ("a", "fell_back"),
    ]
    # Kept on the plain path: the next wake of a is replaced by a plain start at once.
    await manager.switch("b")
    again = await manager.switch("a")
    assert again.verify is not None and again.verify.outcome == "fell_back" and loader.loads[-1] == "a"


async def test_when_neither_the_wake_nor_a_plain_start_agrees_the_switch_fails_and_rolls_back(
    make_manager: MakeManager, loader: FakeLoader, tmp_path: Path
) -> None:
    manager = make_manager(
        SleepStrategy(loader, level=2),
        probe=fake_probe,
        state=StateDir(tmp_path / "state"),
        models=fake_models("a", "b"),
    )
    await manager.initialize("a")
    await manager.switch("b")
    await manager.switch("a")  # a healthy wake: a's fingerprint recorded
    engine_a = await served_engine(manager)
    await manager.switch("b")
    engine_a.reload_misses = True
    loader.answers_as["a"] = "another-checkpoint"  # the plain start answers as neither

    with pytest.raises(SwitchFailed):
        await manager.switch("a")
    assert state_of(manager, "a") is SlotState.FAILED and manager.active_model == "b"
    attempt = manager.snapshot().last_attempt
    assert attempt is not None and "plain start" in (attempt.error or "")
