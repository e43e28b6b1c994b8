"""The plugin records an engine start's events from vLLM's own timing lines, recognised by their format string; the
lines it recognises are pinned against the installed vLLM's source."""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import multiprocessing
import os
import sys
import time
import types
from pathlib import Path

import pytest

from server.vllm_plugin.start_log import (
    START_LOG_ENV,
    START_MESSAGES,
    StartEvent,
    StartEventHandler,
    append_event,
    record_start_events,
)


def _record(logger: str, msg: str, *args: float) -> logging.LogRecord:
    """A record as vLLM's ``logger.info(msg, *args)`` (or ``info_once``) makes it."""
    return logging.getLogger(logger).makeRecord(logger, logging.INFO, "x.py", 1, msg, args, None)


def _events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "events.jsonl"
    path.touch(mode=0o600)
    monkeypatch.setenv(START_LOG_ENV, str(path))
    return path


def test_the_handler_records_vllm_timing_lines_by_their_arguments(events_file: Path) -> None:
    handler = StartEventHandler()
    weights = _record("vllm.model_executor.model_loader.default_loader", "Loading weights took %.2f seconds", 0.02)
    engine_init = _record(
        "vllm.v1.engine.core",
        "init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s)",
        1.5,
        0.75,
    )
    handler.handle(weights)
    handler.handle(_record("vllm.v1.engine.core", "Initializing a V1 LLM engine (v%s) with config: %s", 1.0))
    handler.handle(engine_init)
    events = _events(events_file)
    assert [e["event"] for e in events] == [StartEvent.WEIGHTS, StartEvent.ENGINE_INIT]
    assert events[0]["args"] == [0.02] and events[0]["at"] == weights.created
    assert events[1]["args"] == [1.5, 0.75] and events[1]["at"] == engine_init.created
    assert events[0]["pid"] == os.getpid()


def test_nothing_is_recorded_without_a_start_or_once_its_file_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(START_LOG_ENV, raising=False)
    assert append_event(StartEvent.WEIGHTS, time.time(), [0.1]) is False
    gone = tmp_path / "gone" / "events.jsonl"
    monkeypatch.setenv(START_LOG_ENV, str(gone))
    StartEventHandler().handle(_record("vllm.x", "Loading weights took %.2f seconds", 0.1))  # never raises
    assert not gone.parent.exists()  # the handler never creates the file (nor its folder)


def test_the_plugin_records_its_process_imports(events_file: Path) -> None:
    before = time.time()
    record_start_events()
    record_start_events()  # idempotent: one handler
    handlers = [h for h in logging.getLogger("vllm").handlers if isinstance(h, StartEventHandler)]
    assert len(handlers) == 1
    registered = [e for e in _events(events_file) if e["event"] == StartEvent.REGISTERED]
    assert registered, "no registered event"
    created = registered[0]["args"][0]  # type: ignore[index]
    assert isinstance(created, float) and created <= before <= registered[0]["at"]  # type: ignore[operator]


def _string_constants(module: str) -> set[str]:
    vllm = importlib.util.find_spec("vllm")  # the package's place only: nothing of vLLM is imported
    assert vllm is not None and vllm.origin is not None
    source = Path(vllm.origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    assert source.is_file(), f"vLLM has no module {module}"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    # ast joins implicitly concatenated literals, as Python does: the constants are the format strings vLLM logs.
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


@pytest.mark.parametrize("message", START_MESSAGES, ids=lambda m: m.event)
def test_each_recognised_line_is_in_the_installed_vllm(message: object) -> None:
    module, text, _ = message  # type: ignore[misc]
    assert text in _string_constants(module), f"vLLM's {module} no longer logs {text!r}: a start phase is lost"


def test_a_worker_is_told_from_its_engine_core_also_when_forked_from_it(
    events_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "vllm.v1.engine.core", types.ModuleType("vllm.v1.engine.core"))
    process = multiprocessing.current_process()
    monkeypatch.setattr(process, "name", "EngineCore")
    append_event(StartEvent.REGISTERED, 1.0, [])
    monkeypatch.setattr(process, "name", "VllmWorker-0")  # a fork of the core: its modules, vLLM's worker name
    append_event(StartEvent.REGISTERED, 2.0, [])
    assert [e["role"] for e in _events(events_file)] == ["core", "worker"]


def test_a_process_forked_after_the_plugin_ran_loads_it_again_and_records_its_events(events_file: Path) -> None:
    """An engine core forked by the launcher, and the worker it forks, inherit vLLM's "plugins loaded" flag; vLLM
    would skip the plugin there and the worker's events (its imports, the model, the weights) would be lost."""
    import vllm.plugins

    from server.vllm_plugin.plugin import register

    vllm.plugins.load_general_plugins()  # vLLM's own call: runs register in this process (or ran it already)
    register()
    assert vllm.plugins.plugins_loaded
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: vLLM's worker calls this as it starts
        code = 1
        try:
            flag_after_fork = vllm.plugins.plugins_loaded
            vllm.plugins.load_general_plugins()
            os.write(write, json.dumps([flag_after_fork, os.getpid()]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        flag_after_fork, child = json.loads(answer.read() or "[null, 0]")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert flag_after_fork is False and vllm.plugins.plugins_loaded  # the parent's own flag is untouched
    assert [e["event"] for e in _events(events_file) if e["pid"] == child] == [StartEvent.REGISTERED]
