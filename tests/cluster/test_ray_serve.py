"""Turnout on a local Ray Serve cluster: node replicas over fake engines behind the OpenAI ingress.

One Ray cluster for the module (loopback, no dashboard, a custom resource standing in for accelerators, Ray's HTTP
proxy off) with two applications, each behind its ingress served as ``turnout ray-serve`` serves it (uvicorn with
Turnout's connection limits, in this process: ``served_ingress.py``): ``pair`` (two capacity-1 replicas, the
``stop`` strategy, models a, b, c) and ``lru`` (one capacity-1 replica, a short queue); the engine tests add
``real`` (the demo profile's tiny vLLM models on two replicas, with only ``server.api_keys``, and a frontend default
as ``turnout ray-serve`` gives it). The ``pair`` tests run in file order on the same replicas, each stating what it
expects to find; the last one kills a replica. A "prefix" below is an application's ingress URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from server.api import ConnectionLimits, StackOptions  # noqa: E402
from server.cluster import ACCELERATOR, PROFILE_EDGE, node_application  # noqa: E402
from tests.cli.slow_clients import KeepAliveClient, SlowLoris  # noqa: E402
from tests.cluster.served_ingress import ServedIngress  # noqa: E402
from tests.fakes.cluster import ADMIN_TOKEN  # noqa: E402
from tests.fakes.secrets import secrets_put_back  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: The real application's keys (``server.api_keys`` only): one for both models, one limited to ``tools``.
KEYS = {"TURNOUT_TEST_EVERY_MODEL_KEY": "every-model-key", "TURNOUT_TEST_TOOLS_KEY": "tools-only-key"}
EVERY_MODEL = {"Authorization": "Bearer every-model-key"}
TOOLS_ONLY = {"Authorization": "Bearer tools-only-key"}
#: How long a real tiny engine's start may take on a replica (a busy CI machine).
ENGINE_START_S = 400.0
#: The ``response_role`` the real application's nodes get from the command line's frontend defaults.
NODE_ROLE = "turnout-node"
#: The fakes' engine load time: a switch costs time, as a real one does.
SWITCH_DELAY_S = 0.2
pytestmark = pytest.mark.timeout(300)


#: The ingresses' limits, as a profile's ``server.header_timeout_s`` and ``server.max_connections`` give them.
HEADER_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 16
#: The ``lru`` application's ``max_queued_requests`` (its one replica takes ``LRU_ONGOING`` at once).
LRU_QUEUE = 2
LRU_ONGOING = 8
#: How late past its timeout the ingress may close a slow client's connection on a busy shared machine.
SLACK_S = 8.0
#: Whether the connection limits time a request's body too (``server.body_timeout_s``): the ingress then cuts a
#: trickled body as ``turnout serve`` does, with the header timeout's value here.
BODY_TIMEOUT = "body_timeout_s" in {field.name for field in dataclasses.fields(ConnectionLimits)}
#: The fakes' options: bound to loopback (the ingresses), the nodes and the ingress answer loopback names only.
FAKES = {"models": ["a", "b", "c"], "strategy": "stop", "switch_delay_s": SWITCH_DELAY_S, "host": "127.0.0.1"}
FAKE_EDGE = "tests.fakes.cluster:fake_edge"


def _nodes(replicas: int, max_ongoing: int, max_queued: int = 64) -> Any:
    return node_application(
        replicas=replicas,
        builder="tests.fakes.cluster:fake_node",
        options=FAKES,
        resources={ACCELERATOR: 1},
        max_ongoing_requests=max_ongoing,
        max_queued_requests=max_queued,
    )


def _limits() -> ConnectionLimits:
    body: dict[str, Any] = {"body_timeout_s": HEADER_TIMEOUT_S} if BODY_TIMEOUT else {}
    return ConnectionLimits(header_timeout_s=HEADER_TIMEOUT_S, max_connections=MAX_CONNECTIONS, **body)


def _start_ray(env: dict[str, str], attempts: int = 2) -> None:
    """A local Ray node for the module. Ray waits a fixed 30 s for its raylet to register (``ray._private.node``),
    which a 2-core machine running engines beside it once outlasted: that start is then tried once more."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(
                address="local",
                num_cpus=2,
                include_dashboard=False,
                resources={ACCELERATOR: 5},
                runtime_env={"env_vars": env},
                log_to_driver=False,
            )
            return
        except Exception as exc:
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            ray.shutdown()


