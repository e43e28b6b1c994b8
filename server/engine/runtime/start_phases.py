"""Every second of an engine start accounted for: its phases, from Turnout's stamps and the engine's own events.

Turnout's process stamps the start's beginning, the end of its ``VllmConfig`` and the engine ready
(``AsyncLLM`` built); the engine's processes record their creation, their imports and vLLM's timing lines
(``server/vllm_plugin/start_log.py``) in a file private to the start. :meth:`StartTimer.result` lays them on one
timeline, in this order, each phase ending where the next begins (so they add up to the total):

========================  ==========================================================================================
``config``                Building the ``VllmConfig`` in Turnout's process (reads the model's config).
``launch``                Turnout's side of the engine core's start: the frontend set-up, the process spawned (or
                          forked).
``core_imports``          The engine core's process from its creation to the plugin loaded: imports, handshake.
``core_setup``            The engine core's set-up up to its worker process's creation (executor, worker spawned).
``worker_imports``        The worker's process from its creation to the plugin loaded: its imports.
``worker_setup``          The worker's device and distributed set-up, up to building the model.
``model_init``            Building the model's layers (vLLM: "Initializing model took").
``weights``               Loading the weights (vLLM: "Loading weights took").
``post_weights``          After the weights up to the KV cache's sizing: weight processing (CPU: oneDNN packing),
                          the worker ready, the engine core's scheduler set-up.
``kv_cache``              Profiling, sizing and allocating the KV cache (vLLM's "init engine", less the two below).
``warmup``                The warm-up forward pass (CPU, when vLLM runs one).
``compile``               ``torch.compile`` (when vLLM compiles).
``ready``                 The engine core's post-init (tokenizer, structured output, garbage collection), its
                          ready handshake and the frontend's last steps, up to ``AsyncLLM`` built.
========================  ==========================================================================================

A phase whose events are missing (no worker process: the worker runs in the engine core; vLLM's lines logged
above ``INFO``; a vLLM that renamed them) is left out, and its time shows in the phase after it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from server.engine.types import EngineStart
from server.vllm_plugin import START_LOG_ENV, StartEvent

__all__ = ["ENGINE_STARTS", "PHASES", "EngineStarts", "StartTimer", "engine_start_phases", "timed_start"]

logger = logging.getLogger("turnout.engine")

#: The phases, in the order of a start (see the module's docstring).
PHASES = (
    "config",
    "launch",
    "core_imports",
    "core_setup",
    "worker_imports",
    "worker_setup",
    "model_init",
    "weights",
    "post_weights",
    "kv_cache",
    "warmup",
    "compile",
    "ready",
)

_EVENTS_FILE = "events.jsonl"


class StartTimer:
    """One start's stamps and the private file its engine processes record their events in.

    Args:
        events_path: The file the engine's processes append to (:data:`START_LOG_ENV`).
    """

    def __init__(self, events_path: str) -> None:
        self.events_path = events_path
        self.began: float | None = None
        self.configured: float | None = None
        self.ready: float | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment the engine's processes are started with, for them to record their events."""
        return {START_LOG_ENV: self.events_path}

    def begin(self) -> None:
        self.began = time.time()  # wall clock: the engine's processes stamp their events so

    def config_built(self) -> None:
        self.configured = time.time()

    def engine_ready(self) -> None:
        self.ready = time.time()

    def events(self) -> list[dict[str, Any]]:
        """The events the engine's processes recorded (not this process's own: vLLM loads the plugin here too)."""
        try:
            with open(self.events_path, encoding="utf-8") as file:
                lines = file.read().splitlines()
        except OSError:
            return []
        events = []
        for line in lines:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("pid") != os.getpid():
                    events.append(event)
        return events

    def result(self) -> EngineStart | None:
        """The start's phases (None before :meth:`begin` and :meth:`engine_ready` were both stamped)."""
        if self.began is None or self.ready is None:
            return None
        return engine_start_phases(self.began, self.configured, self.ready, self.events())


