"""The proof of a wake, of a resident load's forked start and of a rollback's restore, against fakes that follow
vLLM's contracts (vLLM refuses sleep mode on CPU, so no real wake runs here: these show the proof's decisions, not
vLLM's wake; the fake loader's forked starts stand for the warm launcher's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.engine import SlotState, StateDir, SwitchFailed
from server.engine.strategies import SleepStrategy
from server.engine.types.errors import LoadFailed
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeEngine, FakeLoader, fake_models, fake_probe
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


def _alive(loader: FakeLoader, name: str) -> list[FakeEngine]:
    return [engine for engine in loader.live if engine.name == name and engine.alive]


async def test_a_resident_load_whose_forked_start_answers_wrong_falls_back_to_a_plain_start(
    make_manager: MakeManager, loader: FakeLoader, tmp_path: Path
) -> None:
    loader.forks = True  # every start forks from the warm launcher but a proof's plain start, as on CPU
    manager = make_manager("keep", probe=fake_probe, state=StateDir(tmp_path / "state"), models=fake_models("a", "b"))
    observer = RecordingObserver()
    manager.add_observer(observer)
    await manager.initialize("a")
    await manager.load("b")  # a healthy fork: b's fingerprint recorded
    await manager.unload("b")
    loader.forked_answers_as["b"] = "stale"  # the next fork of b answers from state the fork inherited

    report = await manager.load("b")

    assert report.changed and state_of(manager, "b") is SlotState.RESIDENT
    (engine,) = _alive(loader, "b")
    assert engine.answers_as == "b", "the plain start is resident, never the fork that answered wrong"
    assert [(model, v.path, v.outcome) for model, v in observer.verified] == [
        ("a", "fork", "passed"),
        ("b", "fork", "passed"),
        ("b", "fork", "fell_back"),
    ]
    await manager.switch("b")  # activating a proven resident proves nothing again
    assert len(observer.verified) == 3 and (await served_engine(manager)) is engine


async def test_a_resident_load_that_neither_start_proves_fails_and_is_not_resident(
    make_manager: MakeManager, loader: FakeLoader, tmp_path: Path
) -> None:
    loader.forks = True
    manager = make_manager("keep", probe=fake_probe, state=StateDir(tmp_path / "state"), models=fake_models("a", "b"))
    await manager.initialize("a")
    await manager.load("b")
    await manager.unload("b")
    loader.forked_answers_as["b"] = "stale"
    loader.answers_as["b"] = "another-checkpoint"  # the plain start answers as neither

    with pytest.raises(LoadFailed, match="plain start"):
        await manager.load("b")
    assert state_of(manager, "b") is SlotState.FAILED and not _alive(loader, "b")
    assert manager.active_model == "a"


async def test_a_rollback_proves_the_old_model_it_brings_back(
    make_manager: MakeManager, loader: FakeLoader, tmp_path: Path
) -> None:
    loader.forks = True
    manager = make_manager("stop", probe=fake_probe, state=StateDir(tmp_path / "state"), models=fake_models("a", "b"))
    observer = RecordingObserver()
    manager.add_observer(observer)
    await manager.initialize("a")  # a's fingerprint recorded
    loader.fail_load.add("b")
    loader.forked_answers_as["a"] = "stale"  # the rollback's fork of a answers wrong

    with pytest.raises(SwitchFailed):
        await manager.switch("b")
    assert manager.active_model == "a" and (await served_engine(manager)).answers_as == "a"
    assert [(model, v.path, v.outcome) for model, v in observer.verified][-1] == ("a", "fork", "fell_back")
