"""An engine start's phases: laid on one timeline from Turnout's stamps and the engine processes' events, read from
a private file, carried to the switch report and the model's slot, and shown by the status (no engine here)."""

from __future__ import annotations

import os
import stat
from typing import Any

import msgspec
import pytest

from server.engine import EngineStart
from server.engine.runtime.start_phases import ENGINE_STARTS, PHASES, engine_start_phases, timed_start
from server.vllm_plugin import START_LOG_ENV, StartEvent
from server.vllm_plugin.start_log import append_event
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeEngine, FakeLoader

BEGAN = 1000.0


def _event(event: str, at: float, *args: float, role: str = "worker", pid: int = 4242) -> dict[str, Any]:
    return {"event": event, "at": BEGAN + at, "args": list(args), "pid": pid, "role": role}


#: A spawned CPU start as vLLM's processes record it (seconds after BEGAN).
EVENTS = [
    _event(StartEvent.REGISTERED, 10.0, BEGAN + 0.5, role="core"),  # core created at 0.5, imports done at 10
    _event(StartEvent.REGISTERED, 22.0, BEGAN + 10.5),  # worker created at 10.5, imports done at 22
    _event(StartEvent.MODEL_INIT, 23.5, 1.0),  # built from 22.5 to 23.5
    _event(StartEvent.WEIGHTS, 23.6, 0.05),
    _event(StartEvent.WARMUP_START, 25.7),
    _event(StartEvent.WARMUP_END, 26.0),
    _event(StartEvent.ENGINE_INIT, 26.5, 1.0, 0.25, role="core"),  # 25.5 to 26.5, 0.25 s of it compiling
]


def test_a_start_is_laid_on_one_timeline_that_adds_up_to_its_total() -> None:
    start = engine_start_phases(BEGAN, BEGAN + 0.1, BEGAN + 27.5, EVENTS)
    assert start.phases_ms == {
        "config": 100,
        "launch": 400,
        "core_imports": 9500,
        "core_setup": 500,
        "worker_imports": 11500,
        "worker_setup": 500,
        "model_init": 1000,
        "weights": 100,
        "post_weights": 1900,
        "kv_cache": 450,
        "warmup": 300,
        "compile": 250,
        "ready": 1000,
    }
    assert list(start.phases_ms) == [p for p in PHASES if p in start.phases_ms]  # in the order they ran
    assert start.total_ms == 27500 and sum(start.phases_ms.values()) <= start.total_ms
    assert start.started_at == BEGAN


def test_a_missing_event_leaves_its_phase_out_and_its_time_in_the_next() -> None:
    no_worker = [e for e in EVENTS if not (e["event"] == StartEvent.REGISTERED and e["role"] == "worker")]
    start = engine_start_phases(BEGAN, None, BEGAN + 27.5, no_worker)
    assert "config" not in start.phases_ms and "worker_imports" not in start.phases_ms
    assert start.phases_ms["launch"] == 500
    assert start.phases_ms["worker_setup"] == 12500  # the core's set-up and the worker's imports went in here
    assert sum(start.phases_ms.values()) == start.total_ms


def test_clocks_that_disagree_never_make_a_phase_negative_nor_longer_than_the_start() -> None:
    skewed = [*EVENTS, _event(StartEvent.WEIGHTS, -5.0, 0.01)]  # an event before the start began
    start = engine_start_phases(BEGAN, BEGAN + 0.1, BEGAN + 20.0, skewed)  # ready before the engine's last lines
    assert all(ms >= 0 for ms in start.phases_ms.values())
    assert sum(start.phases_ms.values()) <= start.total_ms == 20000


def test_nothing_measured_is_all_ready() -> None:
    start = engine_start_phases(BEGAN, None, BEGAN + 2.0, [])
    assert start.phases_ms == {"ready": 2000}


