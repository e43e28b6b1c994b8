"""The engine watch against a fake engine: each way of dying is reported once, with its cause, and in time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from server.engine.supervision.progress import BUSY_CPU_SHARE, busiest, cpu_times, cpu_used, is_busy, outputs_taken
from server.engine.supervision.watch import EngineWatch, EngineWatches, Supervision, describe_exit, engine_is_dead
from tests.fakes.supervised import FakeSupervisedEngine, KillRecorder
from tests.waiting import until

FAST = Supervision(health_interval_s=0.05, health_timeout_s=0.1, poll_interval_s=0.01)


class Deaths:
    """Records every ``on_death`` call."""

    def __init__(self) -> None:
        self.causes: list[str] = []
        self.event = asyncio.Event()

    async def __call__(self, cause: str) -> None:
        self.causes.append(cause)
        self.event.set()

    async def first(self, timeout: float = 2.0) -> str:
        await asyncio.wait_for(self.event.wait(), timeout)
        return self.causes[0]


def test_exit_codes_name_the_signal() -> None:
    assert describe_exit(-9) == "killed by signal 9 (SIGKILL)"
    assert describe_exit(-11) == "killed by signal 11 (SIGSEGV)"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-200) == "killed by signal 200"


async def test_a_killed_engine_core_is_reported_once_with_its_signal() -> None:
    engine, deaths = FakeSupervisedEngine(), Deaths()
    kill = KillRecorder()
    watch = EngineWatch(engine, deaths, name="a", settings=FAST, kill=kill).start()
    await asyncio.sleep(0.05)
    assert deaths.causes == []
    engine.exit(-9)
    engine.errored = True  # vLLM's monitor thread flags it too: the exit code still names the cause
    assert await deaths.first() == "engine died: killed by signal 9 (SIGKILL)"
    await asyncio.sleep(0.1)
    assert deaths.causes == ["engine died: killed by signal 9 (SIGKILL)"]
    assert kill.killed == []  # a dead engine's processes are vLLM's to clean up; only a hung one is killed
    assert not watch.running


async def test_vllms_dead_flag_alone_is_a_death() -> None:
    engine, deaths = FakeSupervisedEngine(), Deaths()
    loop = asyncio.get_running_loop()
    handler: asyncio.Future[None] = loop.create_future()
    handler.set_exception(RuntimeError("socket closed"))
    engine.output_handler = handler
    EngineWatch(engine, deaths, name="a", settings=FAST).start()
    engine.errored = True
    cause = await deaths.first()
    assert cause == "engine died: vLLM's output handler failed (RuntimeError: socket closed)"


async def test_a_frozen_engine_core_is_noticed_within_interval_plus_timeout_and_killed() -> None:
    engine, deaths = FakeSupervisedEngine(), Deaths()
    kill = KillRecorder(engine)
    EngineWatch(engine, deaths, name="a", settings=FAST, kill=kill).start()
    await until(lambda: len(engine.calls) >= 2, what="two health checks")
    assert deaths.causes == []  # answered
    engine.frozen = True
    frozen_at = time.perf_counter()
    cause = await deaths.first()
    noticed_s = time.perf_counter() - frozen_at
    assert cause == (
        "engine hung: no answer to a health check within 0.1 s and no progress "
        "(its busiest thread used 0.00 s of CPU time in the last 0.1 s, all its processes 0.00 s; "
        "no output of it arrived)"
    )
    # Not before the timeout; the ceiling is generous (a loaded 2-core machine), yet far below a missed check's.
    assert FAST.health_timeout_s <= noticed_s <= 10 * (FAST.health_interval_s + FAST.health_timeout_s) + 0.1
    assert kill.killed == [[engine.process.pid]]
    await asyncio.sleep(0.05)
    assert len(deaths.causes) == 1  # the kill's exit code is not reported a second time


async def test_a_suspended_watch_sends_no_health_checks_but_still_notices_death() -> None:
    engine, deaths = FakeSupervisedEngine(), Deaths()
    watch = EngineWatch(engine, deaths, name="a", settings=FAST).start()
    async with watch.suspended():
        engine.frozen = True  # an in-place swap holds the busy loop
        calls = len(engine.calls)
        await asyncio.sleep(0.3)
        assert deaths.causes == [] and len(engine.calls) == calls
        engine.exit(1)
        assert await deaths.first() == "engine died: exited with code 1"


async def test_stop_ends_the_watch_without_a_death_and_leaves_no_task() -> None:
    engine, deaths = FakeSupervisedEngine(), Deaths()
    watch = EngineWatch(engine, deaths, name="a", settings=FAST).start()
    await asyncio.sleep(0.05)
    await watch.stop()
    engine.exit(-9)
    await asyncio.sleep(0.1)
    assert deaths.causes == [] and not watch.running
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "watch a"]


async def test_a_death_handler_may_stop_its_own_watch() -> None:
    engine = FakeSupervisedEngine()
    done = asyncio.Event()
    watch: EngineWatch

    async def unload(cause: str) -> None:
        await watch.stop()  # the manager unloads the dead engine, which stops its watch
        done.set()

    watch = EngineWatch(engine, unload, name="a", settings=FAST).start()
    engine.exit(-9)
    await asyncio.wait_for(done.wait(), 2.0)


async def test_a_failing_handler_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeSupervisedEngine()

    async def broken(cause: str) -> None:
        raise RuntimeError("handler bug")

    watch = EngineWatch(engine, broken, name="a", settings=FAST).start()
    engine.exit(-9)
    for _ in range(100):
        if not watch.running:
            break
        await asyncio.sleep(0.01)
    assert not watch.running
    assert "handling the death of a's engine failed" in caplog.text


async def test_watches_tell_the_owner_which_engine_died_and_forget_unloaded_ones() -> None:
    watches = EngineWatches(FAST, kill=KillRecorder())
    told: list[tuple[object, str]] = []
    event = asyncio.Event()

    async def on_death(engine: object, cause: str) -> None:
        told.append((engine, cause))
        event.set()

    watches.supervise(on_death)
    a, b = FakeSupervisedEngine(1), FakeSupervisedEngine(2)
    watches.watch("a", a)
    watches.watch("b", b)
    await watches.forget(a)
    a.exit(-9)
    b.exit(-15)
    await asyncio.wait_for(event.wait(), 2.0)
    await asyncio.sleep(0.05)
    assert told == [(b, "engine died: killed by signal 15 (SIGTERM)")]
    assert watches.of(a) is None and watches.of(b) is None
    await watches.stop_all()


def test_an_engine_is_dead_by_its_flag_or_by_an_exited_process() -> None:
    engine = FakeSupervisedEngine()
    assert not engine_is_dead(engine)
    engine.exit(-9)  # vLLM fails its requests before it raises its flag: the exit code already tells
    assert engine_is_dead(engine)
    flagged = FakeSupervisedEngine()
    flagged.errored = True
    assert engine_is_dead(flagged) and not engine_is_dead(object())


class CpuClock:
    """A progress probe whose engine has ``threads`` threads, each using ``share`` of a core while the test's clock
    runs (thread ids: the pid, then the pid + 1, ...)."""

    def __init__(self, share: float, threads: int = 1) -> None:
        self.share, self.threads = share, threads
        self.started = time.perf_counter()
        self.pids: list[list[int]] = []

    def __call__(self, pids: Sequence[int]) -> dict[int, float]:
        self.pids.append(list(pids))
        used = self.share * (time.perf_counter() - self.started)
        return {pid + thread: used for pid in pids for thread in range(self.threads)}


async def test_a_busy_engine_that_answers_late_is_not_hung(caplog: pytest.LogCaptureFixture) -> None:
    engine, deaths = FakeSupervisedEngine(), Deaths()
    busy = CpuClock(share=1.0)  # a step that holds the busy loop and a whole core
    kill = KillRecorder(engine)
    EngineWatch(engine, deaths, name="a", settings=FAST, kill=kill, progress=busy).start()
    await asyncio.sleep(0.1)
    engine.frozen = True
    await asyncio.sleep(1.0)  # ten times the health timeout
    assert deaths.causes == [] and kill.killed == []
    assert busy.pids and busy.pids[-1] == [engine.process.pid]
    assert caplog.text.count("but the engine is busy") == 1, "said once per late round trip"
    busy.share = 0.0  # then it stops working: the next window finds no progress
    stopped_at = time.perf_counter()
    cause = await deaths.first()
    assert time.perf_counter() - stopped_at <= 2 * FAST.health_timeout_s + 0.2
    assert cause.startswith("engine hung: no answer to a health check within ") and "no progress" in cause
    assert kill.killed == [[engine.process.pid]]


async def test_an_engine_using_a_sliver_of_cpu_is_not_busy() -> None:
    engine, deaths = FakeSupervisedEngine(), Deaths()
    idle = CpuClock(share=BUSY_CPU_SHARE / 2)  # a stopped core's workers polling their queue
    EngineWatch(engine, deaths, name="a", settings=FAST, kill=KillRecorder(engine), progress=idle).start()
    engine.frozen = True
    assert "and no progress" in await deaths.first()


async def test_many_threads_each_using_a_sliver_are_not_busy(caplog: pytest.LogCaptureFixture) -> None:
    # A stopped vLLM CPU engine: its worker's thirty background threads (gloo, ZeroMQ) used 3-8 % of a core in all,
    # around the busy share, and killed the stopped engine only after 18 s on a loaded machine (a CI run).
    engine, deaths = FakeSupervisedEngine(), Deaths()
    idle = CpuClock(share=BUSY_CPU_SHARE / 10, threads=30)  # 1.5 times the busy share in all
    EngineWatch(engine, deaths, name="a", settings=FAST, kill=KillRecorder(engine), progress=idle).start()
    engine.frozen = True
    cause = await deaths.first()
    assert cause.startswith(
        f"engine hung: no answer to a health check within {FAST.health_timeout_s:g} s and no progress"
    ), cause
    assert "but the engine is busy" not in caplog.text


async def test_an_engine_whose_outputs_still_arrive_is_not_hung(caplog: pytest.LogCaptureFixture) -> None:
    # A CI run: a stream of 16 choices with 20 logprobs a token. The engine core was done with its steps and idle
    # (its busiest thread 0.36 s in 10 s) while this process still turned its outputs into events, and the health
    # answer waited behind them: the watch killed a working engine. Outputs still arriving are progress.
    engine, deaths = FakeSupervisedEngine(), Deaths()
    kill = KillRecorder(engine)
    idle = CpuClock(share=0.0)
    EngineWatch(engine, deaths, name="a", settings=FAST, kill=kill, progress=idle).start()
    client = engine.engine_core
    taken: list[object] = []

    async def output_handler() -> None:  # vLLM's: takes each batch from the client, looked up at every call
        while True:
            taken.append(await client.get_output_async())
            await asyncio.sleep(0.02)  # this process is the slow one: a batch every 20 ms

    handler = asyncio.create_task(output_handler())
    try:
        for batch in range(60):
            client.send(batch)
        engine.frozen = True  # the health answer waits behind the batches not taken yet
        await asyncio.sleep(0.8)  # eight health timeouts
        assert deaths.causes == [] and kill.killed == [], "a working engine was taken for hung"
        assert 10 < len(taken) < 60
        assert caplog.text.count("but the engine is busy") == 1
        assert "batches of its outputs arrived" in caplog.text
        # Then the last batch is taken and nothing more comes: no progress of either kind.
        cause = await deaths.first(timeout=5.0)
        assert len(taken) == 60
        assert cause.endswith("all its processes 0.00 s; no output of it arrived)"), cause
        assert kill.killed == [[engine.process.pid]]
    finally:
        handler.cancel()


async def test_outputs_taken_counts_the_batches_the_output_handler_takes() -> None:
    engine = FakeSupervisedEngine()
    client = engine.engine_core
    first, second = outputs_taken(engine), outputs_taken(engine)
    assert first() == second() == 0
    client.send("a")
    client.send("b")
    assert await client.get_output_async() == "a"
    assert await client.get_output_async() == "b"
    assert first() == second() == 2  # one counter per client, however many readers
    assert outputs_taken(object())() == 0  # no engine-core client: nothing is counted, nothing breaks


def test_cpu_used_counts_every_thread_once_and_new_ones_whole() -> None:
    assert cpu_used({1: 2.0, 2: 5.0}, {1: 3.5, 2: 5.0, 3: 0.25}) == 1.75
    assert cpu_used({1: 2.0, 2: 5.0}, {1: 2.0}) == 0.0  # a thread that ended takes nothing back
    assert busiest({1: 2.0, 2: 5.0}, {1: 3.5, 2: 5.0, 3: 0.25}) == 1.5
    assert busiest({1: 2.0}, {}) == 0.0
    assert is_busy(0.05, 1.0) and not is_busy(0.01, 1.0)


def test_cpu_times_reads_this_process_and_its_children() -> None:
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        times = cpu_times([os.getpid()])
        assert times[os.getpid()] > 0 and child.pid in times
    finally:
        child.kill()
        child.wait()


async def test_cpu_times_count_the_work_of_a_child_that_ended_between_two_readings() -> None:
    # An engine worker compiling a first-time kernel waits, idle, for a C++ compiler that has exited by the next
    # reading: the compiler's CPU time is work of the worker's (two runs killed an engine so, mid-compile).
    import subprocess
    import sys

    import psutil

    burn = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    compiler = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}]); time.sleep(30)"
    worker = subprocess.Popen([sys.executable, "-c", compiler])
    try:
        before = cpu_times([worker.pid])
        reaped = psutil.Process(worker.pid).cpu_times
        await until(lambda: reaped().children_user > 0, 30, "the compiler's end")
        after = cpu_times([worker.pid])
        assert set(after) == {worker.pid, -worker.pid}  # the compiler is gone, its threads with it
        assert busiest(before, after) >= 0.4, (before, after)
    finally:
        worker.kill()
        worker.wait()
