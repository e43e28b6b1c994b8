"""``strategy: reconfigure`` on real tiny vLLM engines, through the app: the demo profile's two models swapped
inside one engine's processes.

One host engine serves the whole module (the tests run in file order and each starts by switching to the model
it needs). A fresh engine for ``plain`` runs first, alone, to record what a fresh engine answers. ``tools`` and
``plain`` differ in chat template, vocabulary (469 and 633 tokens) and, here, ``max_model_len``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psutil
import pytest

from server.api import ApiSettings, create_app
from server.engine import EngineManager
from server.engine.factory import build_manager
from server.engine.memory import engine_processes_rss_mb
from server.frontend import FrontendSettings, build_bundle_for_profile
from server.frontend.vllm_adapter import build_renderer
from server.profiles import load_profile
from server.profiles.schema import ModelProfile, Profile
from tests.fakes.manager_views import EngineRecorder

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "profiles" / "demo.yaml"
TOKEN = "reconfigure-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
PROMPTS = ["Hello", "The weather in Paris is", "1 2 3 4", "<s>[INST] Hi [/INST]"]
HI = [{"role": "user", "content": "Hi"}]
WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
Served = tuple[httpx.AsyncClient, EngineManager[Any]]


def _profile(tiny_models: dict[str, Path], tmp: Path, strategy: str) -> Profile:
    """The demo profile with ``strategy``, ``plain`` at another ``max_model_len``, and a corrupt model."""
    demo = load_profile(DEMO)
    broken = tmp / "tiny-broken"
    if not broken.exists():
        shutil.copytree(tiny_models["tiny-plain"], broken)
        (broken / "model.safetensors").write_bytes(b"\x00 not a safetensors file")
    plain = demo.models["plain"]
    plain = msgspec.structs.replace(plain, engine_args={**plain.engine_args, "max_model_len": 512})
    models: dict[str, ModelProfile] = {
        "tools": demo.models["tools"],
        "plain": plain,
        "broken": msgspec.structs.replace(plain, model=str(broken)),
    }
    switching = msgspec.structs.replace(demo.switching, strategy=strategy, drain_timeout=5.0)
    return msgspec.structs.replace(demo, models=models, switching=switching)


#: Each served manager's bundle builder, which saw the engine each model's bundle was built over.
_RECORDERS: dict[int, EngineRecorder[Any]] = {}


def _active_engine(manager: EngineManager[Any]) -> Any:
    """The engine the active model's bundle was built over (what its requests run on)."""
    assert manager.active_model is not None
    return _RECORDERS[id(manager)].engines[manager.active_model]


async def _serve(profile: Profile, first: str) -> Served:
    async def build_bundle(name: str, model: Any, engine: Any) -> Any:
        return await build_bundle_for_profile(name, model, engine, FrontendSettings())

    recorder = EngineRecorder(build_bundle)
    manager: EngineManager[Any] = build_manager(
        profile, recorder, build_renderer=build_renderer, admission_timeout=120.0
    )
    _RECORDERS[id(manager)] = recorder
    await manager.initialize(first)
    app = create_app(manager, ApiSettings(admin_token=TOKEN))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turnout.test", timeout=300)
    return client, manager


async def _answers(client: httpx.AsyncClient, model: str) -> dict[str, Any]:
    """Greedy answers of ``model``: raw completions, a chat, and the context length its frontend reports."""
    completion = await client.post(
        "/v1/completions",
        json={"model": model, "prompt": PROMPTS, "max_tokens": 12, "temperature": 0, "ignore_eos": True},
    )
    assert completion.status_code == 200, completion.text
    chat = await client.post("/v1/chat/completions", json={"model": model, "messages": HI, "temperature": 0})
    assert chat.status_code == 200, chat.text
    tokenized = await client.post("/tokenize", json={"model": model, "messages": HI})
    assert tokenized.status_code == 200, tokenized.text
    return {
        "completions": [choice["text"] for choice in sorted(completion.json()["choices"], key=lambda c: c["index"])],
        "chat": chat.json()["choices"][0]["message"]["content"],
        "prompt_tokens": tokenized.json()["tokens"],
        "max_model_len": tokenized.json()["max_model_len"],
    }


async def _switch(client: httpx.AsyncClient, model: str, drain_timeout: float = 5.0) -> httpx.Response:
    return await client.post("/v1/models/switch", json={"model": model, "drain_timeout": drain_timeout}, headers=ADMIN)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reconfigure")


@pytest.fixture(scope="module")
async def fresh_plain(tiny_models: dict[str, Path], module_tmp: Path) -> dict[str, Any]:
    """What a freshly started engine for ``plain`` answers (it runs alone and stops before the host starts)."""
    client, manager = await _serve(_profile(tiny_models, module_tmp, "stop"), "plain")
    try:
        return await _answers(client, "plain")
    finally:
        await client.aclose()
        await manager.shutdown()


@pytest.fixture(scope="module")
async def host(
    tiny_models: dict[str, Path], module_tmp: Path, fresh_plain: dict[str, Any]
) -> AsyncIterator[tuple[httpx.AsyncClient, EngineManager[Any], dict[str, Any]]]:
    """The reconfigure host on ``tools``, and what its fresh engine answered for ``tools``."""
    client, manager = await _serve(_profile(tiny_models, module_tmp, "reconfigure"), "tools")
    try:
        yield client, manager, await _answers(client, "tools")
    finally:
        await client.aclose()
        await manager.shutdown()