def test_the_events_file_is_private_read_back_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    with timed_start() as timer:
        path = timer.events_path
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        monkeypatch.setenv(START_LOG_ENV, timer.env[START_LOG_ENV])
        timer.begin()
        assert append_event(StartEvent.WEIGHTS, BEGAN, [0.5])  # this process: vLLM loads the plugin here too
        with open(path, "a", encoding="utf-8") as file:
            file.write(msgspec.json.encode(_event(StartEvent.WEIGHTS, 1.0, 0.25)).decode() + "\n")
            file.write("not json\n")
        assert timer.events() == [_event(StartEvent.WEIGHTS, 1.0, 0.25)]  # its own line and the garbage skipped
        assert timer.result() is None  # not ready yet
        timer.engine_ready()
        result = timer.result()
        assert result is not None and result.total_ms >= 0
    assert not os.path.exists(os.path.dirname(path))


def test_the_folder_goes_when_the_start_fails() -> None:
    with pytest.raises(RuntimeError), timed_start() as timer:
        raise RuntimeError("engine died")
    assert not os.path.exists(os.path.dirname(timer.events_path))


def test_a_start_is_taken_once() -> None:
    engine, start = FakeEngine("a"), EngineStart(started_at=BEGAN, total_ms=5, phases_ms={"ready": 5})
    ENGINE_STARTS.record(engine, start)
    assert ENGINE_STARTS.take(engine) is start
    assert ENGINE_STARTS.take(engine) is None
    ENGINE_STARTS.record("not weak-referenceable", start)  # ignored, never raises
    assert ENGINE_STARTS.take("not weak-referenceable") is None


def test_describe_says_the_total_and_each_phase() -> None:
    start = EngineStart(started_at=BEGAN, total_ms=3400, phases_ms={"config": 10, "kv_cache": 60})
    assert start.describe() == "3.4 s: config 10 ms, kv cache 60 ms"


class _TimedLoader(FakeLoader):
    """A loader that, as vLLM's, records each engine's start phases."""

    async def load(self, name: str, model: Any, *, sleep_mode: bool = False) -> FakeEngine:
        engine = await super().load(name, model, sleep_mode=sleep_mode)
        phases = {"launch": 100 * len(self.loads), "weights": 10}
        ENGINE_STARTS.record(engine, EngineStart(started_at=BEGAN, total_ms=200 * len(self.loads), phases_ms=phases))
        return engine


@pytest.fixture
def loader() -> FakeLoader:
    return _TimedLoader()


async def test_the_switch_report_and_the_slot_carry_the_last_start(make_manager: MakeManager) -> None:
    manager = make_manager("stop")
    await manager.initialize("a")
    report = await manager.switch("b")
    assert report.engine_start is not None and report.engine_start.phases_ms == {"launch": 200, "weights": 10}
    back = await manager.switch("a")
    assert back.engine_start is not None and back.engine_start.total_ms == 600  # a's second start
    slots = {slot.name: slot for slot in manager.snapshot().slots}
    assert slots["a"].last_start == back.engine_start
    assert slots["b"].last_start == report.engine_start  # kept after b's engine stopped
    assert slots["c"].last_start is None  # never started
    body = msgspec.to_builtins(manager.snapshot())
    assert body["slots"][1]["last_start"]["phases_ms"] == {"launch": 200, "weights": 10}


async def test_a_switch_that_starts_no_engine_reports_no_start(make_manager: MakeManager) -> None:
    manager = make_manager("keep")
    await manager.initialize("a")
    await manager.switch("b")
    back = await manager.switch("a")  # a's engine was kept: nothing started
    assert back.engine_start is None
    assert manager.snapshot().slots[0].last_start is not None  # its first start is still its last


async def test_fake_engines_without_phases_report_none(make_manager: MakeManager, loader: FakeLoader) -> None:
    manager = make_manager("stop")
    plain = FakeLoader()
    loader.load = plain.load  # type: ignore[method-assign]  # records nothing, as every fake loader
    await manager.initialize("a")
    report = await manager.switch("b")
    assert report.engine_start is None
    assert all(slot.last_start is None for slot in manager.snapshot().slots)
