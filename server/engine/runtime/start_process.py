"""How a start's engine core comes to be: forked by the warm engine launcher where the platform allows, else spawned
by vLLM as it does on its own; and which processes a start made, so that a start that hangs is ended by killing
those and no others.

Forking is decided per start (:func:`forks`): the launcher must be on (``TURNOUT_ENGINE_LAUNCHER``), the device a
CPU (the launcher is measured there only), the engine not NUMA-bound (vLLM binds through the executable it spawns)
and not in a Ray actor (vLLM forces spawn there), and not inside :func:`spawned_starts` (a switch's proof falls back
to a plain start: a freshly spawned engine, which no fork's inherited state can have touched). Each reason to spawn
is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from server.engine.runtime.host import detect_device
from server.engine.runtime.launcher import EngineLauncher, engine_launcher, launcher_enabled, running_launcher_pid

if TYPE_CHECKING:
    from server.engine.runtime.context import LauncherContext

__all__ = [
    "LAUNCHER_WAIT_S",
    "forks",
    "launched_or_spawned",
    "launcher_for",
    "spawn_only",
    "spawned_pids",
    "spawned_starts",
]

logger = logging.getLogger("turnout.engine")

#: How long a start waits for the engine launcher's first warm-up before its core is spawned instead.
LAUNCHER_WAIT_S = 60.0

_spawn_reasons: set[str] = set()
#: Set inside :func:`spawned_starts` (per task: a context variable follows the awaits of the task that set it).
_SPAWN_ONLY: ContextVar[bool] = ContextVar("turnout_spawn_only", default=False)


@contextlib.contextmanager
def spawned_starts() -> Iterator[None]:
    """Engine cores started inside (in this task) are spawned, never forked from the launcher."""
    token = _SPAWN_ONLY.set(True)
    try:
        yield
    finally:
        _SPAWN_ONLY.reset(token)


def spawn_only() -> bool:
    """Whether starts in this task are spawned whatever :func:`forks` says (inside :func:`spawned_starts`)."""
    return _SPAWN_ONLY.get()


def _spawn_because(reason: str) -> None:
    if reason not in _spawn_reasons:
        _spawn_reasons.add(reason)
        logger.info("%s", reason)


def forks(args: Any) -> bool:
    """Whether the start of ``args`` (vLLM's engine args; None: any start) may fork its engine core from the
    launcher (else it is spawned; logged once, why)."""
    if not launcher_enabled():
        return False
    device = detect_device()
    if device != "cpu":
        _spawn_because(f"engines on {device} start by spawn: the engine launcher is measured on CPU only")
        return False
    if getattr(args, "numa_bind", False):
        _spawn_because("engines with numa_bind start by spawn: vLLM binds them through the executable it spawns")
        return False
    from vllm.ray.lazy_utils import is_in_ray_actor

    if is_in_ray_actor():  # type: ignore[no-untyped-call]
        _spawn_because("engines in a Ray replica start by spawn (vLLM forces it in a Ray actor)")
        return False
    return True


async def launcher_for(args: Any) -> EngineLauncher | None:
    """The ready launcher the start of ``args`` forks its engine core from; None: it is spawned."""
    if spawn_only() or not forks(args):
        return None
    if running_launcher_pid() is None:
        # vLLM's CPU platform sets variables for its children as it builds a config (LD_PRELOAD, read at exec
        # only): built once first, the launcher starts with them, as `turnout serve`'s does after its plan.
        from vllm.usage.usage_lib import UsageContext

        await asyncio.to_thread(args.create_engine_config, UsageContext.OPENAI_API_SERVER)
    launcher = engine_launcher()
    # Waiting for a first warm-up (10-25 s, begun at the server's start) is quicker than a spawn (30-60 s).
    if not await asyncio.to_thread(launcher.wait_ready, LAUNCHER_WAIT_S):
        logger.info("the engine launcher is %s: this engine core is spawned", launcher.state)
        return None
    return launcher


@contextlib.contextmanager
def launched_or_spawned(launcher: EngineLauncher | None) -> Iterator[LauncherContext | None]:
    """Engine cores started inside are forked by ``launcher`` (None: spawned by vLLM, as it does on its own)."""
    if launcher is None:
        yield None
        return
    from server.engine.runtime.context import launched_starts

    with launched_starts(launcher) as context:
        yield context


def spawned_pids() -> set[int]:
    """Pids of this process's engine processes and their workers (not multiprocessing's shared helpers, not the
    engine launcher nor the engines it forked: a start kills those of its own by their process group)."""
    import psutil

    pids: set[int] = set()
    launcher_pid = running_launcher_pid()
    for child in psutil.Process().children(recursive=True):
        try:
            ancestors = {parent.pid for parent in child.parents()}
            if launcher_pid is not None and (child.pid == launcher_pid or launcher_pid in ancestors):
                continue
            if "resource_tracker" not in " ".join(child.cmdline()):
                pids.add(child.pid)
        except psutil.Error:
            continue
    return pids
