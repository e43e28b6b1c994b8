"""Trust at the edges of a live ``turnout serve`` (real uvicorn, real tiny vLLM engines, ``stop`` strategy).

One server, manual mode, with a key for every model, a key limited to ``tools`` and one more limited key that a
reload revokes. It checks what a browser, a limited key and an admin can and cannot get: 415 for a cross-site
body, 403 for a rebinding Host, ``/metrics`` for the admin only, a reload that will not read a file outside the
profile's folder, a revoked key shut out at once while its stream finishes, a prefix cache that no key shares with
another key's cache group, and a stop switch that never answers the limited key with the model it may not use, nor
names it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.live_server import LiveServer, demo_copy, start_server, wait_ready

pytestmark = pytest.mark.engine

TOKEN = "trust-admin-token"
FULL = "trust-key-for-everything"
TOOLS_ONLY = "trust-key-for-tools"
REVOKED = "trust-key-to-revoke"
TEAMMATE = "trust-key-of-the-tools-team"
TEAMMATE_ITEM = "    - key_env: TRUST_TEAMMATE_KEY\n      models: [tools]\n      cache_group: tools-team\n"
REVOKED_ITEM = "    - key_env: TRUST_REVOKED_KEY\n      models: [tools]\n"
KEYS = f"""
server:
  api_keys:
    - key_env: TRUST_TOOLS_KEY
      models: [tools]
      cache_group: tools-team
{REVOKED_ITEM}"""
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def profile(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    def stop_with_keys(text: str) -> str:
        # Cached prompt tokens reported in usage: the prefix cache tests read them.
        details = "    tool_call_parser: hermes\n    enable_prompt_tokens_details: true\n"
        text = text.replace("    tool_call_parser: hermes\n", details)
        return text.replace("strategy: keep", "strategy: stop").replace("  max_active: 2\n", "") + KEYS

    return demo_copy(tiny_models, tmp_path_factory.mktemp("trust"), stop_with_keys)


@pytest.fixture(scope="module")
def server(profile: Path) -> Iterator[LiveServer]:
    env = {
        "TURNOUT_ADMIN_TOKEN": TOKEN,
        "TURNOUT_API_KEY": FULL,
        "TRUST_TOOLS_KEY": TOOLS_ONLY,
        "TRUST_REVOKED_KEY": REVOKED,
        "TRUST_TEAMMATE_KEY": TEAMMATE,
        "VLLM_ENABLE_RESPONSES_API_STORE": "1",  # as vllm serve turns it on: the stored responses test reads it
    }
    live = start_server(profile, profile.parent / "serve.log", env)
    try:
        wait_ready(live, timeout=600)  # an engine start takes minutes on a busy shared machine
        yield live
    finally:
        live.stop()


def test_a_cross_site_body_is_415_and_a_rebinding_host_403(server: LiveServer) -> None:
    chat = httpx.Request("POST", "/", json={**CHAT, "model": "tools"}).content
    plain_text = httpx.post(
        f"{server.url}/v1/chat/completions",
        content=chat,
        headers={**bearer(FULL), "content-type": "text/plain"},
        timeout=60,
    )
    assert plain_text.status_code == 415 and plain_text.json()["error"]["message"], plain_text.text
    foreign = httpx.get(f"{server.url}/v1/models", headers={**bearer(FULL), "host": "rebound.example"}, timeout=30)
    assert foreign.status_code == 403 and "tools" not in foreign.text
    own = httpx.get(f"{server.url}/v1/models", headers={**bearer(FULL), "host": "localhost"}, timeout=30)
    assert own.status_code == 200
    # Without a key, the ops routes name no model; /metrics, which names them all, needs the admin (or metrics)
    # token, a serving key being neither.
    for path in ("/health", "/ready", "/status"):
        anonymous = httpx.get(f"{server.url}{path}", timeout=30)
        assert anonymous.status_code == 200 and "tools" not in anonymous.text and "plain" not in anonymous.text
    for headers in ({}, bearer(TOOLS_ONLY), bearer(FULL)):
        metrics = httpx.get(f"{server.url}/metrics", headers=headers, timeout=30)
        assert metrics.status_code == 401 and metrics.json()["error"]["type"] == "AuthenticationError"
        assert "plain" not in metrics.text
    scraped = httpx.get(f"{server.url}/metrics", headers=bearer(TOKEN), timeout=30)
    assert scraped.status_code == 200 and 'model="plain"' in scraped.text


def test_a_reload_of_a_file_outside_the_profiles_folder_is_refused_and_quotes_nothing(
    server: LiveServer, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:TRUST-SECRET-LINE\n")
    for path in (str(secret), "/etc/passwd"):
        refused = httpx.post(f"{server.url}/admin/reload", json={"path": path}, headers=bearer(TOKEN), timeout=60)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "reload_path_refused"
        assert "TRUST-SECRET" not in refused.text and "root:" not in refused.text


def test_a_key_revoked_by_reload_gets_401_next_while_its_stream_finishes(server: LiveServer, profile: Path) -> None:
    body = {**CHAT, "model": "tools", "max_tokens": 600, "ignore_eos": True, "stream": True}
    with httpx.stream(
        "POST", f"{server.url}/v1/chat/completions", json=body, headers=bearer(REVOKED), timeout=120
    ) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert '"model":"tools"' in first
        profile.write_text(profile.read_text().replace(REVOKED_ITEM, ""))
        reload = httpx.post(f"{server.url}/admin/reload", json={}, headers=bearer(TOKEN), timeout=120)
        assert reload.status_code == 200 and reload.json()["keys_changed"] is True, reload.text
        revoked = httpx.post(
            f"{server.url}/v1/chat/completions", json={**CHAT, "model": "tools"}, headers=bearer(REVOKED), timeout=60
        )
        assert revoked.status_code == 401
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]" and '"finish_reason":"length"' in rest[-2], rest[-3:]
    kept = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=bearer(TOOLS_ONLY), timeout=60)
    assert kept.status_code == 200 and kept.json()["model"] == "tools"


def test_cached_prefixes_serve_only_their_keys_cache_group_across_a_reload(server: LiveServer, profile: Path) -> None:
    # About 570 prompt tokens: four full KV blocks of 128 on CPU.
    prompt = " ".join(f"Team secret line {i}: the launch code is {i * 7919 % 10007}." for i in range(20))
    body = {"model": "tools", "messages": [{"role": "user", "content": prompt}], "max_tokens": 1, "temperature": 0}

    def cached_tokens(key: str) -> int:
        answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=bearer(key), timeout=120)
        assert answer.status_code == 200, answer.text
        details = answer.json()["usage"].get("prompt_tokens_details") or {}
        return int(details.get("cached_tokens") or 0)

    assert cached_tokens(TOOLS_ONLY) == 0
    # A second key of the tools team's cache group joins by a reload, which keeps every group's salt.
    profile.write_text(profile.read_text() + TEAMMATE_ITEM)
    reload = httpx.post(f"{server.url}/admin/reload", json={}, headers=bearer(TOKEN), timeout=120)
    assert reload.status_code == 200 and reload.json()["keys_changed"] is True, reload.text
    assert cached_tokens(TOOLS_ONLY) > 0  # the prefix cache works, and the key's salt outlived the reload
    assert cached_tokens(FULL) == 0  # another key's team learns nothing of the prompt
    assert cached_tokens(TEAMMATE) > 0  # a key of the same cache group shares the cache


def test_another_keys_stored_response_reads_as_an_unknown_id(server: LiveServer) -> None:
    """Two keys that may both use tools share its engine's response store: neither reads, continues or cancels the
    other's responses, which answer exactly as ids never made."""
    body = {"model": "tools", "input": "hi", "max_output_tokens": 2, "temperature": 0}
    created = httpx.post(f"{server.url}/v1/responses", json=body, headers=bearer(FULL), timeout=120)
    assert created.status_code == 200, created.text
    response_id, unknown_id = created.json()["id"], "resp_00000000000000000000000000000000"
    own = httpx.get(f"{server.url}/v1/responses/{response_id}", headers=bearer(FULL), timeout=60)
    assert own.status_code == 200 and own.json()["id"] == response_id, own.text

    def as_tools_key(some_id: str) -> list[tuple[int, str]]:
        """The tools-only key's retrieve, cancel and continuation of ``some_id``, the id written as the unknown one."""
        answers = [
            httpx.get(f"{server.url}/v1/responses/{some_id}", headers=bearer(TOOLS_ONLY), timeout=60),
            httpx.post(f"{server.url}/v1/responses/{some_id}/cancel", headers=bearer(TOOLS_ONLY), timeout=60),
            httpx.post(
                f"{server.url}/v1/responses",
                json={**body, "previous_response_id": some_id},
                headers=bearer(TOOLS_ONLY),
                timeout=120,
            ),
        ]
        return [(answer.status_code, answer.text.replace(some_id, unknown_id)) for answer in answers]

    unknown = as_tools_key(unknown_id)
    assert [status for status, _ in unknown] == [404] * 3, unknown
    assert as_tools_key(response_id) == unknown  # the other key's id reads exactly as an unknown one


