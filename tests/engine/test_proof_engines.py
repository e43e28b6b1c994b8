"""A switch proves the model it publishes, on real tiny vLLM engines through the app (``switching.verify``).

``plain`` (its checkpoint copied, so the test may rewrite it) and ``tools`` take turns on one engine
(``reconfigure``, auto mode, kept KV blocks on). The tests run in order on one server: in-place swaps proven against
the fingerprints first recorded; the ``weights`` drill (the final norm negated by the next in-place load) found by
the proof, the waiting requests answered by the plain start as a healthy engine answers them; then ``plain``'s
checkpoint rewritten as ``cp -p`` of a same-shape fine-tune would (the same sizes and times): the proof's plain start
agrees with the in-place load (``changed``), and no kept block of the old weights answers.

Every answer is compared with a fresh vLLM server's on the same checkpoint as its files are then
(``tests/vllm_reference.py``: one server start per checkpoint per test session): the healthy ``plain`` and
``tools``, and ``plain`` rewritten (made beside it at the start, so that the three reference servers start one after
another in the background while the tests run).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from server.api import ApiSettings, create_app
from server.api.stack.assembly import probe_model
from server.engine import EngineManager, StateDir
from server.engine.factory import build_manager
from server.engine.runtime import FAULTS
from server.frontend import FrontendSettings, build_bundle_for_profile
from server.frontend.vllm_adapter import build_renderer
from server.profiles import Profile, load_profile
from server.vllm_plugin import with_kv_keep
from server.vllm_plugin.kv_pool_owner import PoolOwner
from tests.vllm_reference import LONG, VllmReference, greedy_body

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "profiles" / "demo.yaml"
TOKEN = "proof-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}

Served = tuple[httpx.AsyncClient, EngineManager[Any], Profile]


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory, vllm_reference: VllmReference) -> AsyncIterator[Served]:
    folder = tmp_path_factory.mktemp("proof")
    demo = load_profile(DEMO)
    plain = shutil.copytree(demo.models["plain"].model, folder / "plain")
    # The checkpoint the last test rewrites plain's into, made beside it now, so that its reference starts early.
    rewritten = shutil.copytree(plain, folder / "rewritten")
    _negate_final_norm_keeping_stamps(rewritten / "model.safetensors")
    models = {name: msgspec.structs.replace(demo.models[name], preload=False) for name in ("plain", "tools")}
    models["plain"] = msgspec.structs.replace(models["plain"], model=str(plain))
    switching = msgspec.structs.replace(
        demo.switching,
        mode="auto",
        strategy="reconfigure",
        drain_timeout=5.0,
        kv_keep_bytes=64 * 2**20,
        max_wait_s=900.0,  # a plain start spawns its engine: minutes on a busy CPU
    )
    owner = PoolOwner()
    profile = with_kv_keep(msgspec.structs.replace(demo, models=models, switching=switching), owner.root)

    async def build_bundle(name: str, model: Any, engine: Any) -> Any:
        return await build_bundle_for_profile(name, model, engine, FrontendSettings(enable_prompt_tokens_details=True))

    state = StateDir(folder / "state")
    manager: EngineManager[Any] = build_manager(
        profile, build_bundle, build_renderer=build_renderer, admission_timeout=900, probe=probe_model, state=state
    )
    # The references' servers start one after another while Turnout's engines start and the tests run.
    vllm_reference.prefetch(
        [
            ("plain", profile.models["plain"]),
            ("tools", profile.models["tools"]),
            ("plain", msgspec.structs.replace(profile.models["plain"], model=str(rewritten))),
        ]
    )
    await manager.initialize("plain")
    app = create_app(manager, ApiSettings(admin_token=TOKEN))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turnout.test", timeout=300)
    try:
        yield client, manager, profile
    finally:
        await client.aclose()
        await manager.shutdown()
        owner.remove()


async def _answer(client: httpx.AsyncClient, model: str, prompt: list[int] | str = "Hello") -> tuple[str, int]:
    """A greedy completion's text, and how many of its prompt tokens vLLM found cached."""
    answer = await client.post("/v1/completions", json=greedy_body(model, prompt))
    assert answer.status_code == 200, answer.text
    payload = answer.json()
    details = payload["usage"].get("prompt_tokens_details") or {}
    return payload["choices"][0]["text"], int(details.get("cached_tokens") or 0)


