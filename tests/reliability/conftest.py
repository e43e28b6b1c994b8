"""Live servers for the load-and-fault suite, one at a time, shared by every test that needs the same profile.

Each test names the profile it runs against with ``@pytest.mark.live_server("keep")``; ``tests/conftest.py``
orders the tests so that each profile's server starts once. The servers come from the session's shared live servers
(``tests/live_servers.py``): at most one is alive at a time (keep holds two engines), which keeps this suite
within the machine's two-engines rule.

``TURNOUT_RELIABILITY=long`` selects the long version (300 requests, 10 admin switches; run by ``just bench``);
the default is the short one CI runs. ``TURNOUT_RELIABILITY_OUT=folder`` writes each traffic run's summary as
JSON there.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.engine import SlotState
from server.tinymodels.spec import TEMPLATES_DIR
from tests.api.live_server import LiveServer, start_server, wait_ready
from tests.live_servers import LiveServers

ADMIN_TOKEN = "reliability-admin-token"
MODE_ENV = "TURNOUT_RELIABILITY"
OUT_ENV = "TURNOUT_RELIABILITY_OUT"
#: Debugging: run the suite against a server you started yourself (its profile must match the tests').
SERVER_ENV = "TURNOUT_RELIABILITY_SERVER"
#: The demo's tiny-engine settings (profiles/demo.yaml): small, float32, eager, a 16 MiB KV cache.
TINY_ENGINE: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 1024,
    "max_num_seqs": 8,
    "kv_cache_memory_bytes": 16 * 1024 * 1024,
    "enforce_eager": True,
}
TEMPLATES = {"tools": "tiny-chatml-tools.jinja", "plain": "tiny-bracket.jinja"}
#: Server profiles (each starts once).
PROFILES: dict[str, dict[str, Any]] = {
    "keep": {"strategy": "keep", "max_active": 2},
    "stop": {"strategy": "stop"},
    "auto": {"strategy": "keep", "max_active": 2, "mode": "auto"},
    "reconfigure": {"strategy": "reconfigure"},
}

#: The models a profile's server loads beside the default one as it starts.
PRELOADED: dict[str, tuple[str, ...]] = {"keep": ("plain",)}

#: The per-test limit of the long version (the short one keeps pyproject's 600 s).
LONG_TEST_TIMEOUT_S = 2400


@dataclass(frozen=True)
class Scale:
    """How much traffic a run sends: the long version is what the issue asks for, the short one fits CI."""

    name: str
    requests: int
    admin_switches: int

    @classmethod
    def from_env(cls) -> Scale:
        if os.environ.get(MODE_ENV, "short") == "long":
            return cls("long", requests=300, admin_switches=10)
        return cls("short", requests=80, admin_switches=3)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In the long version, this suite's tests get a longer limit (tests/conftest.py orders them by server)."""
    if Scale.from_env().name == "long":
        # 10 stop switches each start an engine: 12 min on a busy 2-core machine, past the suite's 10-min limit.
        for item in items:
            if item.path.is_relative_to(Path(__file__).parent) and item.get_closest_marker("live_server"):
                item.add_marker(pytest.mark.timeout(LONG_TEST_TIMEOUT_S))


def broken_copy(model: Path, into: Path) -> Path:
    """A copy of ``model`` whose weights file misnames one tensor.

    Its header stays valid, so vLLM's engine-config check at start-up accepts the model; loading it fails when
    vLLM finds ``model.embed_tokens.weight`` missing from the checkpoint.
    """
    broken = into / "tiny-broken"
    if not broken.exists():
        shutil.copytree(model, broken)
        weights = broken / "model.safetensors"
        data = weights.read_bytes()
        (size,) = struct.unpack("<Q", data[:8])
        header = data[8 : 8 + size]
        assert b'"model.embed_tokens.weight"' in header
        header = header.replace(b'"model.embed_tokens.weight"', b'"model.embed_tokenz.weight"')  # same length
        weights.write_bytes(data[:8] + header + data[8 + size :])
    return broken


