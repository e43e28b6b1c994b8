"""The Ray ingress's gate, without Ray: what it places a request by, and what it refuses before placing it.

The probe app answers with the placement the ingress would hand Ray's multiplexer; a refused request never gets
one (``placed`` stays empty), which is what keeps an unauthenticated body from loading or evicting a model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from litestar import Litestar, Request, route

from server.api import ApiSettings, RequestOutOfBounds
from server.api.admission import request_admission as node_admission
from server.api.edge.checks import default_allowed_hosts
from server.api.edge.model_names import resolve_model_name
from server.api.errors import EXCEPTION_HANDLERS
from server.api.settings import ScopedKey
from server.cluster import gate as ingress_gate
from server.cluster.gate import IngressGate
from server.cluster.parts import EdgeParts
from server.engine import ModelNotFound
from server.profiles.schema import ModelProfile

ALPHA_KEY, FULL_KEY, ADMIN = "alpha-only-key", "every-model-key", "admin-token"
MODELS = {
    "alpha": ModelProfile(model="/m/alpha", served_model_name=["alpha", "a-alias"], lora_modules={"a-pirate": "/a"}),
    "beta": ModelProfile(model="/m/beta"),
}


def _edge(**settings: Any) -> EdgeParts:
    keys = (ScopedKey(key=ALPHA_KEY, models=frozenset({"alpha"})),)
    return EdgeParts(
        settings=ApiSettings(admin_token=ADMIN, scoped_keys=keys, **settings), models=MODELS, default_model="alpha"
    )


@pytest.fixture
async def probe() -> AsyncIterator[tuple[httpx.AsyncClient, list[str]]]:
    gate = IngressGate(_edge(api_key=FULL_KEY))
    placed: list[str] = []

    @route("/{path:path}", http_method=["GET", "POST"])
    async def forward(request: Request[Any, Any, Any]) -> dict[str, Any]:
        placement = await gate.admit(request, request.scope["path"])
        placed.append(placement.model)
        return {"model": placement.model, "body": len(placement.body)}

    app = Litestar(route_handlers=[forward], exception_handlers=EXCEPTION_HANDLERS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ingress") as client:
        yield client, placed


def _key(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_no_key_is_refused_before_any_placement(probe: tuple[httpx.AsyncClient, list[str]]) -> None:
    client, placed = probe
    for body in ({"model": "beta"}, {"model": "nope"}, {}):
        refused = await client.post("/v1/chat/completions", json=body)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["message"].startswith("Missing or invalid API key")
        assert refused.headers["www-authenticate"] == "Bearer"
    wrong = await client.post("/v1/chat/completions", json={"model": "alpha"}, headers=_key("guess"))
    assert wrong.status_code == 401
    assert (await client.post("/admin/reload", json={}, headers=_key(ALPHA_KEY))).status_code == 401
    assert placed == []


async def test_a_scoped_key_naming_a_hidden_or_unknown_model_gets_404_naming_only_its_own(
    probe: tuple[httpx.AsyncClient, list[str]],
) -> None:
    client, placed = probe
    hidden = await client.post("/v1/chat/completions", json={"model": "beta"}, headers=_key(ALPHA_KEY))
    unknown = await client.post("/v1/chat/completions", json={"model": "nope"}, headers=_key(ALPHA_KEY))
    for answer in (hidden, unknown):
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "model_not_found"
        assert answer.json()["error"]["message"].endswith("Configured models: alpha.")  # only the key's own
    # A hidden model is answered exactly as a name no model has.
    assert hidden.json()["error"]["message"].replace("beta", "nope") == unknown.json()["error"]["message"]
    full = await client.post("/v1/chat/completions", json={"model": "nope"}, headers=_key(FULL_KEY))
    assert full.status_code == 404 and full.json()["error"]["code"] == "model_not_found"
    assert placed == []


async def test_names_are_resolved_to_their_model_before_placement(probe: tuple[httpx.AsyncClient, list[str]]) -> None:
    client, placed = probe
    for name in ("alpha", "a-alias", "a-pirate", None):
        body = {"messages": []} if name is None else {"model": name}
        answer = await client.post("/v1/chat/completions", json=body, headers=_key(ALPHA_KEY))
        assert answer.json()["model"] == "alpha", (name, answer.text)
    beta = await client.post("/v1/completions", json={"model": "beta"}, headers=_key(FULL_KEY))
    assert beta.json()["model"] == "beta"
    form = await client.post(
        "/v1/audio/transcriptions", data={"model": "a-alias"}, files={"file": ("a", b"x")}, headers=_key(ALPHA_KEY)
    )
    assert form.json()["model"] == "alpha"
    assert placed == ["alpha"] * 4 + ["beta", "alpha"]


async def test_routes_without_a_model_are_placed_on_none(probe: tuple[httpx.AsyncClient, list[str]]) -> None:
    client, placed = probe
    # The node answers these without loading anything: an admin route, a malformed body, a path it lacks.
    admin = await client.post("/admin/reload", json={"model": "beta"}, headers=_key(ADMIN))
    json_type = {"content-type": "application/json"}
    malformed = await client.post("/v1/chat/completions", content=b"{", headers={**_key(ALPHA_KEY), **json_type})
    typed = await client.post("/v1/chat/completions", json={"model": 3}, headers=_key(ALPHA_KEY))
    missing = await client.post("/v1/nope", content=b"x" * 1000, headers=_key(ALPHA_KEY))
    assert [a.json()["model"] for a in (admin, malformed, typed, missing)] == ["", "", "", ""]
    assert missing.json()["body"] == 0  # a path the node lacks: its body is not even read
    assert placed == ["", "", "", ""]


async def test_a_key_scoped_away_from_the_default_model_must_name_one() -> None:
    keys = (ScopedKey(key="beta-key", models=frozenset({"beta"})),)
    gate = IngressGate(EdgeParts(settings=ApiSettings(scoped_keys=keys), models=MODELS, default_model="alpha"))

    @route("/{path:path}", http_method=["POST"])
    async def forward(request: Request[Any, Any, Any]) -> dict[str, Any]:
        return {"model": (await gate.admit(request, request.scope["path"])).model}

    app = Litestar(route_handlers=[forward], exception_handlers=EXCEPTION_HANDLERS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ingress") as client:
        nameless = await client.post("/v1/chat/completions", json={}, headers=_key("beta-key"))
        assert nameless.status_code == 404 and "alpha" not in nameless.json()["error"]["message"]
        named = await client.post("/v1/chat/completions", json={"model": "beta"}, headers=_key("beta-key"))
        assert named.json() == {"model": "beta"}


async def test_a_body_past_the_route_limit_is_refused_before_it_is_read() -> None:
    gate = IngressGate(_edge(api_key=FULL_KEY))
    reads: list[int] = []

    @route("/{path:path}", http_method=["POST"])
    async def forward(request: Request[Any, Any, Any]) -> dict[str, Any]:
        return {"model": (await gate.admit(request, request.scope["path"])).model}

    app = Litestar(route_handlers=[forward], exception_handlers=EXCEPTION_HANDLERS)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        reads.append(1)
        return {"type": "http.request", "body": b"{}", "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [
        (b"authorization", f"Bearer {FULL_KEY}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", b"10000001"),  # a JSON route's limit is Litestar's 10 MB, as on the node
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    await app(scope, receive, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 413
    assert reads == []
    # Without a key, the same body is refused as unauthenticated, before its size is even looked at.
    sent.clear()
    await app({**scope, "headers": headers[1:], "state": {}}, receive, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 401 and reads == []


def test_the_node_and_the_ingress_resolve_names_with_one_resolver() -> None:
    assert node_admission.resolve_model_name is resolve_model_name
    assert ingress_gate.resolve_model_name is resolve_model_name


def test_a_refusal_at_the_ingress_speaks_its_routes_api() -> None:
    pytest.importorskip("ray")
    from litestar.exceptions import NotAuthorizedException

    from server.cluster.ingress import _refusal

    scope: Any = {"type": "http", "method": "POST", "path": "/v1/messages", "headers": [], "state": {}}
    request: Request[Any, Any, Any] = Request(scope)
    anthropic = _refusal(request, "/v1/messages", NotAuthorizedException("Missing or invalid API key."))
    assert anthropic.status_code == 401 and anthropic.headers["WWW-Authenticate"] == "Bearer"
    assert anthropic.content == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Missing or invalid API key."},
    }
    openai = _refusal(request, "/v1/chat/completions", ModelNotFound("beta", ["alpha"]))
    assert openai.status_code == 404 and openai.content["error"]["code"] == "model_not_found"
    # A bound's refusal keeps its own shape at the ingress too: the parameter named, OpenAI's code.
    bounds = _refusal(
        request, "/v1/completions", RequestOutOfBounds("too many", param="n", code="integer_above_max_value")
    )
    assert bounds.status_code == 400
    assert (bounds.content["error"]["param"], bounds.content["error"]["code"]) == ("n", "integer_above_max_value")


async def test_a_request_past_its_models_bounds_is_refused_before_placement(
    probe: tuple[httpx.AsyncClient, list[str]],
) -> None:
    client, placed = probe
    # beta has the defaults: n up to 128 and 2048 prompts in a batch; the check is the node's own.
    for body, param in (
        ({"model": "beta", "messages": [], "n": 100000}, "n"),
        ({"model": "beta", "prompt": "x", "best_of": 129}, "best_of"),
        ({"model": "beta", "input": ["x"] * 2049}, "input"),
    ):
        refused = await client.post("/v1/completions", json=body, headers=_key(FULL_KEY))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == param
    assert placed == []
    assert ingress_gate.check_request_bounds is node_admission.check_request_bounds
    within = await client.post("/v1/completions", json={"model": "beta", "n": 128}, headers=_key(FULL_KEY))
    assert within.json()["model"] == "beta"


async def test_the_edge_checks_refuse_before_placing() -> None:
    # A loopback-bound cluster's edge (the ingress's bind address gives the default, as on one node).
    gate = IngressGate(_edge(api_key=FULL_KEY, allowed_hosts=default_allowed_hosts("127.0.0.1", None)))
    placed: list[str] = []

    @route("/{path:path}", http_method=["GET", "POST"])
    async def forward(request: Request[Any, Any, Any]) -> dict[str, Any]:
        placed.append((await gate.admit(request, request.scope["path"])).model)
        return {}

    app = Litestar(route_handlers=[forward], exception_handlers=EXCEPTION_HANDLERS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client:
        chat = {"model": "beta", "messages": []}
        rebound = await client.post(
            "/v1/chat/completions", json=chat, headers={**_key(FULL_KEY), "host": "rebind.attacker.example"}
        )
        assert rebound.status_code == 403 and "attacker" not in rebound.text
        lost = await client.get("/v1/nope", headers={"host": "rebind.attacker.example"})  # a path the node lacks
        assert lost.status_code == 403
        cross_site = await client.post(
            "/v1/chat/completions", json=chat, headers={**_key(FULL_KEY), "sec-fetch-site": "cross-site"}
        )
        assert cross_site.status_code == 403
        bodyless = await client.post("/admin/reload", headers={**_key(ADMIN), "origin": "https://evil.example"})
        assert bodyless.status_code == 403
        body = httpx.Request("POST", "/", json=chat).content
        plain = await client.post(
            "/v1/chat/completions", content=body, headers={**_key(FULL_KEY), "content-type": "text/plain"}
        )
        assert plain.status_code == 415 and "application/json" in plain.json()["error"]["message"]
        form = await client.post(
            "/v1/audio/transcriptions", json={"model": "beta"}, headers=_key(FULL_KEY)
        )  # a form route's body must be its form
        assert form.status_code == 415 and "multipart/form-data" in form.text
        assert placed == []
        served = await client.post("/v1/chat/completions", json=chat, headers=_key(FULL_KEY))
        assert served.status_code == 201 and placed == ["beta"]
