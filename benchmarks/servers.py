"""The two servers under test, as subprocesses: vLLM's own OpenAI server and ``turnout serve``.

Both run the same model with the same engine arguments, taken from one model of a Turnout profile (the demo's
``tools`` model by default). Each server is started in its own process group so that stopping it also ends the
engine-core process vLLM spawns under it.

The figure that survives this machine's noise is the frontend's CPU time per request, read from
``/proc/<pid>/stat`` (utime + stime, every thread of the server process, none of its children): the engine core
runs in a child process, so the two servers' engines drop out and only the HTTP, parsing, rendering and
detokenizing work of the frontend remains.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from server.profiles import ModelProfile, load_profile
from server.tinymodels.spec import REPO_ROOT

__all__ = [
    "DEMO_PROFILE",
    "ServedModel",
    "ServerProcess",
    "first_token_seconds",
    "free_port",
    "process_cpu_seconds",
    "repo_relative",
    "served_model",
    "start_turnout",
    "start_vllm",
]

DEMO_PROFILE = REPO_ROOT / "profiles" / "demo.yaml"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads, none of its children)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / _CLOCK_TICKS


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def repo_relative(text: str, root: Path = REPO_ROOT) -> str:
    """``text`` (a command line, a profile) with each path inside the repository written relative to it.

    The servers run in the repository's folder, so the relative command still runs there; a result file or the
    benchmarks page then names no folder of the machine that measured it.
    """
    return text.replace(f"{root}/", "")


@dataclass(frozen=True)
class ServedModel:
    """One profile model, as both servers get it.

    Attributes:
        name: The served model name (the profile's key).
        profile_path: The profile file ``turnout serve`` gets.
        model: The model's resolved settings (path, frontend fields, engine args).
    """

    name: str
    profile_path: Path
    model: ModelProfile

    def vllm_arguments(self) -> list[str]:
        """``vllm.entrypoints.openai.api_server`` flags for the same model, frontend and engine arguments."""
        model = self.model
        args = ["--model", model.model, "--served-model-name", self.name]
        if model.chat_template:
            args += ["--chat-template", model.chat_template]
        if model.enable_auto_tool_choice:
            args.append("--enable-auto-tool-choice")
        if model.tool_call_parser:
            args += ["--tool-call-parser", model.tool_call_parser]
        if model.reasoning_parser:
            args += ["--reasoning-parser", model.reasoning_parser]
        for key, value in sorted(model.engine_args.items()):
            flag = "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is False:
                # vLLM's boolean engine flags are argparse's BooleanOptionalAction: off is ``--no-<flag>``.
                args.append("--no-" + flag.removeprefix("--"))
            elif value is not None:
                args += [flag, str(value)]
        return args


def served_model(profile_path: Path = DEMO_PROFILE, name: str | None = None) -> ServedModel:
    """The profile's ``name`` model (default: its default model), with paths resolved as Turnout resolves them."""
    profile = load_profile(str(profile_path))
    chosen = name or profile.default_model
    return ServedModel(name=chosen, profile_path=profile_path, model=profile.models[chosen])


@dataclass
class ServerProcess:
    """A running server: its label, URL, process and log."""

    label: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ready_path: str
    _log: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        """The server (frontend) process id; its engine core is a child of it."""
        return self.process.pid

    def cpu_seconds(self) -> float:
        """The frontend process's CPU seconds so far."""
        return process_cpu_seconds(self.pid)

    def wait_ready(self, timeout: float = 600.0) -> float:
        """Block until the ready route answers 200; returns the seconds it took from now.

        Raises:
            RuntimeError: The server exited or did not get ready in time (with the end of its log).
        """
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return time.monotonic() - start
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.label} was not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout: float = 60.0) -> None:
        """SIGINT, then SIGKILL to the whole process group (the engine core too) if it lingers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # leftovers of the group (engine core), if any
        if self.process.poll() is None:
            self.process.wait()
        self._log.close()


def _start(
    label: str, command: list[str], log_dir: Path, port: int, ready_path: str, env: dict[str, str] | None = None
) -> ServerProcess:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{label}.log"
    log = log_path.open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT, start_new_session=True
    )
    return ServerProcess(label, f"http://127.0.0.1:{port}", process, log_path, ready_path, log)


def start_vllm(
    model: ServedModel,
    log_dir: Path,
    *,
    label: str = "vllm",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start vLLM's own OpenAI server on ``model`` (returns at once; see ``ServerProcess.wait_ready``).

    ``env`` adds to the environment.
    """
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *model.vllm_arguments(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]
    return _start(label, command, log_dir, port, "/health", env)


def start_turnout(
    profile_path: Path,
    log_dir: Path,
    *,
    label: str = "turnout",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start ``turnout serve profile_path`` (returns at once; see ``ServerProcess.wait_ready``).

    ``env`` adds to the environment (e.g. the admin token for switches).
    """
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "server.cli",
        "serve",
        str(profile_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]
    return _start(label, command, log_dir, port, "/ready", env)


def first_token_seconds(client: httpx.Client, model: str, *, max_tokens: int = 8) -> float:
    """Seconds from sending a streamed chat through ``client`` until its first content token arrives."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    start = time.perf_counter()
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line.removeprefix("data: ")).get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    return time.perf_counter() - start
    raise RuntimeError(f"{model}: the stream ended without a token")