def write_profile(
    folder: Path,
    models: dict[str, Path],
    switching: dict[str, Any],
    *,
    default: str = "tools",
    preload: tuple[str, ...] = (),
) -> Path:
    """A JSON profile serving ``models`` with the tiny engine settings and each tiny model's own frontend
    (``preload``: the models loaded beside the default one as the server starts)."""
    entries: dict[str, Any] = {}
    for name, path in models.items():
        tools = path.name == "tiny-tools"
        template = TEMPLATES["tools" if tools else "plain"]
        entries[name] = {**TINY_ENGINE, "model": str(path), "chat_template": str(TEMPLATES_DIR / template)}
        if tools:
            entries[name].update(enable_auto_tool_choice=True, tool_call_parser="hermes")
        if name in preload:
            entries[name]["preload"] = True
    profile = {"default_model": default, "models": entries, "switching": {"drain_timeout": 5, **switching}}
    path = folder / "profile.json"
    path.write_text(json.dumps(profile, indent=2))
    return path


def _external(url: str) -> LiveServer:
    """A server started outside the suite: its log is not ours to read, so it reads as empty."""
    log = Path(os.devnull)
    return LiveServer(url=url, process=subprocess.Popen(["true"]), log_path=log, log_file=log.open("rb"))


class ServerPool:
    """The server of each reliability profile, from the session's shared live servers (one at a time; starting
    another one stops the one before)."""

    def __init__(self, models: dict[str, Path], servers: LiveServers) -> None:
        self._models = models
        self._servers = servers
        self._external: LiveServer | None = None

    def get(self, name: str) -> LiveServer:
        if url := os.environ.get(SERVER_ENV):
            if self._external is None:
                self._external = _external(url)
            return self._external

        def start(folder: Path) -> LiveServer:
            # keep holds both demo models: plain loads as the first tests run (its engine start is not a wait
            # inside a test's switch later).
            preload = PRELOADED.get(name, ())
            profile = write_profile(folder, self._models, PROFILES[name], preload=preload)
            env = {"TURNOUT_ADMIN_TOKEN": ADMIN_TOKEN}
            server = start_server(profile, folder / "server.log", env, preload=bool(preload))
            wait_ready(server, timeout=900)  # a busy machine can take minutes per engine start
            return server

        return self._servers.get(f"reliability-{name}", start)

    def close(self) -> None:
        """Stop the running server (a test that starts its own engines first)."""
        self._servers.close()


@pytest.fixture(scope="session")
def scale() -> Scale:
    return Scale.from_env()


@pytest.fixture
def live(request: pytest.FixtureRequest, server_pool: ServerPool) -> LiveServer:
    """The server of the test's ``live_server`` profile, at rest (:func:`wait_at_rest`)."""
    marker = request.node.get_closest_marker("live_server")
    assert marker is not None, "mark the test with @pytest.mark.live_server(profile)"
    server = server_pool.get(marker.args[0])
    wait_at_rest(server)
    return server


#: Slot states of an engine on the move.
_MOVING = frozenset({SlotState.LOADING, SlotState.DRAINING})


def wait_at_rest(server: LiveServer, timeout: float = 600.0) -> None:
    """Wait until ``server`` moves no engine: no switch, load, drain or restart under way (a preload as the server
    starts, an earlier test's heal). A test's traffic and switches then begin from rest, not queued behind an
    engine start: a switch behind ``keep``'s preload once took 30 s, the whole traffic's length."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    while True:
        status = httpx.get(f"{server.url}/admin/status", headers=headers, timeout=30).json()
        moving = [slot["name"] for slot in status["slots"] if slot["state"] in _MOVING]
        if status["switching_to"] is None and not moving:
            return
        assert time.monotonic() < deadline, f"still moving {moving or status['switching_to']} after {timeout} s"
        time.sleep(0.5)


@pytest.fixture(scope="session")
def completion_prompts(reliability_models: dict[str, Path]) -> dict[str, str]:
    """Each demo model's chat prompt for "Hello!", rendered with its template, for the completions API."""
    from transformers import AutoTokenizer

    prompts = {}
    for name in ("tools", "plain"):
        tokenizer = AutoTokenizer.from_pretrained(reliability_models[name])
        template = (TEMPLATES_DIR / TEMPLATES[name]).read_text()
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Hello!"}], chat_template=template, tokenize=False, add_generation_prompt=True
        )
        prompts[name] = str(rendered)
    return prompts


def save_summary(name: str, summary: dict[str, Any]) -> None:
    """Print a traffic run's summary and, with ``TURNOUT_RELIABILITY_OUT``, write it as JSON."""
    print(f"\n{name}: {json.dumps(summary, indent=1)}")
    out = os.environ.get(OUT_ENV)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(summary, indent=2))
