"""No engine outlives Turnout: a process vLLM started ends itself once the process that started it is gone.

vLLM's engine core is a child of Turnout's process and its workers are children of the engine core. When Turnout
is killed (``kill -9``, the OOM killer) nothing runs its shutdown, and an orphaned engine core would keep the
device and its memory for good. So each process vLLM spawns (``multiprocessing.parent_process()`` is set)
starts one daemon thread that checks, every :data:`POLL_S`, whether its parent is still its parent, and
SIGKILLs itself when not. A dead engine core takes its workers with it the same way.

Why not ``prctl(PR_SET_PDEATHSIG)``: Linux sends that signal when the parent *thread* that forked the child
exits, and Turnout starts engines from a worker thread of its event loop's thread pool; a pool that ever
retired a thread would kill a healthy engine. Polling ``getppid`` costs one system call per half second and
works on every POSIX system.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

__all__ = ["POLL_S", "watch_parent"]

#: Seconds between two checks: an orphan is gone within about this long.
POLL_S = 0.5

#: The process whose watch runs: per pid, as a process forked from a watched one (a worker forked from its engine
#: core) inherits this module's state but not its thread, and must watch its own parent.
_started_in: int | None = None


def watch_parent() -> bool:
    """In a process that ``multiprocessing`` started, end it when its parent goes; True when it watches.

    Idempotent; does nothing in a process nobody started this way (Turnout's own, vLLM's API server, or an engine
    core the engine launcher forked: that one watches Turnout's process itself, ``server/engine/runtime``).
    """
    global _started_in
    parent = multiprocessing.parent_process()
    if _started_in == os.getpid():
        return True
    if parent is None or parent.pid is None:
        return False
    _started_in = os.getpid()
    parent_pid = parent.pid
    threading.Thread(target=_watch, args=(parent_pid,), name="turnout-parent-watch", daemon=True).start()
    return True


def _watch(parent_pid: int) -> None:
    while True:
        # Re-parented (to init or a subreaper) once the parent died, whichever way it died.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(POLL_S)