Host = tuple[httpx.AsyncClient, EngineManager[Any], dict[str, Any]]


async def test_a_b_a_answers_equal_fresh_engines(host: Host, fresh_plain: dict[str, Any]) -> None:
    client, manager, fresh_tools = host
    engine = _active_engine(manager)
    assert fresh_tools["max_model_len"] == 1024 and fresh_plain["max_model_len"] == 512
    assert fresh_tools["prompt_tokens"] != fresh_plain["prompt_tokens"], "the models render chats differently"

    switched = await _switch(client, "plain")
    assert switched.status_code == 200, switched.text
    report = switched.json()
    assert report["method"] == "reconfigure" and report["current_model"] == "plain"
    for phase in ("unload_ms", "load_ms", "kv_cache_ms", "frontend_ms"):
        assert report[phase] is not None and report[phase] >= 0, phase
    assert _active_engine(manager) is engine, "the same engine processes serve the next model"
    assert await _answers(client, "plain") == fresh_plain

    back = await _switch(client, "tools")
    assert back.status_code == 200 and back.json()["method"] == "reconfigure"
    assert await _answers(client, "tools") == fresh_tools


async def test_tool_calls_after_a_round_trip(host: Host) -> None:
    client, _, _ = host
    await _switch(client, "plain")
    assert (await _switch(client, "tools")).status_code == 200
    body = {"model": "tools", "messages": [{"role": "user", "content": "Weather in Paris?"}], "temperature": 0}
    answer = await client.post("/v1/chat/completions", json={**body, "tools": WEATHER_TOOLS})
    assert answer.status_code == 200, answer.text
    call = answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}


async def test_a_switch_during_streaming_load_loses_no_request(host: Host) -> None:
    client, _, _ = host
    assert (await _switch(client, "tools")).status_code == 200
    body = {"model": "tools", "prompt": "Hello", "max_tokens": 400, "temperature": 0, "ignore_eos": True}

    async def stream() -> str:
        response = await client.post("/v1/completions", json={**body, "stream": True})
        assert response.status_code == 200, response.text
        return response.text

    streams = [asyncio.create_task(stream()) for _ in range(6)]
    await asyncio.sleep(1.0)  # let them start generating
    switched = await _switch(client, "plain", drain_timeout=0.5)
    assert switched.status_code == 200, switched.text
    bodies = await asyncio.wait_for(asyncio.gather(*streams), timeout=120)
    for text in bodies:
        # Each stream ends: completed (its [DONE]) or ended by the switch with an error event naming it.
        assert text.rstrip().endswith("data: [DONE]") or "switch" in text.lower(), text[-500:]
    assert switched.json()["aborted_requests"] + sum(text.rstrip().endswith("[DONE]") for text in bodies) >= 6
    chat = await client.post("/v1/chat/completions", json={"model": "plain", "messages": HI, "temperature": 0})
    assert chat.status_code == 200 and chat.json()["model"] == "plain"


async def test_corrupt_target_weights_roll_back_to_the_previous_model(host: Host) -> None:
    client, manager, fresh_tools = host
    assert (await _switch(client, "tools")).status_code == 200
    failed = await _switch(client, "broken")
    assert failed.status_code >= 400, failed.text
    assert manager.active_model == "tools"
    assert await _answers(client, "tools") == fresh_tools


def _host_rss_mb(manager: EngineManager[Any]) -> float:
    """RSS of the host's engine core and its worker (other tests' engines may run in this session too)."""
    engine = _active_engine(manager)
    core = psutil.Process(engine.engine_core.resources.engine_manager.processes[0].pid)
    return float(core.memory_info().rss) / (1024 * 1024) + engine_processes_rss_mb(core)


#: Alternating switches of the quick RSS check; the long one (20 and more) is benchmarks/switch_weights.py's
#: RSS drift (``--rss-switches``, run by ``just bench``).
RSS_SWITCHES = 4


async def test_alternating_switches_keep_the_engine_rss_flat(host: Host) -> None:
    client, manager, _ = host
    assert (await _switch(client, "plain")).status_code == 200
    baseline = _host_rss_mb(manager)
    readings: list[float] = []
    reports: list[dict[str, Any]] = []
    for i in range(RSS_SWITCHES):
        switched = await _switch(client, "tools" if i % 2 == 0 else "plain")
        assert switched.status_code == 200, switched.text
        reports.append(switched.json())
        readings.append(_host_rss_mb(manager))
    assert all(report["method"] == "reconfigure" for report in reports)
    worst = max(abs(reading - baseline) / baseline for reading in readings)
    print(
        json.dumps(
            {
                "engine_rss_after_first_switch_mb": round(baseline, 1),
                "engine_rss_mb": [round(r, 1) for r in readings],
                "worst_deviation": round(worst, 4),
                "duration_ms": [r["duration_ms"] for r in reports],
            }
        )
    )
    assert worst <= 0.10, f"engine RSS moved {worst:.1%} from {baseline:.0f} MB: {readings}"
