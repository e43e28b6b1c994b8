"""The hook into vLLM: for one engine start, vLLM's engine-core process comes from the launcher.

vLLM 0.32's ``CoreEngineProcManager`` (``vllm/v1/engine/utils.py``) builds each engine core with
``get_mp_context().Process(target=..., name=..., kwargs=...)``, calling the module-global name :data:`PATCHED`.
:func:`launched_starts` points that name at a :class:`LauncherContext` for the duration of one start (under the
loader's ``_env_lock``, so no other start sees it) and puts vLLM's own back after, whatever happened. The context's
``Process`` is a :class:`LaunchedProcess`; everything else (``Queue`` ...) is vLLM's own context's.

The core forks its worker (``VLLM_WORKER_MULTIPROC_METHOD=fork`` in its environment; measured safe on CPU:
the worker then shares the core's imports and its process group.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from server.engine.runtime.launcher import EngineLauncher
from server.engine.runtime.process import LaunchedProcess

__all__ = ["CHILD_ENV", "EXEC_ONLY_ENV", "PATCHED", "LauncherContext", "launched_starts"]

#: The one vLLM attribute this module replaces: ``(module, name)``.
PATCHED = ("vllm.v1.engine.utils", "get_mp_context")
#: What a forked core's environment gets on top of Turnout's: its worker is forked from it, not spawned.
CHILD_ENV: Mapping[str, str | None] = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}

#: A variable only an exec applies: a core forked from a launcher started without it would run without it.
EXEC_ONLY_ENV = "LD_PRELOAD"

logger = logging.getLogger("turnout.engine.launcher")

_module = importlib.import_module(PATCHED[0])
if not callable(getattr(_module, PATCHED[1], None)):  # checked at import: a vLLM that moved it fails loudly here
    raise ImportError(f"{PATCHED[0]}.{PATCHED[1]} is gone from this vLLM: the engine launcher cannot hook in")


class LauncherContext:
    """A ``multiprocessing`` context whose ``Process`` the launcher forks; vLLM's own context for the rest.

    Args:
        launcher: The ready launcher.
        vllm_context: vLLM's own ``get_mp_context`` (called for anything but ``Process``).
    """

    def __init__(self, launcher: EngineLauncher, vllm_context: Callable[[], Any]) -> None:
        self._launcher = launcher
        self._vllm_context = vllm_context
        self.processes: list[LaunchedProcess] = []

    def Process(
        self,
        target: Callable[..., Any],
        name: str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        daemon: bool | None = None,
    ) -> Any:
        if kwargs is not None and kwargs.get("tensor_queue") is not None:
            # A multiprocessing queue travels only through a spawn (its pipes are handed over by it).
            return self._vllm_context().Process(target=target, name=name, args=args, kwargs=kwargs, daemon=daemon)
        if not self._launcher.alive:  # it died since this start chose it: this core is spawned
            return self._vllm_context().Process(target=target, name=name, args=args, kwargs=kwargs, daemon=daemon)
        if self._launcher.env.get(EXEC_ONLY_ENV) != os.environ.get(EXEC_ONLY_ENV):
            # vLLM's CPU platform set LD_PRELOAD (torch's libgomp, tcmalloc) for its children as this start built
            # its config; only an exec applies it: this core is spawned, and the launcher starts again with it.
            logger.warning(
                "the engine launcher lacks %s=%s: this engine core is spawned; restarting it",
                EXEC_ONLY_ENV,
                os.environ.get(EXEC_ONLY_ENV),
            )
            threading.Thread(target=self._launcher.restart, name="engine-launcher-restart", daemon=True).start()
            return self._vllm_context().Process(target=target, name=name, args=args, kwargs=kwargs, daemon=daemon)
        process = LaunchedProcess(self._launcher, CHILD_ENV, target, name, args, kwargs, daemon)
        self.processes.append(process)
        return process

    def __getattr__(self, name: str) -> Any:
        return getattr(self._vllm_context(), name)

    def kill_started(self) -> list[int]:
        """SIGKILL the process group of every core this start forked (a start that timed out); their pids."""
        for process in self.processes:
            process.kill_group()
        return [process.pid for process in self.processes if process.pid is not None]


@contextlib.contextmanager
def launched_starts(launcher: EngineLauncher) -> Iterator[LauncherContext]:
    """vLLM's engine cores started inside come from ``launcher``; vLLM's own context is back after."""
    module = importlib.import_module(PATCHED[0])
    original = getattr(module, PATCHED[1])
    context = LauncherContext(launcher, original)
    setattr(module, PATCHED[1], lambda: context)
    try:
        yield context
    finally:
        setattr(module, PATCHED[1], original)
