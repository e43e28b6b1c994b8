"""Whether an engine is making progress: the CPU time its processes use, read from the operating system.

A health round trip that comes back late says only that the engine core's busy loop did not reach the next
utility call in time; a step that takes long (a long prefill, a large ``n`` batch with logprobs, a first-time
kernel, a grammar compile, a noisy neighbour) holds it just as a stopped process does. What tells them apart is
work: a busy engine core and its workers use CPU time, a stopped (``SIGSTOP``) or wedged one (blocked in a driver
call) uses none. :func:`cpu_times` reads it for the engine-core processes and every process they started (the
workers), :func:`cpu_used` says how much of it was used between two readings.

CPU time is the one signal every platform exposes. A device that hangs while its driver spins the CPU would look
busy; where a platform exposes the device's own progress, that is the reading to add here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

__all__ = ["BUSY_CPU_SHARE", "CpuTimes", "ProgressProbe", "cpu_times", "cpu_used", "is_busy"]

#: The share of one core an engine's processes must use during a late health round trip to count as busy. An
#: idle or stopped engine uses next to nothing (its workers poll with a timeout once idle); a working one uses
#: a whole core or more, and still a tenth of one on a machine whose cores are shared by ten busy processes.
BUSY_CPU_SHARE = 0.05

#: CPU seconds (user + system) used so far by each process, by pid.
CpuTimes = Mapping[int, float]
#: Reads :data:`CpuTimes` for the engine-core pids given and every process they started.
ProgressProbe = Callable[[Sequence[int]], CpuTimes]


def cpu_times(pids: Sequence[int]) -> CpuTimes:
    """The CPU seconds used so far by ``pids`` and all their descendants (processes that are gone are left out)."""
    import psutil

    times: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for proc in (root, *root.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    used = proc.cpu_times()
                    times[proc.pid] = used.user + used.system
    return times


def cpu_used(before: CpuTimes, after: CpuTimes) -> float:
    """CPU seconds used between two readings; a process that appeared in between counts with all of its time."""
    return sum(max(0.0, spent - before.get(pid, 0.0)) for pid, spent in after.items())


def is_busy(used_s: float, window_s: float) -> bool:
    """Whether ``used_s`` CPU seconds within ``window_s`` seconds is work (see :data:`BUSY_CPU_SHARE`)."""
    return used_s >= BUSY_CPU_SHARE * window_s