async def _verify(client: httpx.AsyncClient) -> dict[str, Any]:
    status = await client.get("/admin/status", headers=ADMIN)
    assert status.status_code == 200, status.text
    verify: dict[str, Any] = status.json()["last_switch"]["verify"]
    return verify


async def test_in_place_swaps_are_proven_against_the_recorded_fingerprints(
    served: Served, vllm_reference: VllmReference
) -> None:
    client, _, profile = served
    plain = vllm_reference.answers("plain", profile.models["plain"])
    tools = vllm_reference.answers("tools", profile.models["tools"])
    assert (await _answer(client, "plain"))[0] == plain["hello"]
    assert (await _answer(client, "plain", LONG))[0] == plain["long"]  # blocks to keep when the device leaves plain
    assert (await _answer(client, "tools"))[0] == tools["hello"]  # auto mode: the request switches
    verify = await _verify(client)
    assert (verify["outcome"], verify["path"]) == ("passed", "in_place")
    assert verify["detail"] == "first fingerprint recorded"
    assert (await _answer(client, "plain"))[0] == plain["hello"]
    verify = await _verify(client)
    assert (verify["outcome"], verify["path"]) == ("passed", "in_place") and "agree" in verify["detail"]


async def test_the_weights_drill_falls_back_to_a_plain_start_that_answers_the_waiting_request(
    served: Served, vllm_reference: VllmReference
) -> None:
    client, _, profile = served
    healthy = vllm_reference.answers("tools", profile.models["tools"])["hello"]
    FAULTS.arm("weights", "tools")
    try:
        # Both wait through the switch and its proof: none is answered by the damaged engine.
        answers = await asyncio.gather(_answer(client, "tools"), _answer(client, "tools"))
    finally:
        FAULTS.take("weights", "tools")
    assert [text for text, _ in answers] == [healthy] * 2
    verify = await _verify(client)
    assert (verify["outcome"], verify["path"]) == ("fell_back", "in_place"), verify
    metrics = (await client.get("/metrics")).text
    assert 'turnout_switch_verifications_total{model="tools",outcome="fell_back",path="in_place"} 1.0' in metrics


async def test_a_checkpoint_rewritten_with_the_same_sizes_and_times_is_a_change(
    served: Served, vllm_reference: VllmReference
) -> None:
    client, _, profile = served
    old = vllm_reference.answers("plain", profile.models["plain"])
    _negate_final_norm_keeping_stamps(Path(profile.models["plain"].model) / "model.safetensors")
    text, cached = await _answer(client, "plain", LONG)
    verify = await _verify(client)
    # The host the fallback spawned keeps no KV blocks, so plain (which does) comes back in a forked engine.
    assert (verify["outcome"], verify["path"]) == ("changed", "fork"), verify
    assert cached == 0, "a kept block of the old weights answered"
    rewritten = vllm_reference.answers("plain", profile.models["plain"])  # a fresh vLLM on the rewritten files
    assert rewritten != old, "the rewrite changed what the checkpoint answers"
    assert text == rewritten["long"]
    assert (await _answer(client, "plain"))[0] == rewritten["hello"]


def _negate_final_norm_keeping_stamps(weights: Path) -> None:
    """Rewrite ``weights`` as ``cp -p`` of a same-shape fine-tune would: other values, the same size and times."""
    from safetensors.torch import load_file, save_file

    stamp = weights.stat()
    tensors = load_file(weights)
    tensors["model.norm.weight"] = -tensors["model.norm.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (stamp.st_size, stamp.st_mtime_ns)
