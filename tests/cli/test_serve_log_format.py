"""``turnout serve --log-format json``: every line the server writes is a JSON line, and so are its engine's log
lines, which name the model they serve (a real tiny engine: the server is stopped once its engine has logged)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty, Queue

import pytest

from server.engine.runtime import LAUNCHER_ENV

pytestmark = pytest.mark.engine

_JSON = ("--log-format", "json")
#: The fields every JSON line has.
_FIELDS = {"time", "level", "logger", "message", "pid"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# With the engine launcher on (the default on CPU), the engine core is forked from it (server/engine/runtime), whose
# own logging was set up before the engine's model was known; with it off, vLLM spawns the core.
@pytest.mark.parametrize("launcher", ["0", "1"], ids=["spawned", "forked"])
def test_serve_s_and_its_engine_s_lines_are_json_lines(
    tiny_models: dict[str, Path], tmp_path: Path, launcher: str
) -> None:
    profile = tmp_path / "json.yaml"
    profile.write_text(f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n    max_model_len: 256\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_LOGGING", "VLLM_CONFIGURE_LOGGING"))}
    env[LAUNCHER_ENV] = launcher
    server = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", str(profile), "--port", str(_free_port()), "--dev", *_JSON],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    lines: Queue[str] = Queue()
    assert server.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in server.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: list[str] = []
    engine_line = None
    deadline = time.monotonic() + 300
    try:
        while engine_line is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=5).rstrip("\n")
            except Empty:
                assert server.poll() is None, "\n".join(seen[-30:])
                continue
            seen.append(line)
            if line.startswith("{") and json.loads(line).get("model") == "tools":
                engine_line = json.loads(line)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        reader.join(timeout=30)
        server.stdout.close()
    assert engine_line is not None, "\n".join(seen[-30:])
    forked = any("engines start by fork" in line for line in seen)
    assert forked is (launcher == "1"), "\n".join(seen[-30:])
    # Every line of Turnout's process, from the start to the engine's spawn, parses with the fields: the plan, the
    # "serving" line and uvicorn's lines included (one record each), Litestar's and vLLM's in it alike.
    spawn = next(i for i, line in enumerate(seen) if '"loading tools from ' in line)
    own = [json.loads(line) for line in seen[: spawn + 1]]
    assert all(set(item) >= _FIELDS for item in own)
    loggers = {item["logger"] for item in own}
    assert {"turnout.cli", "uvicorn.error", "turnout.engine"} <= loggers and any(
        name.startswith("vllm") for name in loggers
    )
    assert any(item["message"].startswith("plan: cpu, strategy keep;") for item in own)
    assert any(item["message"].startswith("Turnout serving tools on http://") for item in own)
    assert all("model" not in item for item in own)  # Turnout's own process serves no one model
    # The engine's line: its process (vLLM's name for it), another pid, and the model it serves.
    assert (
        set(engine_line) >= _FIELDS and engine_line["pid"] != own[0]["pid"] and engine_line["logger"].startswith("vllm")
    )
    assert str(engine_line.get("process", "")).startswith(("EngineCore", "VllmWorker", "Worker"))
