"""Turnout's engine launcher: a process that has imported vLLM and torch once and forks engine cores on request.

Run as ``python -m server.engine.runtime.launcher_main TURNOUT_PID FD [MODULE ...]`` by :mod:`launcher`, with
Turnout's environment of that moment; ``FD`` is its end of a socket pair, ``MODULE`` what it imports before it
says ready (``launcher.PRELOAD``, the modules an engine core and its worker import, measured at 25-30 s of a
spawned start). It never starts a thread: a ``fork`` copies only the forking thread, and a lock another thread
held would stay locked in the child. So it checks it has exactly one thread (Python's and the kernel's count), or
says ``unfit`` and exits; on CPU no device context exists to check (other platforms keep spawn).

Each launch is one ``os.fork``. The child: its own process group (a kill of its group takes its worker too, and
Ctrl-C in Turnout's terminal reaches it only through Turnout's shutdown, as vLLM expects), the environment it was
sent (exactly what a spawned core would have inherited) with glibc's malloc settings of that environment applied
through ``mallopt`` (glibc reads its ``MALLOC_*`` variables only at exec: :data:`MALLOPT_ENV`; the worker the core
forks inherits them), a daemon thread that SIGKILLs its group once Turnout's process is gone (a pidfd turns
readable: no pid reuse, no polling), the process name vLLM reads (``multiprocessing.current_process().name``),
then vLLM's target, and ``os._exit`` with its exit code (a forked child must not run the launcher's exit hooks).
The message is unpickled in the child, so the launcher itself never imports what a message names.

The launcher reaps its children (a pidfd per child in its ``select``) and reports each exit code. It ends when
Turnout closes the socket or dies; its children outlive it (Turnout's pidfd watch is theirs, not the launcher's),
so a launcher that dies takes no engine with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import multiprocessing
import os
import pickle
import select
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import NoReturn

from server.engine.runtime.framing import read_frame, write_frame

__all__ = ["MALLOPT_ENV", "TITLE", "apply_malloc_settings", "main"]

#: glibc's malloc variables (read at exec only) and the ``mallopt`` parameter that sets each in a running process
#: (``malloc.h``: ``M_TRIM_THRESHOLD``, ``M_MMAP_THRESHOLD``): the same setting, dynamic thresholds off as well.
MALLOPT_ENV = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    turnout_pid, fd, modules = int(args[0]), int(args[1]), args[2:]
    # Ctrl-C in Turnout's terminal reaches its whole process group: Turnout ends the launcher by closing the socket.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    turnout = os.pidfd_open(turnout_pid)
    if os.getppid() != turnout_pid:  # after the open: the pidfd is Turnout's own, not a reused pid's
        sys.exit(0)
    for module in modules:
        importlib.import_module(module)
    _set_title()
    unfit = _unfit()
    if unfit is not None:
        write_frame(sock, ("unfit", unfit))
        sys.exit(1)
    write_frame(sock, ("ready",))
    with contextlib.suppress(OSError):  # Turnout's end of the socket is gone: so is Turnout
        _serve(sock, turnout)
    # Nothing to clean up, and an interpreter's exit with torch and vLLM loaded takes seconds (collections, hooks).
    sys.stderr.flush()
    os._exit(0)


#: The launcher's process title (``ps``), where ``setproctitle`` (a vLLM dependency) is installed.
TITLE = "turnout::engine-launcher"


def _set_title() -> None:
    """Name this process; also sets ``setproctitle`` up here, once, before any fork: set up first in a child whose
    environment was replaced, it cannot find the memory it rewrites, and vLLM's ``VLLM::EngineCore`` title is lost."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(TITLE)


def _unfit() -> str | None:
    """Why forking from this process is unsafe, or None."""
    threads = len(os.listdir("/proc/self/task"))
    if threading.active_count() != 1 or threads != 1:
        names = [thread.name for thread in threading.enumerate()]
        return f"{threads} threads run after the preload (Python's: {names}); a fork copies only one"
    return None


def _serve(sock: socket.socket, turnout: int) -> None:
    children: dict[int, int] = {}  # pid -> pidfd
    while True:
        watched: list[int] = [sock.fileno(), turnout, *children.values()]
        readable, _, _ = select.select(watched, [], [])
        if turnout in readable:
            return
        for pid, pidfd in list(children.items()):
            if pidfd in readable:
                _, status = os.waitpid(pid, 0)
                os.close(pidfd)
                del children[pid]
                write_frame(sock, ("exit", pid, os.waitstatus_to_exitcode(status)))
        if sock.fileno() in readable:
            try:
                message = read_frame(sock)
            except EOFError:
                return
            pid = _launch(sock, turnout, list(children.values()), message[1])
            with contextlib.suppress(OSError):  # the child may have set it, or ended, already
                os.setpgid(pid, pid)
            children[pid] = os.pidfd_open(pid)
            write_frame(sock, ("started", pid))


def _launch(sock: socket.socket, turnout: int, pidfds: list[int], payload: bytes) -> int:
    pid = os.fork()
    if pid:
        return pid
    _run_child(sock, turnout, pidfds, payload)


def _run_child(sock: socket.socket, turnout: int, pidfds: list[int], payload: bytes) -> NoReturn:
    code = 1
    try:
        os.setpgid(0, 0)
        sock.close()
        for pidfd in pidfds:  # the launcher's handles on its other children
            os.close(pidfd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        target, args, kwargs, env, name = pickle.loads(payload)
        os.environ.clear()
        os.environ.update(env)
        apply_malloc_settings(env)  # before vLLM allocates: as a spawned core's glibc would have read them
        threading.Thread(target=_end_with_turnout, args=(turnout,), name="turnout-watch", daemon=True).start()
        multiprocessing.current_process().name = name  # vLLM names its log lines' process after it
        target(*args, **kwargs)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def apply_malloc_settings(env: dict[str, str]) -> list[str]:
    """Apply the malloc variables of :data:`MALLOPT_ENV` that ``env`` sets to this process; the ones applied.

    One glibc refuses (or a C library without ``mallopt``, which ignores the variables at exec as well) is left at
    its default, with a line on stderr: the process runs as a spawned one would there.
    """
    wanted = {name: env[name] for name in MALLOPT_ENV if env.get(name)}
    applied: list[str] = []
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None) if wanted else None
    for name, value in wanted.items():
        try:
            if mallopt is not None and mallopt(MALLOPT_ENV[name], int(value)) == 1:
                applied.append(name)
                continue
        except (ValueError, ctypes.ArgumentError):
            pass
        print(f"engine launcher: {name}={value} not applied (mallopt refused it)", file=sys.stderr)
    return applied


def _end_with_turnout(turnout: int) -> None:
    """Block until Turnout's process is gone, then kill this engine's process group (the core and its worker)."""
    select.select([turnout], [], [])
    os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    main()
