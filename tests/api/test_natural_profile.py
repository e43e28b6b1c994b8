"""A profile as a user first writes it (two models, only ``model`` and ``max_model_len``) starts and serves.

Without Turnout's KV budget, vLLM on CPU would claim 92% of the NUMA node for the first engine and the second
one would fail to start. Real ``turnout serve``, real tiny engines (both resident: ``auto`` is keep on CPU).

The suite adds ``enforce_eager`` to the two models (a minute less on a 2-core machine); the profile exactly as
written, compiled with torch.compile, runs with ``TURNOUT_NATURAL_PROFILE=compiled``, which
``benchmarks/natural_profile.py`` (``just bench``) sets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.natural_profile import MODE_ENV
from tests.api.live_server import LiveServer, start_server, wait_ready

pytestmark = pytest.mark.engine

TOKEN = "natural-admin-token"
#: The quick case the suite runs (no compilation); with ``compiled`` the models have nothing but the two keys.
EAGER = "" if os.environ.get(MODE_ENV) == "compiled" else "    enforce_eager: true\n"
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("natural")
    profile = folder / "natural.yaml"
    profile.write_text(
        f"models:\n"
        f"  tools:\n    model: {tiny_models['tiny-tools']}\n    max_model_len: 1024\n{EAGER}"
        f"  plain:\n    model: {tiny_models['tiny-plain']}\n    max_model_len: 512\n{EAGER}"
    )
    live = start_server(profile, folder / "serve.log", {"TURNOUT_ADMIN_TOKEN": TOKEN})
    try:
        wait_ready(live, timeout=900)  # compiled (TURNOUT_NATURAL_PROFILE=compiled): a slow first start
        yield live
    finally:
        live.stop()


def _chat(server: LiveServer, model: str) -> str:
    body = {"model": model, "messages": HELLO, "temperature": 0, "max_tokens": 12}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    content: str = answer.json()["choices"][0]["message"]["content"]
    return content


def test_both_models_serve_with_budgeted_kv_caches(server: LiveServer) -> None:
    assert _chat(server, "tools") == "Hello from tiny-tools."
    switched = httpx.post(
        f"{server.url}/v1/models/switch",
        json={"model": "plain"},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=900,
    )
    assert switched.status_code == 200, switched.text
    assert _chat(server, "plain") == "Hello from tiny-plain."

    status = httpx.get(f"{server.url}/admin/status", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    memory = status.json()["memory"]
    assert memory["resident_together"] == 2 and memory["memory"]["where"].startswith("NUMA node")
    # auto on CPU is keep: residency by memory budget, by default the pool (available less the reserve).
    assert memory["budget_bytes"] == memory["memory"]["available_bytes"] - memory["reserve_bytes"]
    decisions = {item["model"]: item for item in memory["decisions"]}
    # bfloat16 (auto on CPU), 2 layers x 1 KV head x 64: 512 bytes a token, 128 sequences at most.
    assert decisions["tools"]["kv_cache_bytes"] == 1024 * 128 * 512
    assert decisions["plain"]["kv_cache_bytes"] == 512 * 128 * 512
    assert all(item["source"] == "budget" and item["capped_at_need"] for item in decisions.values())
    # Both engines stayed resident, and the decision was printed at start-up, once.
    assert {slot["name"]: slot["state"] for slot in status.json()["slots"]} == {"tools": "resident", "plain": "active"}
    log = server.log()
    # Once, in one block: the budget, each model's footprint and KV cache (how it was sized), what fits together.
    assert log.count("plan: cpu, strategy keep; ") == 1 and "; reserve " in log and "; memory budget " in log
    assert "  resident together (largest sets that fit):" in log
    assert " + KV cache 64.0 MiB (budgeted, capped at max_model_len x max_num_seqs; " in log
    # MemoryPlan.summary()'s block in MiB, which said the same again, is gone.
    assert not any(line.startswith("memory: ") for line in log.splitlines()) and "resident by memory budget" not in log
