"""Engine supervision: notice that a running vLLM engine died or hung, and say so once.

vLLM's ``AsyncLLM`` marks itself dead (``errored``) when its engine-core process exits or its output handler
fails, but nothing tells its owner, and a frozen engine core (a wedged driver, ``SIGSTOP``) is never noticed:
vLLM 0.32's ``check_health`` only reads that flag. An :class:`EngineWatch` covers both for one engine:

* death, at once (within ``poll_interval_s``): vLLM's ``errored`` flag, or an exit code of one of the
  engine-core processes (``engine.engine_core.resources.engine_manager.processes``), which names the signal;
* a hang: a round trip to the engine core's busy loop through vLLM's utility channel that is late (past
  ``health_timeout_s``) *and* no progress meanwhile: no thread of the engine's processes used CPU time (5 % of a
  core) during the last window, and no output of it arrived (:mod:`server.engine.supervision.progress`). The busy loop
  answers utilities between two engine steps, so a core that stopped stepping never answers; but neither does one
  whose step is long (a long prefill, a large batch with logprobs, a first-time kernel, a loaded machine), and the
  answer also waits behind outputs this process has not taken yet (it is the slow one then); killing that engine
  would turn a slow moment into an outage. While the engine works, the watch waits on, one window
  (``health_timeout_s``) at a time, and logs once that the check is late but the engine busy. A stopped or wedged
  engine is so noticed within ``health_interval_s + health_timeout_s`` (plus one window when it still worked at
  the start of the round trip). On a hang the watch kills the engine's processes, so the hung engine cannot wake
  up later and hold the device.

Either way it calls ``on_death(cause)`` exactly once, with a cause for the status page and the log, such as
``engine died: killed by signal 9 (SIGKILL)``. :class:`EngineWatches` keeps one watch per loaded engine for the
loader; the manager learns of a death through the callback it gives the loader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from server.engine.supervision.progress import ProgressProbe, busiest, cpu_times, cpu_used, is_busy, outputs_taken
from server.profiles.schema import Switching

__all__ = [
    "HEALTH_UTILITY",
    "DeathCallback",
    "EngineDeathHandler",
    "EngineWatch",
    "EngineWatches",
    "LoadTimedOut",
    "Supervision",
    "describe_exit",
    "engine_is_dead",
    "engine_pids",
    "kill_process_trees",
]

logger = logging.getLogger("turnout.engine.supervision")

#: The engine-core method the health check calls: vLLM's own, read-only and cheap (it reads one flag), so the
#: check needs no plugin and disturbs nothing; what it proves is that the busy loop still serves utilities.
HEALTH_UTILITY = "is_sleeping"

#: Told once that the watched engine died or hung: ``cause`` says how.
DeathCallback = Callable[[str], Awaitable[None]]
#: The loader's owner, told which engine died and how: ``(engine, cause)``.
EngineDeathHandler = Callable[[Any, str], Awaitable[None]]
#: Kills processes and everything they started (by pid).
Killer = Callable[[Sequence[int]], None]


class LoadTimedOut(RuntimeError):
    """A model load or in-place swap outlived ``load_timeout_s``; its engine's processes were killed."""

    def __init__(self, name: str, what: str, timeout_s: float) -> None:
        super().__init__(f"{what} of {name} did not finish within load_timeout_s ({timeout_s:g} s); killed")
        self.model = name
        self.timeout_s = timeout_s


@dataclass(frozen=True)
class Supervision:
    """How engines are watched (the profile's ``switching:`` settings).

    Attributes:
        health_interval_s: Seconds between two health round trips to an idle or busy engine core.
        health_timeout_s: Seconds a round trip may take before the engine's progress is read: it counts as hung
            when no thread of its processes used CPU time during that window (and each further one while it stays late).
        poll_interval_s: Seconds between two reads of vLLM's dead flag and the processes' exit codes.
    """

    health_interval_s: float = 10.0
    health_timeout_s: float = 10.0
    poll_interval_s: float = 0.2

    @classmethod
    def from_switching(cls, switching: Switching) -> Supervision:
        """The profile's ``switching:`` settings."""
        return cls(
            health_interval_s=switching.health_check_interval_s, health_timeout_s=switching.health_check_timeout_s
        )


