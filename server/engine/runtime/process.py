"""``LaunchedProcess``: an engine core forked by the launcher, standing in for the ``multiprocessing`` process
object vLLM keeps for it.

vLLM 0.32 uses, of a core's process object (``vllm/v1/engine/utils.py``: ``CoreEngineProcManager``, its
``shutdown``, ``wait_for_engine_startup``; ``vllm/v1/utils.py``: ``shutdown``): ``start``, ``pid``, ``name``,
``sentinel`` (in ``multiprocessing.connection.wait`` and a zmq poller: an int fd is enough), ``exitcode``,
``is_alive``, ``join``, ``terminate``; Turnout's supervision reads ``pid`` and ``exitcode``.

The core is the launcher's child, not Turnout's, so this process object holds a pidfd of it: readable once the core
has exited (whoever reaps it), immune to pid reuse, and the handle signals go through. The exit code comes from the
launcher, which reaps the core and reports it. A core whose launcher died before reporting it has lost its code (its
new parent, init, reaped it): it reads as ``255``, what ``multiprocessing``'s forkserver reports in that case too.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from multiprocessing.reduction import ForkingPickler
from typing import Any, Protocol

__all__ = ["LOST_EXIT_CODE", "LaunchedProcess", "Launches"]

#: The exit code of a core that ended while no launcher was left to report its code.
LOST_EXIT_CODE = 255
#: How long an exit code may lag behind the pidfd before it is taken as lost (the launcher reports in milliseconds).
EXIT_CODE_WAIT_S = 1.0


class Launches(Protocol):
    """What a :class:`LaunchedProcess` needs of the launcher (``launcher.EngineLauncher``)."""

    @property
    def alive(self) -> bool: ...

    def launch(self, payload: bytes, process: LaunchedProcess) -> int: ...


class LaunchedProcess:
    """One engine core the launcher forks; ``multiprocessing.Process``'s interface, as far as vLLM uses it.

    Args:
        launcher: The launcher that forks it.
        env: Variables added to (or, for None, removed from) Turnout's environment of the moment :meth:`start` is
            called, for the child.
        target, name, args, kwargs, daemon: As ``multiprocessing.Process`` takes them.
    """

    def __init__(
        self,
        launcher: Launches,
        env: Mapping[str, str | None],
        target: Callable[..., Any],
        name: str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        daemon: bool | None = None,
    ) -> None:
        self._launcher = launcher
        self._env = dict(env)
        self._target = target
        self._args = tuple(args)
        self._kwargs = dict(kwargs or {})
        self.name = name or "LaunchedProcess"
        self.daemon = daemon
        self.pid: int | None = None
        self._pidfd: int | None = None
        self._exitcode: int | None = None
        self._reported = threading.Event()
        self._dead_since: float | None = None
        self._closer: Callable[[], object] | None = None

    @property
    def ident(self) -> int | None:
        return self.pid

    def start(self) -> None:
        """Fork the core from the launcher, with Turnout's environment of this moment (the one a spawn would copy)."""
        if self.pid is not None:
            raise AssertionError("cannot start a process twice")
        env = dict(os.environ)
        for key, value in self._env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        payload = bytes(ForkingPickler.dumps((self._target, self._args, self._kwargs, env, self.name)))
        self.pid = self._launcher.launch(payload, self)
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:  # already ended and reaped: its code is on its way; a closed pipe reads at once
            read, write = os.pipe()
            os.close(write)
            self._pidfd = read
        # vLLM never closes its process objects: the descriptor goes with this object.
        self._closer = weakref.finalize(self, os.close, self._pidfd)

    def exited(self, exitcode: int) -> None:
        """The launcher reaped this process (called from its reader thread)."""
        self._exitcode = exitcode
        self._reported.set()

    @property
    def sentinel(self) -> int:
        """A file descriptor that turns readable when the process has ended."""
        if self._pidfd is None:
            raise ValueError("process not started")
        return self._pidfd

    @property
    def exitcode(self) -> int | None:
        """The exit code (negative: the signal that killed it); None while it runs. Never blocks."""
        if self._exitcode is not None or self._pidfd is None or not _readable(self._pidfd):
            return self._exitcode
        now = time.monotonic()
        if self._dead_since is None:
            self._dead_since = now
        if not self._launcher.alive or now - self._dead_since > EXIT_CODE_WAIT_S:
            self._exitcode = LOST_EXIT_CODE
        return self._exitcode

    def is_alive(self) -> bool:
        return self._pidfd is not None and not _readable(self._pidfd)

    def join(self, timeout: float | None = None) -> None:
        """Wait until the process has ended (and its exit code is in), at most ``timeout`` seconds."""
        if self._pidfd is None:
            raise AssertionError("can only join a started process")
        deadline = None if timeout is None else time.monotonic() + timeout
        if not _readable(self._pidfd, timeout):
            return
        left = EXIT_CODE_WAIT_S if deadline is None else max(0.0, min(EXIT_CODE_WAIT_S, deadline - time.monotonic()))
        self._reported.wait(left)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def kill_group(self) -> None:
        """SIGKILL the process's whole group (the core and the worker it forked), unless it has ended already."""
        if self.pid is not None and self.is_alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def close(self) -> None:
        if self._closer is not None:
            self._closer()
        self._pidfd = None

    def _signal(self, signum: int) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):  # ended already
                signal.pidfd_send_signal(self._pidfd, signum)

    def __repr__(self) -> str:
        return f"<LaunchedProcess name={self.name!r} pid={self.pid} exitcode={self._exitcode}>"


def _readable(fd: int, timeout: float | None = 0.0) -> bool:
    readable, _, _ = select.select([fd], [], [], timeout)
    return bool(readable)