def test_during_a_stop_switch_the_limited_key_naming_no_model_never_gets_the_other(server: LiveServer) -> None:
    answers: list[httpx.Response] = []
    switched: list[httpx.Response] = []

    def switch() -> None:
        body = {"model": "plain", "drain_timeout": 5}
        switched.append(httpx.post(f"{server.url}/v1/models/switch", json=body, headers=bearer(TOKEN), timeout=600))

    switcher = threading.Thread(target=switch)
    switcher.start()
    try:
        deadline = time.monotonic() + 600
        while switcher.is_alive() and time.monotonic() < deadline:
            for stream in (False, True):
                body = {**CHAT, "stream": stream}
                answers.append(
                    httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=bearer(TOOLS_ONLY), timeout=600)
                )
            time.sleep(0.3)
    finally:
        switcher.join(timeout=600)
    assert switched and switched[0].status_code == 200, switched and switched[0].text
    answers.append(httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=bearer(TOOLS_ONLY), timeout=60))
    answers.append(httpx.get(f"{server.url}/health", headers=bearer(TOOLS_ONLY), timeout=30))
    # Requests were sent while the switch ran (it takes an engine start), and after it.
    assert len(answers) >= 4
    for answer in answers:
        assert "plain" not in answer.text, answer.text
    served = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=bearer(FULL), timeout=60)
    assert served.status_code == 200 and served.json()["model"] == "plain"
