"""The launcher's one hook into vLLM: the name it replaces exists in the installed vLLM and is what vLLM's engine-core
manager calls, and vLLM's own is back after a start, whether the start worked or failed (no engine started)."""

from __future__ import annotations

import importlib
import inspect
import time

import pytest

from server.engine.runtime import EngineLauncher, LaunchedProcess
from server.engine.runtime.context import PATCHED, launched_starts


def test_the_patched_name_is_what_vllm_calls_for_its_engine_cores() -> None:
    module = importlib.import_module(PATCHED[0])
    assert callable(getattr(module, PATCHED[1]))
    source = inspect.getsource(module.CoreEngineProcManager.__init__)
    assert f"context = {PATCHED[1]}()" in source and "context.Process(" in source


def test_vllm_sets_up_its_logging_again_in_the_engine_core() -> None:
    """A forked core inherits the launcher's logging set-up; vLLM's core applies its own again as it starts, so the
    formatter is built in the core's environment (its served model, ``TURNOUT_LOG_MODEL``, as a spawned core's)."""
    from vllm.v1.engine.core import EngineCoreProc

    assert "configure_logging(logging_config)" in inspect.getsource(EngineCoreProc.run_engine_core)


def test_vllm_s_own_context_is_back_after_a_start_and_after_a_failing_one() -> None:
    module = importlib.import_module(PATCHED[0])
    original = getattr(module, PATCHED[1])
    launcher = EngineLauncher(preload=())
    with launched_starts(launcher) as context:
        assert getattr(module, PATCHED[1])() is context
        process = module.get_mp_context().Process(target=print, name="EngineCore", kwargs={})
        assert not isinstance(process, LaunchedProcess)  # the launcher is not running: vLLM's own spawn
        assert context.processes == []
    assert getattr(module, PATCHED[1]) is original
    with pytest.raises(RuntimeError), launched_starts(launcher):
        raise RuntimeError("the start failed")
    assert getattr(module, PATCHED[1]) is original


def test_with_a_ready_launcher_vllm_s_engine_cores_are_launched_processes() -> None:
    module = importlib.import_module(PATCHED[0])
    launcher = EngineLauncher(preload=())
    launcher.start()
    try:
        assert launcher.wait_ready(60)
        with launched_starts(launcher) as context:
            process = module.get_mp_context().Process(target=print, name="EngineCore", kwargs={})
            assert isinstance(process, LaunchedProcess) and context.processes == [process]
            queue_process = module.get_mp_context().Process(target=print, kwargs={"tensor_queue": object()})
            assert not isinstance(queue_process, LaunchedProcess)  # a queue's pipes travel only through a spawn
    finally:
        launcher.stop()


def test_a_core_is_spawned_and_the_launcher_restarted_when_ld_preload_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU platform sets LD_PRELOAD as a start builds its config; a launcher started before runs without it
    (only an exec applies it): that core is spawned, and the launcher comes back with it for the next."""
    module = importlib.import_module(PATCHED[0])
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    launcher = EngineLauncher(preload=())
    launcher.start()
    try:
        assert launcher.wait_ready(60)
        first = launcher.pid
        monkeypatch.setenv("LD_PRELOAD", "")  # differs from the launcher's (unset), loads nothing
        with launched_starts(launcher):
            spawned = module.get_mp_context().Process(target=print, name="EngineCore", kwargs={})
        assert not isinstance(spawned, LaunchedProcess)
        deadline = time.monotonic() + 60
        while launcher.pid == first or launcher.state != "ready":
            assert time.monotonic() < deadline, launcher.state
            time.sleep(0.05)
        assert launcher.env.get("LD_PRELOAD") == ""
        with launched_starts(launcher):
            forked = module.get_mp_context().Process(target=print, name="EngineCore", kwargs={})
        assert isinstance(forked, LaunchedProcess)
    finally:
        launcher.stop()
