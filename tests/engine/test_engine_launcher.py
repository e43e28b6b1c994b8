"""The engine launcher on plain targets (no vLLM): framing, the child's environment, process group and exit codes,
a launcher death that leaves its children running, a Turnout death that takes them, and an unfit launcher."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from server.engine.runtime import EngineLauncher, LaunchedProcess
from server.engine.runtime.framing import read_frame, write_frame
from server.engine.runtime.start_env import between_starts, spawn_env


def exit_with(code: int) -> None:
    sys.exit(code)


def sleep_forever() -> None:
    time.sleep(120)


def write_env(path: str) -> None:
    Path(path).write_text(json.dumps(dict(os.environ)))


def write_title(path: str) -> None:
    import setproctitle

    setproctitle.setproctitle("VLLM::Probe")  # what vLLM's engine core does first (its process title)
    Path(path).write_bytes(Path("/proc/self/cmdline").read_bytes())


@pytest.fixture
def launcher() -> Iterator[EngineLauncher]:
    launcher = EngineLauncher(preload=())
    launcher.start()
    assert launcher.wait_ready(60), launcher.state
    yield launcher
    launcher.stop()


def _launched(launcher: EngineLauncher, target: object, *args: object, env: dict[str, str | None] | None = None):
    process = LaunchedProcess(launcher, env or {}, target, "Probe", args)  # type: ignore[arg-type]
    process.start()
    return process


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_frames_round_trip_and_end_in_eof() -> None:
    left, right = socket.socketpair()
    message = ("launch", b"x" * 50_000, {"env": "value"})
    write_frame(left, message)
    assert read_frame(right) == message
    left.close()
    with pytest.raises(EOFError):
        read_frame(right)
    right.close()


def test_a_launched_child_has_its_own_group_and_its_exit_code(launcher: EngineLauncher) -> None:
    process = _launched(launcher, exit_with, 3)
    assert process.pid is not None and process.pid != launcher.pid
    process.join(10)
    assert not process.is_alive()
    assert process.exitcode == 3
    assert process.name == "Probe"


def test_the_child_gets_exactly_the_environment_of_its_start(
    launcher: EngineLauncher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNOUT_TEST_AT_START", "now")  # set after the launcher started: a spawn would see it
    first = _launched(launcher, write_env, str(tmp_path / "first"), env={"TURNOUT_TEST_ONE": "1"})
    first.join(10)
    monkeypatch.delenv("TURNOUT_TEST_AT_START")
    second = _launched(launcher, write_env, str(tmp_path / "second"))
    second.join(10)
    one, two = (json.loads((tmp_path / name).read_text()) for name in ("first", "second"))
    assert one["TURNOUT_TEST_ONE"] == "1" and one["TURNOUT_TEST_AT_START"] == "now"
    assert "TURNOUT_TEST_ONE" not in two and "TURNOUT_TEST_AT_START" not in two
    assert {key: value for key, value in two.items() if key != "PYTHONPATH"} == {
        key: value for key, value in os.environ.items() if key != "PYTHONPATH"
    }
    assert first.exitcode == 0 and second.exitcode == 0


def test_terminate_and_kill_read_as_their_signals(launcher: EngineLauncher) -> None:
    terminated, killed = _launched(launcher, sleep_forever), _launched(launcher, sleep_forever)
    assert terminated.is_alive() and killed.is_alive()
    assert terminated.pid is not None and os.getpgid(terminated.pid) == terminated.pid  # its own process group
    terminated.terminate()
    killed.kill()
    terminated.join(10)
    killed.join(10)
    assert (terminated.exitcode, killed.exitcode) == (-signal.SIGTERM, -signal.SIGKILL)


def test_a_launcher_death_leaves_its_children_running_and_it_comes_back(launcher: EngineLauncher) -> None:
    process = _launched(launcher, sleep_forever)
    first = launcher.pid
    assert first is not None and process.pid is not None
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while launcher.state != "ready" or launcher.pid == first:
        assert time.monotonic() < deadline, f"the launcher did not come back ({launcher.state})"
        time.sleep(0.05)
    assert process.is_alive() and psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE
    assert process.exitcode is None
    again = _launched(launcher, exit_with, 0)  # the new launcher forks
    again.join(10)
    assert again.exitcode == 0
    process.kill()
    assert _gone(process.pid, 10)


_TURNOUT = textwrap.dedent(
    """
    import time
    from server.engine.runtime import EngineLauncher, LaunchedProcess
    from tests.engine.test_engine_launcher import sleep_forever

    launcher = EngineLauncher(preload=())
    launcher.start()
    assert launcher.wait_ready(60)
    process = LaunchedProcess(launcher, {}, sleep_forever, "Probe")
    process.start()
    print(launcher.pid, process.pid, flush=True)
    time.sleep(120)
    """
)


def test_a_turnout_death_takes_the_launcher_and_its_children(tmp_path: Path) -> None:
    script = tmp_path / "turnout.py"
    script.write_text(_TURNOUT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env) as turnout:
        assert turnout.stdout is not None
        launcher_pid, child = (int(pid) for pid in turnout.stdout.readline().split())
        try:
            assert psutil.Process(child).ppid() == launcher_pid
            turnout.kill()
            turnout.wait(10)
            killed_at = time.monotonic()
            assert _gone(child, 5) and _gone(launcher_pid, 5)
            assert time.monotonic() - killed_at < 2.0
        finally:
            for pid in (child, launcher_pid):
                if not _gone(pid, 0):
                    os.kill(pid, signal.SIGKILL)


def test_a_launcher_with_a_thread_running_is_unfit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "turnout_threaded_module.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    launcher = EngineLauncher(preload=("turnout_threaded_module",))
    launcher.start()
    try:
        assert not launcher.wait_ready(60)
        assert launcher.state == "unfit"
        launcher.start()  # never again: engines spawn
        assert launcher.state == "unfit"
    finally:
        launcher.stop()


def test_a_launched_child_can_set_its_process_title(launcher: EngineLauncher, tmp_path: Path) -> None:
    process = _launched(launcher, write_title, str(tmp_path / "title"))
    process.join(10)
    assert process.exitcode == 0
    assert (tmp_path / "title").read_bytes().startswith(b"VLLM::Probe")


def test_a_launcher_started_during_a_start_gets_the_environment_between_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    # A launcher that (re)starts while a reconfigure start has glibc's malloc settings set must not read them at
    # its exec: every later fork would keep them.
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("TURNOUT_TEST_OUTER", "outer")
    launcher = EngineLauncher(preload=())
    with spawn_env({"MALLOC_TRIM_THRESHOLD_": str(2**30), "TURNOUT_TEST_OUTER": "start"}):
        with spawn_env({"TURNOUT_TEST_OUTER": "nested"}):
            assert between_starts()["TURNOUT_TEST_OUTER"] == "outer"
        launcher.start()
        try:
            assert launcher.wait_ready(60), launcher.state
            assert "MALLOC_TRIM_THRESHOLD_" not in launcher.env
            assert launcher.env["TURNOUT_TEST_OUTER"] == "outer"
        finally:
            launcher.stop()
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ and os.environ["TURNOUT_TEST_OUTER"] == "outer"
    assert between_starts() == dict(os.environ)
