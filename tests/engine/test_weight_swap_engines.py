"""The ``weights`` path of ``strategy: reconfigure`` on real tiny vLLM engines: same-shape swaps copy weights only.

``a`` is tiny-plain; ``b`` is a copy with other weights (tiny-plain's plus seeded noise), another chat template
and half the ``max_model_len``: the same shape, so a swap between them copies the weights into the loaded model.
``tools`` (tiny-tools: another vocabulary) has another shape, and ``broken`` has tiny-plain's config over a
checkpoint with one tensor of the wrong shape, so its swap starts on the weights path and fails half-way. A
fresh engine per model (``stop``) records what each answers first; one reconfigure host then serves every test
in file order.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from server.engine import EngineManager
from server.profiles import load_profile
from server.profiles.schema import ModelProfile, Profile
from server.tinymodels import TEMPLATES_DIR
from tests.engine.test_reconfigure_engines import DEMO, _active_engine, _answers, _serve, _switch

pytestmark = pytest.mark.engine

#: A prompt longer than a few KV blocks, so a prefix-cache hit on the previous model's blocks would be used.
PREFIX = " ".join(f"{n} apples and {n + 1} pears" for n in range(20))
LONG_PROMPTS = (PREFIX + " The end.", PREFIX + " The weather in Paris is")
Host = tuple[httpx.AsyncClient, EngineManager[Any]]


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
    demo = load_profile(str(DEMO))
    plain = demo.models["plain"]
    other = _other_weights(tiny_models["tiny-plain"], tmp / "tiny-plain-b")
    broken = _corrupt_weights(tiny_models["tiny-plain"], tmp / "tiny-broken")
    models: dict[str, ModelProfile] = {
        "a": plain,
        "b": msgspec.structs.replace(
            plain,
            model=str(other),
            chat_template=str(TEMPLATES_DIR / "tiny-chatml-tools.jinja"),
            engine_args={**plain.engine_args, "max_model_len": 512},
        ),
        "tools": demo.models["tools"],
        "broken": msgspec.structs.replace(plain, model=str(broken)),
    }
    switching = msgspec.structs.replace(demo.switching, strategy=strategy, drain_timeout=5.0)
    return msgspec.structs.replace(demo, default_model="a", models=models, switching=switching)


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
    return tmp_path_factory.mktemp("weight-swap")


@pytest.fixture(scope="module")
async def fresh(tiny_models: dict[str, Path], module_tmp: Path) -> dict[str, dict[str, Any]]:
    """What a freshly started engine answers for ``a`` and for ``b`` (``stop``: each in an engine of its own)."""
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
    client, manager = await _serve(_profile(tiny_models, module_tmp, "reconfigure"), "a")
    try:
        yield client, manager
    finally:
        await client.aclose()
        await manager.shutdown()


async def test_the_pair_differs_in_weights_frontend_and_limits(fresh: dict[str, dict[str, Any]]) -> None:
    a, b = fresh["a"], fresh["b"]
    assert a["completions"] != b["completions"] and a["long"] != b["long"], "other weights answer otherwise"
    assert a["prompt_tokens"] != b["prompt_tokens"], "the chat templates render differently"
    assert (a["max_model_len"], b["max_model_len"]) == (1024, 512)


async def test_a_b_a_copies_weights_and_answers_as_fresh_engines(host: Host, fresh: dict[str, Any]) -> None:
    client, manager = host
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
    client, _ = host
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
    client, _ = host
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
    client, manager = host
    assert (await _switch(client, "a")).status_code == 200
    failed = await _switch(client, "broken")
    assert failed.status_code >= 400, failed.text
    assert "turnout_load_model" in failed.text, f"the engine core's weights load failed: {failed.text}"
    assert manager.active_model == "a"
    assert await _all_answers(client, "a") == fresh["a"]
    # The failed load dropped the half-loaded model; the next same-shape swap copies weights again.
    assert (await _switch(client, "b")).json()["method"] == "weights"
    assert await _all_answers(client, "b") == fresh["b"]