@pytest.fixture(scope="module")
def ingresses() -> Iterator[dict[str, str]]:
    """The ``pair`` and ``lru`` applications' ingress URLs."""
    # The replicas import the fakes from this checkout and read the real application's keys from the environment.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, **KEYS}
    _start_ray(env)
    served: list[ServedIngress] = []
    try:
        serve.start(proxy_location="Disabled")  # as turnout ray-serve: the ingresses below are the only way in
        serve.run(_nodes(2, 2), name="pair", route_prefix=None)
        serve.run(_nodes(1, LRU_ONGOING, LRU_QUEUE), name="lru", route_prefix=None)
        for name in ("pair", "lru"):
            served.append(ServedIngress(name, FAKES, FAKE_EDGE, _limits()).start())
        yield {"pair": served[0].url, "lru": served[1].url}
    finally:
        for ingress in served:
            ingress.stop()
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def base_url(ingresses: dict[str, str]) -> str:
    return ingresses["pair"]


@pytest.fixture(scope="module")
def lru(ingresses: dict[str, str]) -> str:
    return ingresses["lru"]


@pytest.fixture
async def client(base_url: str) -> Any:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        yield http


async def replicas(client: httpx.AsyncClient, prefix: str = "") -> list[dict[str, Any]]:
    response = await client.get(f"{prefix}/admin/status", headers=ADMIN)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["replicas"]
    return found