def engine_start_phases(
    began: float, configured: float | None, ready: float, events: Sequence[Mapping[str, Any]]
) -> EngineStart:
    """Lay a start's stamps and its engine's events on one timeline (see the module's docstring)."""
    core = _first(events, StartEvent.REGISTERED, "core")
    worker = _first(events, StartEvent.REGISTERED, "worker")
    model_init = _first(events, StartEvent.MODEL_INIT)
    weights = _first(events, StartEvent.WEIGHTS)
    engine_init = _first(events, StartEvent.ENGINE_INIT)
    engine_init_s = _arg(engine_init, 0)
    # Each mark ends the phase named beside it; the engine init's span is split below.
    marks: list[tuple[str, float | None]] = [
        ("config", configured),
        ("launch", _arg(core, 0)),
        ("core_imports", _at(core)),
        ("core_setup", _arg(worker, 0)),
        ("worker_imports", _at(worker)),
        ("worker_setup", _minus(_at(model_init), _arg(model_init, 0))),
        ("model_init", _at(model_init)),
        ("weights", _at(weights)),
        ("post_weights", _minus(_at(engine_init), engine_init_s)),
        ("engine_init", _at(engine_init)),
    ]
    phases: dict[str, float] = {}
    previous = began
    for phase, mark in marks:
        if mark is None:
            continue
        mark = min(max(mark, previous), ready)  # clocks of three processes: never backwards, never past ready
        phases[phase] = mark - previous
        previous = mark
    phases["ready"] = ready - previous
    if "engine_init" in phases:
        phases.update(_engine_init_parts(phases.pop("engine_init"), events, _arg(engine_init, 1)))
    # Rounded where they end, not one by one: the phases add up to the total, to the ms.
    ordered: dict[str, int] = {}
    elapsed, ended_ms = 0.0, 0
    for name in (name for name in PHASES if name in phases):
        elapsed += phases[name]
        ordered[name] = round(elapsed * 1000.0) - ended_ms
        ended_ms += ordered[name]
    return EngineStart(started_at=began, total_ms=round((ready - began) * 1000.0), phases_ms=ordered)


def _engine_init_parts(span: float, events: Sequence[Mapping[str, Any]], compile_s: float | None) -> dict[str, float]:
    """vLLM's "init engine" span: the warm-up (between its two lines), the compilation (its own figure), the rest
    the KV cache's profiling, sizing and allocation."""
    parts: dict[str, float] = {}
    warm_start, warm_end = _at(_first(events, StartEvent.WARMUP_START)), _at(_first(events, StartEvent.WARMUP_END))
    left = span
    if warm_start is not None and warm_end is not None:
        parts["warmup"] = min(max(warm_end - warm_start, 0.0), left)
        left -= parts["warmup"]
    if compile_s:
        parts["compile"] = min(max(compile_s, 0.0), left)
        left -= parts["compile"]
    parts["kv_cache"] = left
    return parts


def _first(events: Sequence[Mapping[str, Any]], event: str, role: str | None = None) -> Mapping[str, Any] | None:
    """The earliest ``event`` (of a process of ``role``): with several workers, the first one's."""
    found = [e for e in events if e.get("event") == event and (role is None or e.get("role") == role)]
    found = [e for e in found if isinstance(e.get("at"), int | float)]
    return min(found, key=lambda e: float(e["at"])) if found else None


def _at(event: Mapping[str, Any] | None) -> float | None:
    return None if event is None else float(event["at"])


def _arg(event: Mapping[str, Any] | None, index: int) -> float | None:
    args = event.get("args") if event is not None else None
    if not isinstance(args, list) or len(args) <= index or not isinstance(args[index], int | float):
        return None
    return float(args[index])


def _minus(at: float | None, seconds: float | None) -> float | None:
    return None if at is None or seconds is None else at - seconds


@contextlib.contextmanager
def timed_start() -> Iterator[StartTimer]:
    """A :class:`StartTimer` whose events file lives in a private folder (``mkdtemp``: mode 0700, a name nobody
    can predict), removed when the start ends, whichever way it ends."""
    folder = tempfile.mkdtemp(prefix="turnout-start-")
    try:
        path = os.path.join(folder, _EVENTS_FILE)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        yield StartTimer(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class EngineStarts:
    """Each freshly started engine's :class:`EngineStart`, from its loader to the slot that takes the engine."""

    def __init__(self) -> None:
        self._by_engine: weakref.WeakKeyDictionary[Any, EngineStart] = weakref.WeakKeyDictionary()

    def record(self, engine: Any, start: EngineStart) -> None:
        with contextlib.suppress(TypeError):  # an engine that takes no weak reference goes without
            self._by_engine[engine] = start

    def take(self, engine: Any) -> EngineStart | None:
        """``engine``'s start, once: None for an engine that was not just started (or not by a timed loader)."""
        try:
            return self._by_engine.pop(engine, None)
        except TypeError:
            return None


#: The process's engine starts (one per process, as the engines' metrics).
ENGINE_STARTS = EngineStarts()
