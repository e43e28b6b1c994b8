"""Kept prefix KV (``switching.kv_keep_bytes``) on real tiny vLLM engines, through the app.

``plain`` (A) and ``tools`` (B) take turns on one engine (``reconfigure``), or each on an engine of its own
(``stop``). The proof of a restore is vLLM's own count of cached prompt tokens (``usage.prompt_tokens_details``):
a swap rebuilds vLLM's prefix cache, and a stop ends it, so after A->B->A any cached token of A's came from the
pool. Prompts are token ids below both vocabularies, so that A's and B's block hashes are the same: B's miss
shows the pool is keyed by model, not by tokens alone.

Beside the pool, another local user (``nobody``) planted in ``/dev/shm`` what the old pool trusted (a folder of
its prefix open to all, with records naming a folder outside, a linked model folder, a 10 GiB sparse block, and a
link of its prefix): the keep works, and the planted things and the folder they aim at are left as they were.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from server.api import ApiSettings, create_app
from server.engine import EngineManager
from server.engine.factory import build_manager
from server.frontend import FrontendSettings, build_bundle_for_profile
from server.frontend.vllm_adapter import build_renderer
from server.profiles import load_profile
from server.profiles.schema import Profile
from server.vllm_plugin import with_kv_keep
from server.vllm_plugin.kv_pool import BLOCK_DIGEST_BYTES, DEFAULT_POOL_PARENT, KVPool
from server.vllm_plugin.kv_pool_owner import PoolOwner
from tests.fakes.local_user import can_plant, plant_beside_pools, planted_tree

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "profiles" / "demo.yaml"
TOKEN = "kv-keep-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
#: A long shared prefix (300 tokens), then each turn's own tail.
PREFIX = [20 + (i * 37) % 400 for i in range(300)]
#: What a prefix-cache hit covers of it: whole blocks (vLLM's CPU block size is 128; 16 to 128 all pass).
CACHED_AT_LEAST = 256
TURN = [*PREFIX, 11, 12, 13]
KEEP_BYTES = 64 * 2**20
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def _profile(strategy: str, pool_root: Path, plain: Path | None = None) -> Profile:
    demo = load_profile(DEMO)
    models = {name: msgspec.structs.replace(demo.models[name], preload=False) for name in ("plain", "tools")}
    if plain is not None:  # plain's checkpoint from another folder
        models["plain"] = msgspec.structs.replace(models["plain"], model=str(plain))
    switching = msgspec.structs.replace(demo.switching, strategy=strategy, drain_timeout=5.0, kv_keep_bytes=KEEP_BYTES)
    return with_kv_keep(msgspec.structs.replace(demo, models=models, switching=switching), pool_root)


Served = tuple[httpx.AsyncClient, EngineManager[Any], KVPool]


async def _serve(strategy: str, tmp_path: Path, plain: Path | None = None) -> AsyncIterator[Served]:
    owner = PoolOwner()  # a pool of this test's own, made as a server makes its own
    profile = _profile(strategy, owner.root, plain)

    async def build_bundle(name: str, model: Any, engine: Any) -> Any:
        return await build_bundle_for_profile(name, model, engine, FrontendSettings(enable_prompt_tokens_details=True))

    manager: EngineManager[Any] = build_manager(
        profile, build_bundle, build_renderer=build_renderer, admission_timeout=120
    )
    await manager.initialize("plain")
    app = create_app(manager, ApiSettings(admin_token=TOKEN))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turnout.test", timeout=300)
    pool = KVPool(owner.root, KEEP_BYTES)
    try:
        yield client, manager, pool
    finally:
        await client.aclose()
        await manager.shutdown()
        owner.remove()


async def _turn(client: httpx.AsyncClient, model: str, prompt: list[int] = TURN) -> tuple[str, int]:
    """A greedy turn's text, and how many of its prompt tokens vLLM found cached."""
    answer = await client.post(
        "/v1/completions",
        json={"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    details = body["usage"].get("prompt_tokens_details") or {}
    return body["choices"][0]["text"], int(details.get("cached_tokens") or 0)


async def _switch(client: httpx.AsyncClient, model: str) -> dict[str, Any]:
    switched = await client.post("/v1/models/switch", json={"model": model, "drain_timeout": 5.0}, headers=ADMIN)
    assert switched.status_code == 200, switched.text
    report: dict[str, Any] = switched.json()
    return report


@pytest.fixture(scope="module")
def planted() -> Iterator[tuple[Path, list[str]] | None]:
    """What ``nobody`` planted in ``/dev/shm`` before the server made its pool: the folder it aims at, and the
    planted tree as it was (None where this process cannot act as another user)."""
    if not can_plant():
        yield None
        return
    tag = secrets.token_hex(4)
    victim = plant_beside_pools(DEFAULT_POOL_PARENT, tag)
    try:
        yield victim, planted_tree(DEFAULT_POOL_PARENT, tag)
    finally:
        for path in DEFAULT_POOL_PARENT.glob(f"*-{tag}"):
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
async def reconfigured(
    tmp_path_factory: pytest.TempPathFactory, planted: tuple[Path, list[str]] | None
) -> AsyncIterator[Served]:
    async for served in _serve("reconfigure", tmp_path_factory.mktemp("kv-keep")):
        yield served


async def test_a_b_a_restores_a_prefix_under_reconfigure(reconfigured: Served) -> None:
    client, _, pool = reconfigured
    fresh, cold_cached = await _turn(client, "plain")  # the engine's first request: a fresh engine's answer
    assert cold_cached == 0
    assert (await _turn(client, "plain"))[1] >= CACHED_AT_LEAST, "vLLM's own prefix cache is on"

    left = await _switch(client, "tools")
    assert left["method"] == "reconfigure"
    assert sum(pool.usage().values()) > 0, "A's blocks were kept when the device left it"
    assert left["kept_blocks"] >= CACHED_AT_LEAST // 128 and left["kept_bytes"] > 0 and left["keep_ms"] > 0
    _, b_cached = await _turn(client, "tools")
    assert b_cached == 0, "B never reads A's kept blocks, though their token hashes are the same"

    await _switch(client, "plain")
    text, cached = await _turn(client, "plain")
    assert cached >= CACHED_AT_LEAST, "the swap rebuilt vLLM's prefix cache: A's prefix came back from the pool"
    assert text == fresh


def _cut_short(data: bytes) -> bytes:
    """A block file as an eviction under the lookup, or a dying writer, leaves it."""
    return b"\0" * 7


def _flipped(data: bytes) -> bytes:
    """Every kept byte flipped in place, the size and the digest kept: only the digest can tell."""
    return bytes(byte ^ 0xFF for byte in data[:-BLOCK_DIGEST_BYTES]) + data[-BLOCK_DIGEST_BYTES:]


@pytest.mark.parametrize(("change", "tail"), [(_cut_short, 21), (_flipped, 31)])
async def test_a_block_that_cannot_be_restored_as_kept_is_prefilled_again(
    reconfigured: Served, change: Callable[[bytes], bytes], tail: int
) -> None:
    # The pool's files change after the lookup found them; the answer is a fresh engine's.
    client, manager, pool = reconfigured
    if manager.active_model != "plain":
        await _switch(client, "plain")
    fresh, _ = await _turn(client, "plain", [*PREFIX, tail])
    await _switch(client, "tools")
    await _switch(client, "plain")
    assert _damage(pool, change) > 0
    text, _ = await _turn(client, "plain", [*PREFIX, tail])
    assert text == fresh, "a block that could not be restored as kept was prefilled again"


def _damage(pool: KVPool, change: Callable[[bytes], bytes]) -> int:
    """Rewrite every kept block file of every model with ``change`` of its bytes; how many."""
    damaged = 0
    for folder in pool.root.iterdir():
        if folder.is_dir() and len(folder.name) == 32:  # a model identity's folder
            for block in folder.iterdir():
                block.write_bytes(change(block.read_bytes()))
                damaged += 1
    return damaged


async def test_what_another_user_planted_beside_the_pool_is_left_alone(
    reconfigured: Served, planted: tuple[Path, list[str]] | None
) -> None:
    """After the keeps and restores above (which worked): nothing planted was read as the pool's, and nothing
    outside the pool was deleted."""
    if planted is None:
        pytest.skip("planting as another user needs root and a system python3")
    _, _, pool = reconfigured
    victim, before = planted
    tag = victim.name.removeprefix("victim-")
    assert (victim / "precious").read_text() == "keep me"
    assert planted_tree(DEFAULT_POOL_PARENT, tag) == before
    assert pool.root.parent == DEFAULT_POOL_PARENT and tag not in pool.root.name
    assert sum(pool.usage().values()) > 0, "the pool kept blocks"


async def _states(client: httpx.AsyncClient) -> dict[str, str]:
    status = (await client.get("/admin/status", headers=ADMIN)).json()
    return {slot["name"]: slot["state"] for slot in status["slots"]}


async def test_a_b_a_restores_a_prefix_under_stop(tmp_path: Path) -> None:
    """Also the suite's one real-engine ``stop`` A->B->A: each switch stops the engine left and starts the
    target's, and each model answers as itself (B with its tool call, A as its fresh engine did)."""
    async for client, manager, _ in _serve("stop", tmp_path):
        fresh, _ = await _turn(client, "plain")
        assert manager.published is not None
        first_bundle = manager.published.bundle
        left = await _switch(client, "tools")
        assert left["strategy"] == "stop" and left["method"] in (None, "restart"), left
        assert left["kept_blocks"] > 0 and left["kept_bytes"] > 0 and left["keep_ms"] > 0, "the stop's keep"
        assert await _states(client) == {"plain": "stopped", "tools": "active"}
        chat = await client.post("/v1/chat/completions", json={"model": "tools", "messages": WEATHER, "tools": TOOLS})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        await _switch(client, "plain")
        assert await _states(client) == {"plain": "active", "tools": "stopped"}
        assert manager.published is not None and manager.published.bundle is not first_bundle, "a fresh engine"
        text, cached = await _turn(client, "plain")
        assert cached >= CACHED_AT_LEAST, "A's prefix outlived its engine in the pool"
        assert text == fresh


def _rewrite_keeping_stamps(weights: Path) -> None:
    """Rewrite ``weights`` as ``cp -p`` of a same-shape fine-tune would: other values, the same size and mtime."""
    from safetensors.torch import load_file, save_file

    stamp = weights.stat()
    tensors = load_file(weights)
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] * 1.5
    save_file(tensors, weights, metadata={"format": "pt"})
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (stamp.st_size, stamp.st_mtime_ns)


async def test_a_checkpoint_rewritten_with_the_same_sizes_and_times_gets_none_of_its_old_blocks(
    tmp_path: Path,
) -> None:
    """A's blocks are kept when the device leaves it; its checkpoint is then rewritten in place with the same
    sizes and modification times; when A comes back, nothing of the old weights' cache answers."""
    plain = tmp_path / "plain"
    shutil.copytree(load_profile(DEMO).models["plain"].model, plain)
    async for client, _, pool in _serve("stop", tmp_path, plain):
        await _turn(client, "plain")
        await _switch(client, "tools")
        kept = set(pool.usage())
        assert kept, "A's blocks were kept when the device left it"
        _rewrite_keeping_stamps(plain / "model.safetensors")
        await _switch(client, "plain")
        _, cached = await _turn(client, "plain")
        assert cached == 0, "the old weights' kept blocks answered for the rewritten checkpoint"
        assert not kept & set(pool.usage()), "the old identity's blocks were dropped"