async def settled(client: httpx.AsyncClient, prefix: str = "") -> list[dict[str, Any]]:
    """The replicas as they report after the requests sent so far (a report is at most 0.5 s old)."""
    await asyncio.sleep(1.2)
    return await replicas(client, prefix)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    """Poll ``check`` (the view refreshes every 0.5 s) until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "the cluster did not get there in time"
        await asyncio.sleep(0.25)


async def chat(
    client: httpx.AsyncClient,
    model: str,
    prefix: str = "",
    timeout: float = 60.0,
    headers: dict[str, str] | None = None,
    **body: Any,
) -> str:
    response = await client.post(
        f"{prefix}/v1/chat/completions",
        json={"model": model, "max_tokens": 2, **body},
        timeout=timeout,
        headers=headers,
    )
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


async def test_lifespan_hooks_run_inside_the_ingress(client: httpx.AsyncClient) -> None:
    status = (await client.get("/admin/status", headers=ADMIN)).json()
    assert status["ingress"]["lifespan_started"] is True
    assert (await client.get("/admin/status")).status_code == 401  # the admin guard holds in the ingress too
    await eventually(lambda: _count(client, 2))


async def _count(client: httpx.AsyncClient, expected: int, prefix: str = "") -> bool:
    return len(await replicas(client, prefix)) == expected


async def test_two_models_settle_to_one_replica_each(client: httpx.AsyncClient) -> None:
    assert await chat(client, "a") == "a a"

    async def a_held() -> bool:
        return any(r["held"] == ["a"] for r in await replicas(client))

    await eventually(a_held)  # the router learns where a lives from the replica's report to Ray's controller
    for model in ["b", "a"] * 6:
        assert await chat(client, model) == f"{model} {model}"
    found = await settled(client)
    assert sorted(r["held"] for r in found) == [["a"], ["b"]]
    # The prediction: one load per model and replica, no eviction, on Ray's side and on Turnout's.
    assert sum(r["loads"] for r in found) == 2
    assert sum(r["evictions"] for r in found) == 0
    assert sorted(m for r in found for m in r["counters"]["engine_loads"]) == ["a", "b"]
    models = {card["id"]: card for card in (await client.get("/v1/models")).json()["data"]}
    assert models["a"]["active"] and models["b"]["active"] and not models["c"]["active"]
    assert sorted(models["a"]["replicas"].values()) == ["active", "stopped"]
    assert models["c"]["status"] == "stopped"


async def test_a_stream_flows_through_the_ingress(client: httpx.AsyncClient) -> None:
    body = {"model": "a", "stream": True, "max_tokens": 5, "step_s": 0.3}
    arrivals: list[tuple[float, str]] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line:
                arrivals.append((time.monotonic(), line))
    assert arrivals[-1][1] == "data: [DONE]"
    assert len(arrivals) == 6
    # The first event arrives while the engine still generates (5 tokens 0.3 s apart), not with the end.
    assert arrivals[-1][0] - arrivals[0][0] > 0.8


async def test_three_models_on_one_capacity_one_replica_evict_in_lru_order(client: httpx.AsyncClient, lru: str) -> None:
    await eventually(lambda: _count(client, 1, lru))
    for model in ["a", "b", "c", "a"]:
        assert await chat(client, model, lru) == f"{model} {model}"
    (only,) = await settled(client, lru)
    assert only["held"] == ["a"]
    assert (only["loads"], only["evictions"]) == (4, 3)  # Ray's side
    assert only["counters"]["engine_loads"] == ["a", "b", "c", "a"]  # Turnout's side: each eviction an unload
    assert only["counters"]["engine_unloads"] == ["a", "b", "c"]


async def test_the_ingress_refuses_a_rebinding_host_a_cross_site_post_and_a_wrong_body_before_placing(
    client: httpx.AsyncClient, lru: str
) -> None:
    # Issue 39: a chat naming b with a rebinding page's Host got 200 from b, which evicted a.
    request = {"model": "b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    refused = [
        await client.post(f"{lru}/v1/chat/completions", json=request, headers={"host": "rebind.attacker.example"}),
        await client.post(f"{lru}/v1/chat/completions", json=request, headers={"sec-fetch-site": "cross-site"}),
        await client.post(f"{lru}/v1/models/switch", json={"model": "b"}, headers={**ADMIN, "host": "evil.example"}),
    ]
    assert [answer.status_code for answer in refused] == [403, 403, 403], [answer.text for answer in refused]
    assert "attacker" not in refused[0].text
    body = httpx.Request("POST", "/", json=request).content
    plain = await client.post(f"{lru}/v1/chat/completions", content=body, headers={"content-type": "text/plain"})
    assert plain.status_code == 415 and "application/json" in plain.json()["error"]["message"]
    # A form naming a chat model: the replica refuses it before Ray's multiplexer would load b (issue 39).
    form = await client.post(f"{lru}/v1/audio/transcriptions", data={"model": "b"}, files={"file": ("a.wav", b"x")})
    assert form.status_code == 404, form.text
    assert form.json()["error"]["message"] == "The model 'b' does not support the Transcriptions API."
    (only,) = await settled(client, lru)
    assert only["held"] == ["a"] and only["counters"]["engine_loads"] == ["a", "b", "c", "a"]  # nothing moved
    assert await chat(client, "a", lru, headers={"host": "localhost"}) == "a a"


async def test_half_sent_requests_are_cut_at_the_header_timeout_and_starve_no_health_check(lru: str) -> None:
    # Before: Ray's HTTP proxy (uvicorn without a header timeout or a cap) kept every one of them open.
    served = await KeepAliveClient.connect(lru)
    loris = SlowLoris(lru, every_s=0.5)
    try:
        assert (await served.get("/health"))[0] == 200
        started = time.monotonic()
        await loris.open(3 * MAX_CONNECTIONS)  # three times the cap, each trickling a byte twice a second
        for _ in range(3):
            async with httpx.AsyncClient(base_url=lru, timeout=10) as fresh:
                assert (await fresh.get("/health")).status_code == 200  # a new connection gets in
            assert (await served.get("/health"))[0] == 200  # and a served client's connection still works
        closed = await loris.closed_by_server(HEADER_TIMEOUT_S + SLACK_S - (time.monotonic() - started))
        assert all(closed), f"{closed.count(False)} half-sent requests still open"
    finally:
        await loris.close()
        await served.close()


@pytest.mark.skipif(not BODY_TIMEOUT, reason="the connection limits have no body timeout (server.body_timeout_s)")
async def test_a_trickled_body_is_cut_at_the_body_timeout(lru: str) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", int(lru.rsplit(":", 1)[1]))
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    writer.write(f"{head}content-length: 10000\r\n\r\n{{".encode())
    started = time.monotonic()

    async def trickle() -> None:
        with contextlib.suppress(ConnectionError):
            while not writer.is_closing():
                await asyncio.sleep(HEADER_TIMEOUT_S * 2)  # a byte less often than the body timeout allows
                writer.write(b" ")
                await writer.drain()

    trickling = asyncio.create_task(trickle())
    try:
        async with asyncio.timeout(HEADER_TIMEOUT_S + SLACK_S):
            with contextlib.suppress(ConnectionError):
                while await reader.read(4096):
                    pass  # whatever the server answers, it then closes the connection
        assert time.monotonic() - started < HEADER_TIMEOUT_S + SLACK_S
    finally:
        trickling.cancel()
        writer.close()


async def test_past_max_queued_requests_the_ingress_answers_503_with_retry_after(lru: str) -> None:
    # Before: Ray's default max_queued_requests (-1) queued every request at the ingress, without bound.
    body = {"model": "a", "max_tokens": 30, "step_s": 0.5}  # 15 s each
    async with httpx.AsyncClient(base_url=lru, timeout=60) as http:

        async def post() -> httpx.Response:
            return await http.post("/v1/chat/completions", json=body)

        serving: list[asyncio.Task[httpx.Response]] = []

        async def all_in_flight() -> bool:
            (only,) = await replicas(http)
            return bool(only["manager"]["in_flight"] == len(serving))

        # One at a time: requests that arrive together all count as queued until Ray has placed them.
        for _ in range(LRU_ONGOING):
            serving.append(asyncio.create_task(post()))
            await eventually(all_in_flight, timeout=10)
        queued = [asyncio.create_task(post()) for _ in range(LRU_QUEUE)]  # the replica is at max_ongoing_requests
        await asyncio.sleep(0.5)
        refused = [await post() for _ in range(2)]  # the ingress's queue is full
        answered = await asyncio.gather(*serving, *queued)
    for answer in refused:
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["retry-after"]) >= 1
        assert answer.json()["error"]["code"] == "queue_full"
    assert [answer.status_code for answer in answered] == [200] * (LRU_ONGOING + LRU_QUEUE)


async def test_a_hot_model_spills_to_a_second_replica(client: httpx.AsyncClient) -> None:
    assert sorted(r["held"] for r in await replicas(client)) == [["a"], ["b"]]
    # Four long requests for a, two per replica at most (max_ongoing_requests): the b replica takes a too.
    answers = await asyncio.gather(*(chat(client, "a", max_tokens=12, step_s=0.3) for _ in range(4)))
    assert answers == [" ".join(["a"] * 12)] * 4
    found = await settled(client)
    assert [r["held"] for r in found] == [["a"], ["a"]]
    assert sum(r["loads"] for r in found) == 3 and sum(r["evictions"] for r in found) == 1


async def test_the_admin_switch_targets_a_replica(client: httpx.AsyncClient) -> None:
    target = (await replicas(client))[0]["replica"]
    response = await client.post("/v1/models/switch", json={"model": "c", "replica": target}, headers=ADMIN)
    assert response.status_code == 200, response.text
    assert response.json()["held"] == ["c"]
    by_id = {r["replica"]: r for r in await settled(client)}
    assert by_id[target]["active_model"] == "c"
    assert [r["held"] for rid, r in by_id.items() if rid != target] == [["a"]]
    missing = await client.post("/v1/models/switch", json={"model": "c", "replica": "nope"}, headers=ADMIN)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "replica_not_found"
    nameless = await client.post("/v1/models/switch", json={"replica": target}, headers=ADMIN)
    assert nameless.status_code == 400 and nameless.json()["error"]["param"] == "model"


async def test_a_replica_killed_mid_stream(client: httpx.AsyncClient) -> None:
    before = {r["replica"]: r for r in await replicas(client)}
    body = {"model": "a", "stream": True, "max_tokens": 40, "step_s": 0.25}
    lines: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        stream = response.aiter_lines()
        lines.append(await anext(stream))

        async def serving() -> bool:
            return any(r["manager"]["in_flight"] for r in await replicas(client))

        await eventually(serving, timeout=5)
        (victim,) = [r for r in await replicas(client) if r["manager"]["in_flight"]]
        os.kill(victim["pid"], signal.SIGKILL)
        lines += [line async for line in stream if line]
    assert lines[0].startswith("data: ") and '"delta"' in lines[0]
    assert '"replica_lost"' in lines[-2] and lines[-1] == "data: [DONE]"  # a retryable error event, not silence
    assert len([line for line in lines if '"delta"' in line]) < 40
    survivor = next(rid for rid in before if rid != victim["replica"])

    async def restarted() -> bool:
        ids = {r["replica"] for r in await replicas(client)}
        return len(ids) == 2 and victim["replica"] not in ids

    await eventually(restarted, timeout=120)
    for model in ["a", "b", "a"]:
        assert await chat(client, model) == f"{model} {model}"
    # The survivor never noticed: same process, its history intact.
    kept = {r["replica"]: r for r in await settled(client)}[survivor]
    assert kept["pid"] == before[survivor]["pid"]
    assert kept["loads"] >= before[survivor]["loads"] and kept["evictions"] >= before[survivor]["evictions"]


@pytest.fixture(scope="module")
def real_prefix(base_url: str, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The README's demo profile (its tiny models where this machine keeps them) on two replicas, with an alias
    for ``tools`` and only scoped keys (``server.api_keys``): no request is served without one."""
    text = (ROOT / "profiles" / "demo.yaml").read_text(encoding="utf-8")
    for name, folder in tiny_models.items():
        text = text.replace(f"../.cache/tiny-models/{name}", str(folder))
    text = text.replace("../templates/", f"{ROOT / 'templates'}/")  # the copy lives elsewhere
    # Ray places the models here (one per replica); a preload would start both engines on both replicas.
    assert "preload: true" in text
    text = text.replace("preload: true", "preload: false")
    assert text.count("    enable_auto_tool_choice: true\n") == 1  # tools's, which gets an alias
    text = text.replace(
        "    enable_auto_tool_choice: true\n",
        "    enable_auto_tool_choice: true\n    served_model_name: [tools, helper]\n",
    )
    keys = [("TURNOUT_TEST_EVERY_MODEL_KEY", "[tools, plain]"), ("TURNOUT_TEST_TOOLS_KEY", "[helper]")]
    text += "server:\n  api_keys:\n" + "".join(f"    - {{key_env: {e}, models: {m}}}\n" for e, m in keys)
    profile = tmp_path_factory.mktemp("real-cluster") / "demo.yaml"
    profile.write_text(text, encoding="utf-8")
    # A frontend default from the command line (`turnout ray-serve` hands its StackOptions to every node alike).
    stack = StackOptions(frontend_defaults={"response_role": NODE_ROLE})
    options = {"profile": str(profile), "dev": True, "stack": stack}
    serve.run(node_application(replicas=2, options=options, resources={ACCELERATOR: 1}), name="real", route_prefix=None)
    # The ingress reads the keys here as the replicas do from theirs (``turnout ray-serve``'s driver has them).
    with pytest.MonkeyPatch.context() as environment, secrets_put_back():
        for name, value in KEYS.items():
            environment.setenv(name, value)
        ingress = ServedIngress("real", options, PROFILE_EDGE, _limits())
    ingress.start()
    try:
        yield ingress.url
    finally:
        ingress.stop()
        serve.delete("real")


