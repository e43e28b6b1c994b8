"""The Turnout side of the engine launcher: one launcher process per Turnout process, started early, kept healthy.

:class:`EngineLauncher` owns the launcher process (``launcher_main.py``) and the socket to it: it starts it (Turnout's
environment of that moment, Turnout's ``sys.path`` without the working directory: ``import_path.py``), reads its
messages on a thread of its own (the ready or unfit answer, each launch's pid, each child's exit code, handed to that
child's :class:`LaunchedProcess`), and sends one launch at a time. A launcher that dies is noticed by its reader (the
socket ends), logged once, and started again in the background; starts spawn meanwhile. A launcher that never got
ready (it said unfit, or died warming up) is not started again: engines spawn from then on, as they did before the
launcher.

:func:`engine_launcher` is the process's one launcher: ``turnout serve`` starts it beside the API's own start (its
preload takes 10-25 s, once); an in-process engine (the tests) starts it at its first load.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

from server.engine.runtime.framing import read_frame, write_frame
from server.engine.runtime.import_path import engine_sys_path
from server.engine.runtime.process import LaunchedProcess
from server.engine.runtime.start_env import between_starts

__all__ = [
    "LAUNCHER_ENV",
    "PRELOAD",
    "EngineLauncher",
    "LauncherUnavailable",
    "engine_launcher",
    "launcher_enabled",
    "running_launcher_pid",
    "stop_engine_launcher",
]

logger = logging.getLogger("turnout.engine.launcher")

#: What an engine core and its CPU worker import (each ~12 s when spawned), and Turnout's plugin they load.
PRELOAD = (
    "torch",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.cpu_worker",
    "server.vllm_plugin",
    "server.vllm_plugin.plugin",
    "server.profiles.log_format",
)
#: ``0`` turns the launcher off: every engine is spawned, as before it.
LAUNCHER_ENV = "TURNOUT_ENGINE_LAUNCHER"
#: How long a launch may wait for the launcher's answer (a fork takes milliseconds).
LAUNCH_TIMEOUT_S = 30.0
#: How long after its death a launcher is started again.
RESTART_DELAY_S = 1.0

State = Literal["warming", "ready", "dead", "unfit", "stopped"]


class LauncherUnavailable(RuntimeError):
    """The launcher cannot fork now (it died, or never got ready); the start spawns instead."""


class EngineLauncher:
    """One launcher process and the socket to it; started at once, in the background.

    Args:
        preload: The modules the launcher imports before it says ready.
    """

    def __init__(self, preload: Sequence[str] = PRELOAD) -> None:
        self._preload = tuple(preload)
        self._lock = threading.Lock()  # one launch at a time: replies come in order
        self._changed = threading.Condition()
        self._phase: State = "stopped"
        self._was_ready = False
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._replies: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._children: dict[int, LaunchedProcess] = {}
        # A child that ended before its launch was answered here (a core that fails at once): its code waits here.
        self._early_exits: dict[int, int] = {}
        self._started_at = 0.0
        self._env: dict[str, str] = {}
        self._stopping = False

    @property
    def state(self) -> State:
        return self._phase

    @property
    def pid(self) -> int | None:
        """The launcher process's pid (None before it started)."""
        return None if self._process is None else self._process.pid

    @property
    def alive(self) -> bool:
        return self._phase in ("warming", "ready")

    @property
    def env(self) -> dict[str, str]:
        """The environment the launcher was started with (what it read at exec and import)."""
        return dict(self._env)

    def start(self) -> None:
        """Start the launcher process unless one runs; returns at once (it warms up in the background)."""
        with self._changed:
            if self.alive or self._phase == "unfit":
                return
            self._stopping = False
            parent, child = socket.socketpair()
            env = between_starts()  # not the variables of a start under way (glibc reads MALLOC_* at exec)
            # Turnout's own import path as a spawned engine gets it: never the working directory (import_path.py).
            env["PYTHONPATH"] = os.pathsep.join(engine_sys_path())
            # Else OpenMP starts its thread pool as torch is imported (measured: 4 threads), and a fork copies one
            # thread. A forked core gets Turnout's environment back, and vLLM sets its threads itself (the core
            # reduces torch's to 1, the CPU worker binds its own): only libgomp's initial default differs.
            env["OMP_NUM_THREADS"] = "1"
            fd = child.fileno()
            # -P: `python -m` would put the working directory first on the launcher's path, and so its children's.
            command = [sys.executable, "-P", "-m", "server.engine.runtime.launcher_main", str(os.getpid()), str(fd)]
            self._process = subprocess.Popen(
                [*command, *self._preload], env=env, pass_fds=(fd,), stdin=subprocess.DEVNULL
            )
            child.close()
            self._sock, self._env, self._replies = parent, env, queue.Queue()
            self._started_at = time.monotonic()
            self._set("warming")
        threading.Thread(target=self._read, args=(parent, self._process), name="engine-launcher", daemon=True).start()
        logger.info("engine launcher %d: warming up (imports vLLM and torch once)", self._process.pid)

    def wait_ready(self, timeout: float) -> bool:
        """Wait while a first warm-up goes on, at most ``timeout`` s; True when the launcher is ready.

        A launcher warming up again after a death is not waited for: starts spawn meanwhile.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._phase == "warming" and not self._was_ready:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return self._phase == "ready"

    def launch(self, payload: bytes, process: LaunchedProcess) -> int:
        """Fork ``process`` (its pickled target, arguments, environment and name); its pid."""
        with self._lock:
            sock = self._sock
            if self._phase != "ready" or sock is None:
                raise LauncherUnavailable(f"the engine launcher is {self._phase}")
            write_frame(sock, ("launch", payload))
            try:
                reply = self._replies.get(timeout=LAUNCH_TIMEOUT_S)
            except queue.Empty:
                raise LauncherUnavailable("the engine launcher did not answer") from None
            if reply[0] != "started":
                raise LauncherUnavailable(f"the engine launcher failed: {reply}")
            pid = int(reply[1])
            with self._changed:
                early = self._early_exits.pop(pid, None)
                if early is None:
                    self._children[pid] = process
            if early is not None:
                process.exited(early)
            return pid

    def stop(self) -> None:
        """End the launcher (it exits when its socket closes); the engines it forked are not its to end."""
        with self._changed:
            self._stopping = True
            process, sock = self._process, self._sock
            self._sock = None
            self._children.clear()  # their codes go with this launcher (LaunchedProcess: LOST_EXIT_CODE)
            self._early_exits.clear()
            self._set("stopped")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; the launcher reads the end and exits
            sock.close()
        if process is not None:
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def restart(self) -> None:
        """Stop the launcher and start a new one with Turnout's environment of now (it warms up in the background)."""
        self.stop()
        self.start()

    def _read(self, sock: socket.socket, process: subprocess.Popen[bytes]) -> None:
        try:
            while True:
                message = read_frame(sock)
                kind = message[0]
                if kind == "exit":
                    pid, code = int(message[1]), int(message[2])
                    with self._changed:
                        child = self._children.pop(pid, None)
                        if child is None:
                            self._early_exits[pid] = code
                    if child is not None:
                        child.exited(code)
                elif kind == "ready":
                    with self._changed:
                        self._was_ready = True
                        self._set("ready")
                    took = time.monotonic() - self._started_at
                    logger.info("engine launcher %d: ready in %.1f s; engines start by fork", process.pid, took)
                elif kind == "unfit":
                    logger.warning("engine launcher %d: unfit (%s); engines start by spawn", process.pid, message[1])
                    with self._changed:
                        self._set("unfit")
                else:
                    self._replies.put(message)
        except (EOFError, OSError):
            pass
        with self._changed:
            if self._sock is sock:
                self._sock = None
        sock.close()
        self._ended(process)

    def _ended(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        with self._changed:
            if self._stopping or self._process is not process or self._phase == "unfit":
                return
            never_ready = self._phase == "warming" and not self._was_ready
            # Their codes are lost with it (LaunchedProcess reads LOST_EXIT_CODE once one of them ends).
            self._children.clear()
            self._early_exits.clear()
            self._set("unfit" if never_ready else "dead")
        if never_ready:
            logger.error("engine launcher %d ended (code %d) before it was ready; engines spawn", process.pid, code)
            return
        logger.error(
            "engine launcher %d died (code %d); its engines run on; starts spawn until it is back: restarting it",
            process.pid,
            code,
        )
        time.sleep(RESTART_DELAY_S)
        self.start()

    def _set(self, state: State) -> None:
        self._phase = state
        self._changed.notify_all()


def launcher_enabled() -> bool:
    """False when ``TURNOUT_ENGINE_LAUNCHER=0``: every engine is spawned."""
    return os.environ.get(LAUNCHER_ENV, "1") != "0"


_launcher: EngineLauncher | None = None
_launcher_lock = threading.Lock()


def engine_launcher() -> EngineLauncher:
    """This process's launcher, started (warming up in the background) on the first call."""
    global _launcher
    with _launcher_lock:
        if _launcher is None:
            _launcher = EngineLauncher()
            atexit.register(_launcher.stop)
        _launcher.start()
        return _launcher


def running_launcher_pid() -> int | None:
    """The pid of this process's launcher process, if one was started (a start's own processes exclude it)."""
    return None if _launcher is None else _launcher.pid


def stop_engine_launcher() -> None:
    """Stop this process's launcher, if one was started."""
    with _launcher_lock:
        if _launcher is not None:
            _launcher.stop()
