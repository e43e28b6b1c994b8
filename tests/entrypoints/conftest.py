"""The entry points a user meets, started the way a user starts them.

Each test runs this checkout's console script ``turnout`` (next to the test's interpreter, ``.venv/bin/turnout``)
as a subprocess, from a folder of its own, with a fresh ``HOME`` and none of the ``RAY_*``, ``TURNOUT_*``,
``VLLM_*`` or ``HF_*`` variables of the shell that runs pytest, only those the test sets: what a new user on a
fresh machine has. A variable another test left behind, or the checkout as the working directory, cannot make a
test here pass (a leaked ``RAY_AUTH_MODE`` once hid a ``turnout ray-serve`` that no fresh machine could run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

__all__ = ["TURNOUT", "Started", "User", "new_user"]

#: The console script ``pip install -e .`` put next to this interpreter: the command a user types.
TURNOUT = Path(sys.executable).with_name("turnout")
#: Variable families a user's fresh shell lacks and a test run's has: the product's, its libraries' (Ray, vLLM,
#: Hugging Face), pytest's and the interpreter's (a ``PYTHONPATH`` to the checkout), and the real home's folders.
SCRUBBED = ("RAY_", "TURNOUT_", "VLLM_", "HF_", "PYTEST_", "PYTHON", "XDG_")


@dataclass(frozen=True)
class User:
    """A new user: a home of their own and a working folder that is neither the checkout nor the profile's."""

    home: Path
    cwd: Path

    def env(self, setting: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment without the :data:`SCRUBBED` families, ``HOME`` this user's, plus
        ``setting``."""
        env = {name: value for name, value in os.environ.items() if not name.startswith(SCRUBBED)}
        return {**env, "HOME": str(self.home), **(setting or {})}

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """``turnout ARGS`` to its end: exit code, stdout and stderr."""
        return subprocess.run(
            [str(TURNOUT), *args],
            cwd=self.cwd,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, log: Path, env: Mapping[str, str] | None = None) -> Started:
        """``turnout ARGS`` in the background, in a session of its own, its output into ``log``."""
        out = log.open("wb")
        process = subprocess.Popen(
            [str(TURNOUT), *args],
            cwd=self.cwd,
            env=self.env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()  # the child holds its own copy
        return Started(process, log, self)


def new_user(root: Path) -> User:
    """A :class:`User` under ``root`` (a fresh temporary folder)."""
    home, cwd = root / "home", root / "elsewhere"
    home.mkdir()
    cwd.mkdir()
    return User(home=home, cwd=cwd)


@dataclass
class Started:
    """A running ``turnout`` command: its process, its log and the user who started it."""

    process: subprocess.Popen[bytes]
    log_path: Path
    user: User

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, url: str, timeout: float) -> None:
        """Wait until ``url`` answers 200; fail with the log when the command exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"turnout exited with {self.process.returncode}:\n{self.log()[-6000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=5).status_code == 200:
                    return
            time.sleep(0.5)
        raise AssertionError(f"{url} did not answer 200 within {timeout:.0f} s:\n{self.log()[-6000:]}")

    def processes(self) -> list[psutil.Process]:
        """Every live process this command started, wherever it was reparented: those with this user's home."""
        home = f"HOME={self.user.home}"
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile, or another user's
                # /proc/PID/environ, read as raw text: psutil's parsed environ() costs a dict per process.
                raw = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
                if home in raw.split("\0") and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        return found

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 60.0) -> int | None:
        """Send ``sig`` to the command alone and wait for its end: its exit code, or None after ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        return self.process.poll()

    def kill(self) -> None:
        """Kill whatever is left of the command: its session, and every process with its user's home."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture
def user(tmp_path: Path) -> User:
    """A new user for one test."""
    return new_user(tmp_path)


@pytest.fixture(scope="module")
def module_user(tmp_path_factory: pytest.TempPathFactory) -> User:
    """A new user for a module's shared server."""
    return new_user(tmp_path_factory.mktemp("user"))
