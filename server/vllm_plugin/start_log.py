"""An engine start's phases, as vLLM's own processes see them: their timing log lines and their imports.

The engine core and its workers run in processes of their own, so Turnout's process cannot time their steps. vLLM
logs most of them itself ("Loading weights took 0.02 seconds", "init engine (profile, create kv cache, warmup
model) took 0.22 s"). :func:`record_start_events` adds a :class:`logging.Handler` to vLLM's ``vllm`` logger in every
process vLLM starts that recognises those lines by their format string (never by their formatted text) and appends
one JSON line per event, ``{"event", "at", "args", "pid", "role"}``, to the file named by :data:`START_LOG_ENV`.
It also records, once, when the plugin was loaded and when the process was created: the process's imports.

Turnout creates the file privately for one start (``server/engine/runtime/start_phases.py``), sets the variable around
it and reads the events back once the engine is up: the handler only appends to a file that exists (never creates
one) and reads the variable when it writes, so an engine that outlives its start writes nothing more, and a
process forked with its environment set later records as well. :data:`START_MESSAGES` is the one list of the
lines recognised; a test pins each against the installed vLLM's source, so a renamed line fails a test rather than
silently dropping a phase. vLLM logs them at ``INFO``: with ``VLLM_LOGGING_LEVEL`` above it, they are not recorded
and their time shows in the phase after them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import NamedTuple

from server.vllm_plugin.start_heap import in_worker_process

__all__ = [
    "START_LOG_ENV",
    "START_MESSAGES",
    "StartEvent",
    "StartMessage",
    "record_start_events",
]

#: The environment variable that names the file an engine start's events are appended to.
START_LOG_ENV = "TURNOUT_START_LOG"


class StartEvent:
    """The events one start records; what each event's ``args`` hold."""

    #: The plugin was loaded (the process's imports done); ``args``: ``[process creation time]`` (Unix time).
    REGISTERED = "registered"
    #: The model was built (layers, no weights); ``args[0]``: its seconds.
    MODEL_INIT = "model_init"
    #: The weights were loaded; ``args[0]``: their seconds.
    WEIGHTS = "weights"
    #: The warm-up (compilation) forward pass began / ended (CPU); no ``args``.
    WARMUP_START = "warmup_start"
    WARMUP_END = "warmup_end"
    #: The engine core sized and allocated the KV cache and warmed up; ``args[0]``: its seconds, ``args[1]`` (when
    #: vLLM compiled): the compilation's seconds within it.
    ENGINE_INIT = "engine_init"


class StartMessage(NamedTuple):
    """One vLLM log line that marks a phase: the module that logs it, its format string, the event it records."""

    module: str
    message: str
    event: str


#: Every vLLM line recognised (vLLM 0.32): pinned against the installed source by tests/vllm_plugin.
START_MESSAGES: tuple[StartMessage, ...] = (
    StartMessage(
        "vllm.model_executor.model_loader.base_loader", "Initializing model took %.6f seconds", StartEvent.MODEL_INIT
    ),
    StartMessage(
        "vllm.model_executor.model_loader.default_loader", "Loading weights took %.2f seconds", StartEvent.WEIGHTS
    ),
    StartMessage("vllm.v1.worker.cpu_model_runner", "Warming up model for the compilation...", StartEvent.WARMUP_START),
    StartMessage("vllm.v1.worker.cpu_model_runner", "Warming up done.", StartEvent.WARMUP_END),
    StartMessage(
        "vllm.v1.engine.core",
        "init engine (profile, create kv cache, warmup model) took %.2f s",
        StartEvent.ENGINE_INIT,
    ),
    StartMessage(
        "vllm.v1.engine.core",
        "init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s)",
        StartEvent.ENGINE_INIT,
    ),
    StartMessage(
        "vllm.v1.engine.core",
        "init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s — language_model: "
        "%.2f s, encoder: %.2f s)",
        StartEvent.ENGINE_INIT,
    ),
)

_EVENT_BY_MESSAGE = {m.message: m.event for m in START_MESSAGES}

#: vLLM's loggers are all children of this one (``vllm.logger.init_logger(__name__)``).
_VLLM_LOGGER = "vllm"


class StartEventHandler(logging.Handler):
    """Appends the events of the recognised vLLM lines to the file :data:`START_LOG_ENV` names, when it is set."""

    def emit(self, record: logging.LogRecord) -> None:
        event = _EVENT_BY_MESSAGE.get(record.msg) if isinstance(record.msg, str) else None
        if event is not None:
            args = record.args if isinstance(record.args, tuple) else ()
            append_event(event, record.created, [a for a in args if isinstance(a, int | float)])


def append_event(event: str, at: float, args: list[float]) -> bool:
    """Append one event to the start's file; False when no start is being recorded (or the file is gone)."""
    path = os.environ.get(START_LOG_ENV)
    if not path:
        return False
    line = json.dumps({"event": event, "at": at, "args": args, "pid": os.getpid(), "role": _role()}) + "\n"
    try:
        # Only into the file Turnout made: no O_CREAT (a start that ended removed it), no symlink followed.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        os.write(fd, line.encode())  # one write of a short line: lines of the core and the workers never interleave
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _role() -> str:
    # vLLM names its worker processes so; a worker forked from its engine core has the
    # core's modules too. Otherwise as plugin.register tells them apart: only the engine core imported EngineCore.
    if in_worker_process():
        return "worker"
    return "core" if "vllm.v1.engine.core" in sys.modules else "worker"


_handler: StartEventHandler | None = None


def record_start_events() -> None:
    """Record this process's start events from now on (idempotent), and that its imports are done."""
    global _handler
    if _handler is None:
        _handler = StartEventHandler()
    vllm_logger = logging.getLogger(_VLLM_LOGGER)
    if _handler not in vllm_logger.handlers:  # also after a logging set-up that replaced vLLM's handlers
        vllm_logger.addHandler(_handler)
    created = _process_created()
    append_event(StartEvent.REGISTERED, time.time(), [] if created is None else [created])


def _process_created() -> float | None:
    """When this process was created, in Unix time, to the kernel's tick (10 ms); None off Linux.

    Not ``psutil.Process().create_time()``: it adds the boot time in whole seconds, up to a second off against
    ``time.time()``, which would swallow the ms this process's start took. The kernel counts a process's start in
    ticks of the boot-time clock, so its age is read on that clock and taken from now.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as file:
            fields = file.read().rsplit(")", 1)[1].split()
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime; the 3rd after the name
        age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - started_s
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - age_s
