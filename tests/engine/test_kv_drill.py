"""The ``kv`` fault drill through a real engine, as a user runs it: ``turnout serve --inject-fault kv:plain``.

The console script runs as a subprocess from a folder of its own with a fresh home (``tests/entrypoints``), on the
demo's two tiny models taking turns on one engine (``reconfigure``, auto mode, kept KV blocks on): each switch
keeps the prefix-cache blocks of the model the device leaves, and the in-place load rebuilds vLLM's own prefix
cache, so a cached token after a switch back came from the pool. ``tools`` (no fault) gets its blocks back, which
shows the pool works in this server; ``plain``'s come back with flipped bytes, and their digests refuse every one
(the engine logs each), and the requests that waited through the switch get the answers a fresh vLLM server gives
on the same checkpoint (``tests/vllm_reference.py``). The server warned of the drill at start, and
``/admin/status`` lists it.

A subprocess, not the in-process app: the fault is armed, and the kept blocks set up, as ``turnout serve`` does it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from server.profiles import load_profile
from tests.api.live_server import demo_copy
from tests.entrypoints.conftest import Started, User, new_user
from tests.ports import free_port
from tests.vllm_reference import LONG, VllmReference, greedy_body

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]

TOKEN: Final = "kv-drill-admin-token"
ADMIN: Final = {"Authorization": f"Bearer {TOKEN}"}
#: How long the server may take to answer /ready: its tiny engine starts in 15-25 s, far longer on a busy machine.
READY_S: Final = 300.0
#: What a prefix-cache hit of :data:`LONG` covers: whole blocks (vLLM's CPU block size is 128).
CACHED_AT_LEAST: Final = 256
Drill = tuple[str, Started, Path]
_SWITCHING: Final = re.compile(r"^switching:\n(?:  .*\n)+", re.MULTILINE)
_DRILL_SWITCHING: Final = """\
switching:
  mode: auto
  strategy: reconfigure
  drain_timeout: 5
  max_wait_s: 900
  kv_keep_bytes: 67108864
"""


def _drill_profile(text: str) -> str:
    """The demo's models taking turns on one engine, their prefix-cache blocks kept."""
    edited, count = _SWITCHING.subn(_DRILL_SWITCHING, text)
    assert count == 1, "the demo profile's switching section moved"
    return edited


@pytest.fixture(scope="module")
def drill(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
    """``turnout serve --inject-fault kv:plain`` on the drill's profile: its URL, the running command and the
    profile."""
    root = tmp_path_factory.mktemp("kv-drill")
    profile = demo_copy(tiny_models, root / "project", _drill_profile)
    user: User = new_user(root)
    port = free_port()
    started = user.start(
        "serve",
        str(profile),
        "--port",
        str(port),
        "--no-preload",
        "--inject-fault",
        "kv:plain",
        "--enable-prompt-tokens-details",  # usage's cached_tokens, as vLLM's flag gives it
        log=root / "serve.log",
        env={"TURNOUT_ADMIN_TOKEN": TOKEN},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        started.wait_ready(f"{url}/ready", READY_S)
        yield url, started, profile
    finally:
        started.stop()
        started.kill()


async def _answer(client: httpx.AsyncClient, model: str, prompt: list[int] | str = LONG) -> tuple[str, int]:
    """A greedy completion's text, and how many of its prompt tokens vLLM found cached."""
    answer = await client.post("/v1/completions", json=greedy_body(model, prompt))
    assert answer.status_code == 200, answer.text
    payload: dict[str, Any] = answer.json()
    details = payload["usage"].get("prompt_tokens_details") or {}
    return payload["choices"][0]["text"], int(details.get("cached_tokens") or 0)


async def _last_switch(client: httpx.AsyncClient) -> dict[str, Any]:
    status = await client.get("/admin/status", headers=ADMIN)
    assert status.status_code == 200, status.text
    report: dict[str, Any] = status.json()["last_switch"]
    return report


async def test_kept_blocks_read_back_flipped_are_refused_and_the_answer_is_a_fresh_servers(
    drill: Drill, vllm_reference: VllmReference
) -> None:
    url, started, profile = drill
    reference = vllm_reference.answers("plain", load_profile(str(profile)).models["plain"])
    warned = [line for line in started.log().splitlines() if "fault drill: kv:plain is armed" in line]
    assert len(warned) == 1, started.log()[-4000:]
    async with httpx.AsyncClient(base_url=url, timeout=900) as client:
        status = await client.get("/admin/status", headers=ADMIN)
        assert status.json()["faults"] == ["kv:plain"]

        fresh, _ = await _answer(client, "tools")  # the server starts on tools: blocks to keep
        # Auto mode: the requests switch to plain and wait through the switch and its proof.
        first = await asyncio.gather(_answer(client, "plain"), _answer(client, "plain", "Hello"))
        assert first[0][0] == reference["long"] and first[1][0] == reference["hello"]
        assert (await _answer(client, "plain"))[1] >= CACHED_AT_LEAST, "vLLM's own prefix cache is on"

        text, cached = await _answer(client, "tools")  # plain's blocks kept as the device leaves it
        assert cached >= CACHED_AT_LEAST, "tools (no fault) got its kept blocks back: the pool works here"
        assert text == fresh
        left = await _last_switch(client)
        assert left["current_model"] == "tools" and left["kept_blocks"] >= CACHED_AT_LEAST // 128, left
        assert _refused(started) == 0, "no block was refused before plain's came back"

        back = await asyncio.gather(_answer(client, "plain"), _answer(client, "plain", "Hello"))
    assert [text for text, _ in back] == [reference["long"], reference["hello"]], "a refused block answered"
    # vLLM counts the hit its connector offered in the usage's cached tokens when it schedules the request, before
    # the worker refuses the blocks and vLLM prefills them again: the engine's log says what was refused.
    assert _refused(started) == left["kept_blocks"], "every kept block of plain was refused by its digest"


def _refused(started: Started) -> int:
    """How many kept blocks the engine refused (each logs one line)."""
    return sum("not restored" in line and "does not match its digest" in line for line in started.log().splitlines())