def _engines(found: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each held model's engine-core pids, by model (a reload or eviction changes them)."""
    return {
        slot["name"]: slot["pids"]
        for report in found
        for slot in report["manager"]["slots"]
        if slot["name"] in report["held"]
    }


@pytest.mark.engine
@pytest.mark.timeout(900)
async def test_real_tiny_engines_on_two_replicas(client: httpx.AsyncClient, real_prefix: str) -> None:
    # Each model's first request starts its engine on a replica: minutes on a busy 2-core machine.
    hi = [{"role": "user", "content": "Hi"}]
    tools = await chat(client, "tools", real_prefix, ENGINE_START_S, EVERY_MODEL, messages=hi, max_tokens=8)
    plain = await chat(client, "plain", real_prefix, ENGINE_START_S, EVERY_MODEL, messages=hi, max_tokens=8)
    assert (tools, plain) == ("Hello from tiny-tools.", "Hello from tiny-plain.")
    found = await settled(client, real_prefix)
    assert sorted(r["held"] for r in found) == [["plain"], ["tools"]]  # one engine each, no swap
    models = {
        card["id"]: card for card in (await client.get(f"{real_prefix}/v1/models", headers=EVERY_MODEL)).json()["data"]
    }
    assert models["tools"]["active"] and models["plain"]["active"]


@pytest.mark.engine
@pytest.mark.timeout(900)
async def test_the_ingress_gates_before_it_places(client: httpx.AsyncClient, real_prefix: str) -> None:
    hi = [{"role": "user", "content": "Hi"}]
    # Both engines run (the test above started them; alone, this starts them).
    for model in ("tools", "plain"):
        await chat(client, model, real_prefix, ENGINE_START_S, EVERY_MODEL, messages=hi, max_tokens=8)
    before = await settled(client, real_prefix)
    engines = _engines(before)
    assert sorted(engines) == ["plain", "tools"] and all(engines.values())

    chat_url = f"{real_prefix}/v1/chat/completions"
    # No key: refused at the ingress, whatever the body names (another model, none, no model at all).
    for body in ({"model": "plain", "messages": hi}, {"messages": hi}, {"model": "nope"}):
        refused = await client.post(chat_url, json=body)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["message"].startswith("Missing or invalid API key")
    assert (await client.post(f"{real_prefix}/v1/nope", json={"model": "plain"})).status_code == 404
    assert (await client.get(f"{real_prefix}/v1/models")).status_code == 401
    # A key limited to tools: plain does not exist for it, and /v1/models lists only tools and its alias.
    hidden = await client.post(chat_url, json={"model": "plain", "messages": hi}, headers=TOOLS_ONLY)
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "model_not_found"
    assert "plain" not in hidden.json()["error"]["message"].replace("'plain'", "")
    listed = (await client.get(f"{real_prefix}/v1/models", headers=TOOLS_ONLY)).json()["data"]
    assert sorted(card["id"] for card in listed) == ["helper", "tools"]
    # The alias routes to tools, on the replica that holds it, and answers under the name it was asked by.
    aliased = await client.post(
        chat_url, json={"model": "helper", "messages": hi, "max_tokens": 8}, headers=TOOLS_ONLY, timeout=60
    )
    assert aliased.status_code == 200, aliased.text
    assert aliased.json()["model"] == "helper"
    assert aliased.json()["choices"][0]["message"]["content"] == "Hello from tiny-tools."

    # Nothing moved: the same models held, no load or eviction, the same engine processes.
    after = await settled(client, real_prefix)
    assert [(r["held"], r["loads"], r["evictions"]) for r in after] == [
        (r["held"], r["loads"], r["evictions"]) for r in before
    ]
    assert _engines(after) == engines


@pytest.mark.engine
@pytest.mark.timeout(900)
async def test_the_command_lines_frontend_defaults_reach_every_replica(
    client: httpx.AsyncClient, real_prefix: str
) -> None:
    # Before (issue 42): a node built its bundles with a bare FrontendSettings(), whatever the command line said.
    hi = [{"role": "user", "content": "Hi"}]
    for model in ("tools", "plain"):  # on two replicas (test_real_tiny_engines_on_two_replicas)
        response = await client.post(
            f"{real_prefix}/v1/chat/completions",
            json={"model": model, "messages": hi, "max_tokens": 2},
            headers=EVERY_MODEL,
            timeout=ENGINE_START_S,
        )
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["role"] == NODE_ROLE


async def test_a_replica_refuses_a_reload_and_says_to_redeploy(client: httpx.AsyncClient) -> None:
    # A reload would change one replica of many: the node answers 501 in the API's shape, nothing else moves.
    response = await client.post("/admin/reload", json={}, headers=ADMIN)
    assert response.status_code == 501, response.text
    error = response.json()["error"]
    assert error["code"] == "reload_unavailable"
    assert "redeploy" in error["message"]