def engine_processes(engine: Any) -> list[Any]:
    """The engine-core processes of a vLLM ``AsyncLLM`` (``multiprocessing`` handles); empty when in-process."""
    resources = getattr(getattr(engine, "engine_core", None), "resources", None)
    manager = getattr(resources, "engine_manager", None)
    return list(getattr(manager, "processes", None) or [])


def engine_pids(engine: Any) -> list[int]:
    """The pids of the engine's engine-core processes."""
    return [int(proc.pid) for proc in engine_processes(engine) if getattr(proc, "pid", None)]


def engine_is_dead(engine: Any) -> bool:
    """vLLM's dead flag, or an engine-core process that exited: what a request that just failed can check before
    the watch reports (vLLM fails its requests a moment before it raises the flag)."""
    if getattr(engine, "errored", False) is True:
        return True
    return any(getattr(proc, "exitcode", None) is not None for proc in engine_processes(engine))


def describe_exit(exitcode: int) -> str:
    """``killed by signal 9 (SIGKILL)``, ``exited with code 1``: how a process ended, from its exit code."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            return f"killed by signal {-exitcode}"
        return f"killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


def kill_process_trees(pids: Sequence[int]) -> None:
    """SIGKILL ``pids`` and every process they started (workers), children first collected, then all at once.

    The descendants are listed before anything is killed: once an engine core is gone its workers are
    re-parented and can no longer be found from it. A stopped process dies of SIGKILL too.
    """
    import psutil

    victims: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            victims.extend(proc.children(recursive=True))
            victims.append(proc)
    for proc in victims:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(victims, timeout=5.0)


class EngineWatch:
    """Watches one running engine; calls ``on_death`` exactly once when it dies or hangs.

    Args:
        engine: A vLLM ``AsyncLLM`` (or anything with its ``errored`` flag, ``engine_core.call_utility_async``
            and ``engine_core.resources.engine_manager.processes``).
        on_death: Awaited once with the cause. Exceptions it raises are logged.
        name: The model, for the log.
        settings: Intervals and the health timeout.
        kill: Kills the engine's processes when it hung (tests pass a recorder).
        progress: Reads the CPU time of the engine's processes (tests pass their own).
    """

    def __init__(
        self,
        engine: Any,
        on_death: DeathCallback,
        *,
        name: str,
        settings: Supervision | None = None,
        kill: Killer = kill_process_trees,
        progress: ProgressProbe = cpu_times,
    ) -> None:
        self._engine = engine
        self._on_death = on_death
        self._name = name
        self._settings = settings or Supervision()
        self._kill = kill
        self._progress = progress
        self._outputs_taken = outputs_taken(engine)
        self._task: asyncio.Task[None] | None = None
        self._suspended = 0
        self._slow: list[float] = []  # the bounds of the slow operations under way
        self._windows = 0  # suspensions and slow operations begun so far
        self.cause: str | None = None

    @property
    def running(self) -> bool:
        """The watch is started and has not ended."""
        return self._task is not None and not self._task.done()

    def start(self) -> EngineWatch:
        """Start watching (idempotent); returns the watch."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"watch {self._name}")
        return self

    async def stop(self) -> None:
        """Stop watching (an unload is no death). Safe from inside ``on_death``: it does not cancel itself."""
        task, self._task = self._task, None
        if task is None or task is asyncio.current_task() or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    @contextlib.asynccontextmanager
    async def suspended(self) -> AsyncIterator[None]:
        """Pause the health round trips meanwhile (an in-place swap holds the busy loop for a whole load).

        Death is still noticed; whatever runs inside must bound its own time (``load_timeout_s``).
        """
        self._suspended += 1
        self._windows += 1
        try:
            yield
        finally:
            self._suspended -= 1

    @contextlib.asynccontextmanager
    async def slow(self, timeout_s: float) -> AsyncIterator[None]:
        """Widen the health round trip to ``timeout_s`` meanwhile: a slow operation holds the busy loop (a sleep,
        a wake from sleep level 2 that reloads the weights), and the check waits behind it.

        Unlike :meth:`suspended` the check still runs, so an operation that hangs is noticed after ``timeout_s``
        (the engine is then killed, and the operation fails with the engine).
        """
        self._slow.append(timeout_s)
        self._windows += 1
        try:
            yield
        finally:
            self._slow.remove(timeout_s)

    def _check_timeout(self) -> float:
        """How long the next health round trip may take: the widest of the slow operations under way."""
        return max([self._settings.health_timeout_s, *self._slow])

    # -- the watch ------------------------------------------------------------------------------------------

    async def _supervise(self) -> None:
        died = asyncio.ensure_future(self._death())
        hung = asyncio.ensure_future(self._hang())
        try:
            done, _ = await asyncio.wait({died, hung}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (died, hung):
                task.cancel()
            await asyncio.gather(died, hung, return_exceptions=True)
        first = died if died in done else hung
        if first.exception() is not None:
            logger.error("the watch of %s failed: %r; it stops watching", self._name, first.exception())
            return
        self.cause = first.result()
        if first is hung:
            pids = engine_pids(self._engine)
            logger.error("%s: %s; killing its processes %s", self._name, self.cause, pids)
            await asyncio.to_thread(self._kill, pids)
        else:
            logger.error("%s: %s", self._name, self.cause)
        try:
            await self._on_death(self.cause)
        except Exception:
            logger.exception("handling the death of %s's engine failed", self._name)

    async def _death(self) -> str:
        """Returns once the engine is dead: a process exit code, or vLLM's own flag."""
        grace = 0
        while True:
            exit_cause = self._exit_cause()
            if exit_cause is not None:
                return f"engine died: {exit_cause}"
            if bool(getattr(self._engine, "errored", False)):
                # vLLM's monitor thread may flag the death a moment before the exit code is read: wait briefly
                # for the code, which says more than the flag.
                grace += 1
                if grace > 3:
                    return f"engine died: {self._errored_cause()}"
            await asyncio.sleep(self._settings.poll_interval_s)

    def _exit_cause(self) -> str | None:
        for proc in engine_processes(self._engine):
            code = getattr(proc, "exitcode", None)
            if code is not None:
                return describe_exit(int(code))
        return None

    def _errored_cause(self) -> str:
        handler = getattr(self._engine, "output_handler", None)
        if isinstance(handler, asyncio.Future) and handler.done() and not handler.cancelled():
            error = handler.exception()
            if error is not None:
                return f"vLLM's output handler failed ({type(error).__name__}: {error})"
        return "vLLM reports the engine dead (EngineDeadError)"

    async def _hang(self) -> str:
        """Returns once a health round trip is late and the engine shows no progress (a failing round trip is
        left to :meth:`_death`)."""
        settings = self._settings
        while True:
            await asyncio.sleep(settings.health_interval_s)
            if self._suspended:
                continue
            # ensure_future, not await: the round trip is watched with asyncio.wait, which never cancels it (3.11's
            # wait_for can swallow a cancellation, stop(), that races with the answer).
            check = asyncio.ensure_future(self._engine.engine_core.call_utility_async(HEALTH_UTILITY))
            try:
                verdict = await self._answer_or_hang(check)
            finally:
                check.cancel()
            if verdict is not None:
                return verdict

    async def _answer_or_hang(self, check: asyncio.Future[Any]) -> str | None:
        """Wait for one round trip, a window at a time while the engine works; the hang's cause, or None."""
        timeout, windows = self._check_timeout(), self._windows
        pids = engine_pids(self._engine)
        before = await asyncio.to_thread(self._progress, pids)
        taken_before = self._outputs_taken()
        late_s, told = 0.0, False
        while True:
            done, _ = await asyncio.wait({check}, timeout=timeout)
            if done:
                if not check.cancelled() and check.exception() is not None:
                    # A dead engine fails its calls; the death check names the cause. Anything else (an engine
                    # core that answers with an error) is alive and stepping, so it is no hang.
                    logger.debug("%s: health check failed: %r", self._name, check.exception())
                if told:
                    logger.info(
                        "%s: the health check was answered after %.1f s; the engine was busy", self._name, late_s
                    )
                return None
            late_s += timeout
            if self._suspended or self._windows != windows:
                return None  # a swap or a slow operation began while the round trip waited behind it
            after, taken_after = await asyncio.to_thread(self._progress, pids), self._outputs_taken()
            used, most, taken = cpu_used(before, after), busiest(before, after), taken_after - taken_before
            if not is_busy(most, timeout) and not taken:
                return (
                    f"engine hung: no answer to a health check within {late_s:g} s and no progress "
                    f"(its busiest thread used {most:.2f} s of CPU time in the last {timeout:g} s, "
                    f"all its processes {used:.2f} s; no output of it arrived)"
                )
            if not told:
                logger.warning(
                    "%s: no answer to a health check within %g s, but the engine is busy (its busiest thread used "
                    "%.1f s of CPU time meanwhile, all its processes %.1f s; %d batches of its outputs arrived): "
                    "not hung; waiting on",
                    self._name,
                    late_s,
                    most,
                    used,
                    taken,
                )
                told = True
            before, taken_before = after, taken_after


class EngineWatches:
    """One :class:`EngineWatch` per loaded engine, kept by the loader that started them.

    Args:
        settings: How every engine is watched.
        kill: Kills hung engines' processes.
        progress: Reads the CPU time of an engine's processes.
    """

    def __init__(
        self,
        settings: Supervision | None = None,
        *,
        kill: Killer = kill_process_trees,
        progress: ProgressProbe = cpu_times,
    ) -> None:
        self.settings = settings or Supervision()
        self._kill = kill
        self._progress = progress
        self._on_death: EngineDeathHandler | None = None
        self._watches: dict[int, EngineWatch] = {}

    def supervise(self, on_death: EngineDeathHandler) -> None:
        """Tell ``on_death`` about every death from now on (engines loaded before too)."""
        self._on_death = on_death

    def watch(self, name: str, engine: Any) -> EngineWatch:
        """Start watching a freshly loaded ``engine`` of model ``name``."""

        async def died(cause: str) -> None:
            self._watches.pop(id(engine), None)
            if self._on_death is not None:
                await self._on_death(engine, cause)
            else:
                logger.error("%s's engine died (%s) and nobody supervises it", name, cause)

        watch = EngineWatch(engine, died, name=name, settings=self.settings, kill=self._kill, progress=self._progress)
        self._watches[id(engine)] = watch
        return watch.start()

    def of(self, engine: Any) -> EngineWatch | None:
        """The watch of ``engine``, if it is watched."""
        return self._watches.get(id(engine))

    async def forget(self, engine: Any) -> None:
        """Stop watching ``engine`` before it is shut down on purpose."""
        watch = self._watches.pop(id(engine), None)
        if watch is not None:
            await watch.stop()

    @contextlib.asynccontextmanager
    async def suspended(self, engine: Any) -> AsyncIterator[None]:
        """Pause ``engine``'s health round trips meanwhile (nothing when it is not watched)."""
        watch = self.of(engine)
        if watch is None:
            yield
            return
        async with watch.suspended():
            yield

    @contextlib.asynccontextmanager
    async def slow(self, engine: Any, timeout_s: float) -> AsyncIterator[None]:
        """Widen ``engine``'s health round trip to ``timeout_s`` meanwhile (nothing when it is not watched)."""
        watch = self.of(engine)
        if watch is None:
            yield
            return
        async with watch.slow(timeout_s):
            yield

    async def kill(self, engine: Any) -> None:
        """Kill ``engine``'s processes (a swap that outlived its timeout); its watch then reports the death."""
        await asyncio.to_thread(self._kill, engine_pids(engine))

    async def stop_all(self) -> None:
        """Stop every watch (shutdown)."""
        while self._watches:
            _, watch = self._watches.popitem()
            await watch.stop()
