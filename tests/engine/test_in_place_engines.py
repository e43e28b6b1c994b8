"""The in-place strategy (``strategy: reconfigure``) on real tiny vLLM engines, through the app: models swapped
inside one engine's processes, by a full in-place load or, between models of the same shape, by copying weights.

``tools`` (tiny-tools) and ``a`` (tiny-plain) differ in chat template, vocabulary (469 and 633 tokens) and shape;
``b`` is a copy of ``a`` with other weights (tiny-plain's plus seeded noise), another chat template and half the
``max_model_len``: the same shape as ``a``, so a swap between them copies the weights into the loaded model.
``broken`` is not a safetensors file at all; ``torn`` has tiny-plain's config over a checkpoint with one tensor of
the wrong shape, so its swap starts on the weights path and fails half-way.

A fresh engine per model (``stop``: ``a``, then ``b``) records what each answers first, and stops; then one
reconfigure host, started on ``tools`` (its first answers are a fresh engine's), serves every test in file order;
each test starts by switching to the model it needs. (This module was two, each with its own fresh engines and
host: five engine starts, now three.)
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
from server.tinymodels import TEMPLATES_DIR
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
#: A prompt longer than a few KV blocks, so a prefix-cache hit on the previous model's blocks would be used.
PREFIX = " ".join(f"{n} apples and {n + 1} pears" for n in range(20))
LONG_PROMPTS = (PREFIX + " The end.", PREFIX + " The weather in Paris is")
Served = tuple[httpx.AsyncClient, EngineManager[Any]]
#: The host: its client, its manager, and what its fresh engine answered for ``tools``.
Host = tuple[httpx.AsyncClient, EngineManager[Any], dict[str, Any]]


def _other_weights(source: Path, dest: Path) -> Path:
    """``source`` (a model folder) copied with every weight moved by seeded noise of its own spread."""
    import torch
    from safetensors.torch import load_file, save_file

    if dest.exists():
        return dest
    shutil.copytree(source, dest)
    generator = torch.Generator().manual_seed(7)
    tensors = load_file(str(source / "model.safetensors"))
    moved = {
        name: tensor + torch.randn(tensor.shape, generator=generator) * float(tensor.float().std() or 1.0)
        for name, tensor in tensors.items()
    }
    save_file(moved, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def _corrupt_weights(source: Path, dest: Path) -> Path:
    """``source`` with a readable checkpoint whose last tensor has the wrong shape: a load fails half-way."""
    import torch
    from safetensors.torch import load_file, save_file

    if dest.exists():
        return dest
    shutil.copytree(source, dest)
    tensors = load_file(str(source / "model.safetensors"))
    last = sorted(name for name in tensors if name.endswith("mlp.down_proj.weight"))[-1]
    tensors[last] = torch.zeros(3, 5)
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def _profile(tiny_models: dict[str, Path], tmp: Path, strategy: str) -> Profile:
    """The demo's two models (``tools``; ``plain`` as ``a``), ``b`` (``a``'s shape, other weights, template and
    limit) and the two broken ones, under ``strategy``."""
    demo = load_profile(DEMO)
    broken = tmp / "tiny-broken"
    if not broken.exists():
        shutil.copytree(tiny_models["tiny-plain"], broken)
        (broken / "model.safetensors").write_bytes(b"\x00 not a safetensors file")
    plain = demo.models["plain"]
    other = _other_weights(tiny_models["tiny-plain"], tmp / "tiny-plain-b")
    torn = _corrupt_weights(tiny_models["tiny-plain"], tmp / "tiny-torn")
    models: dict[str, ModelProfile] = {
        "tools": demo.models["tools"],
        "a": plain,
        "b": msgspec.structs.replace(
            plain,
            model=str(other),
            chat_template=str(TEMPLATES_DIR / "tiny-chatml-tools.jinja"),
            engine_args={**plain.engine_args, "max_model_len": 512},
        ),
        "broken": msgspec.structs.replace(plain, model=str(broken)),
        "torn": msgspec.structs.replace(plain, model=str(torn)),
    }
    switching = msgspec.structs.replace(demo.switching, strategy=strategy, drain_timeout=5.0)
    return msgspec.structs.replace(demo, default_model="tools", models=models, switching=switching)


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


async def _long_answers(client: httpx.AsyncClient, model: str, prompts: tuple[str, ...] = LONG_PROMPTS) -> list[str]:
    """Greedy completions of prompts sharing a long prefix, one request each (the second can hit the first's)."""
    texts = []
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": True}
        response = await client.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        texts.append(response.json()["choices"][0]["text"])
    return texts


async def _all_answers(client: httpx.AsyncClient, model: str) -> dict[str, Any]:
    return {**await _answers(client, model), "long": await _long_answers(client, model)}


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("in-place")


@pytest.fixture(scope="module")
async def fresh(tiny_models: dict[str, Path], module_tmp: Path) -> dict[str, dict[str, Any]]:
    """What a freshly started engine answers for ``a`` and for ``b`` (``stop``: each in an engine of its own; they
    stop before the host starts)."""
    client, manager = await _serve(_profile(tiny_models, module_tmp, "stop"), "a")
    try:
        first = await _all_answers(client, "a")
        assert (await _switch(client, "b")).status_code == 200
        return {"a": first, "b": await _all_answers(client, "b")}
    finally:
        await client.aclose()
        await manager.shutdown()


@pytest.fixture(scope="module")
async def host(tiny_models: dict[str, Path], module_tmp: Path, fresh: dict[str, Any]) -> AsyncIterator[Host]:
    """The reconfigure host on ``tools``, and what its fresh engine answered for ``tools``."""
    client, manager = await _serve(_profile(tiny_models, module_tmp, "reconfigure"), "tools")
    try:
        yield client, manager, await _answers(client, "tools")
    finally:
        await client.aclose()
        await manager.shutdown()


# -- the full in-place load (models of another shape) ------------------------------------------------------


async def test_a_b_a_answers_equal_fresh_engines(host: Host, fresh: dict[str, Any]) -> None:
    client, manager, fresh_tools = host
    engine = _active_engine(manager)
    assert fresh_tools["max_model_len"] == 1024 and fresh["b"]["max_model_len"] == 512
    assert fresh_tools["prompt_tokens"] != fresh["b"]["prompt_tokens"], "the tokenizers differ"

    switched = await _switch(client, "b")
    assert switched.status_code == 200, switched.text
    report = switched.json()
    assert report["method"] == "reconfigure" and report["current_model"] == "b"
    for phase in ("unload_ms", "load_ms", "kv_cache_ms", "frontend_ms"):
        assert report[phase] is not None and report[phase] >= 0, phase
    assert _active_engine(manager) is engine, "the same engine processes serve the next model"
    assert await _all_answers(client, "b") == fresh["b"]

    back = await _switch(client, "tools")
    assert back.status_code == 200 and back.json()["method"] == "reconfigure"
    assert await _answers(client, "tools") == fresh_tools


async def test_tool_calls_after_a_round_trip(host: Host) -> None:
    client, _, _ = host
    await _switch(client, "b")
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
    switched = await _switch(client, "b", drain_timeout=0.5)
    assert switched.status_code == 200, switched.text
    bodies = await asyncio.wait_for(asyncio.gather(*streams), timeout=120)
    for text in bodies:
        # Each stream ends: completed (its [DONE]) or ended by the switch with an error event naming it.
        assert text.rstrip().endswith("data: [DONE]") or "switch" in text.lower(), text[-500:]
    assert switched.json()["aborted_requests"] + sum(text.rstrip().endswith("[DONE]") for text in bodies) >= 6
    chat = await client.post("/v1/chat/completions", json={"model": "b", "messages": HI, "temperature": 0})
    assert chat.status_code == 200 and chat.json()["model"] == "b"


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
    assert (await _switch(client, "b")).status_code == 200
    baseline = _host_rss_mb(manager)
    readings: list[float] = []
    reports: list[dict[str, Any]] = []
    for i in range(RSS_SWITCHES):
        switched = await _switch(client, "tools" if i % 2 == 0 else "b")
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


# -- the weights path (a pair of the same shape) ------------------------------------------------------------


async def test_the_pair_differs_in_weights_frontend_and_limits(fresh: dict[str, dict[str, Any]]) -> None:
    a, b = fresh["a"], fresh["b"]
    assert a["completions"] != b["completions"] and a["long"] != b["long"], "other weights answer otherwise"
    assert a["prompt_tokens"] != b["prompt_tokens"], "the chat templates render differently"
    assert (a["max_model_len"], b["max_model_len"]) == (1024, 512)


async def test_a_b_a_copies_weights_and_answers_as_fresh_engines(host: Host, fresh: dict[str, Any]) -> None:
    client, manager, _ = host
    assert (await _switch(client, "a")).status_code == 200
    engine = _active_engine(manager)
    # The previous model's requests first: their KV blocks are cached under the same token hashes.
    assert await _long_answers(client, "a") == fresh["a"]["long"]
    for target in ("b", "a", "b"):
        switched = await _switch(client, target)
        assert switched.status_code == 200, switched.text
        report = switched.json()
        assert (report["method"], report["current_model"]) == ("weights", target), report
        assert _active_engine(manager) is engine, "the same engine processes serve the next model"
        assert await _all_answers(client, target) == fresh[target], f"{target} after a weights swap"


async def test_each_model_of_a_same_shape_pair_keeps_its_own_limits(host: Host) -> None:
    client, _, _ = host
    long_chat = [{"role": "user", "content": PREFIX * 2}]
    assert (await _switch(client, "a")).status_code == 200
    tokens = (await client.post("/tokenize", json={"model": "a", "messages": long_chat})).json()["count"]
    assert 512 < tokens < 1000, f"the chat must fit a's limit and not b's: {tokens} tokens"
    assert (await _switch(client, "b")).json()["method"] == "weights"
    refused = await client.post("/v1/chat/completions", json={"model": "b", "messages": long_chat, "max_tokens": 4})
    assert refused.status_code == 400, refused.text  # b's 512 tokens, not a's 1024
    assert (await _switch(client, "a")).json()["method"] == "weights"
    accepted = await client.post("/v1/chat/completions", json={"model": "a", "messages": long_chat, "max_tokens": 4})
    assert accepted.status_code == 200, accepted.text


async def test_another_shape_falls_back_to_the_full_in_place_load(host: Host, fresh: dict[str, Any]) -> None:
    client, _, _ = host
    assert (await _switch(client, "a")).status_code == 200
    to_tools = await _switch(client, "tools")
    assert to_tools.status_code == 200 and to_tools.json()["method"] == "reconfigure", to_tools.text
    chat = await client.post(
        "/v1/chat/completions", json={"model": "tools", "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert chat.status_code == 200 and chat.json()["model"] == "tools"
    back = await _switch(client, "a")
    assert back.status_code == 200 and back.json()["method"] == "reconfigure", back.text
    assert await _all_answers(client, "a") == fresh["a"]


async def test_corrupt_weights_in_a_same_shape_swap_roll_back(host: Host, fresh: dict[str, Any]) -> None:
    client, manager, _ = host
    assert (await _switch(client, "a")).status_code == 200
    failed = await _switch(client, "torn")
    assert failed.status_code >= 400, failed.text
    assert "turnout_load_model" in failed.text, f"the engine core's weights load failed: {failed.text}"
    assert manager.active_model == "a"
    assert await _all_answers(client, "a") == fresh["a"]
    # The failed load dropped the half-loaded model; the next same-shape swap copies weights again.
    assert (await _switch(client, "b")).json()["method"] == "weights"
    assert await _all_answers(client, "b") == fresh["b"]
