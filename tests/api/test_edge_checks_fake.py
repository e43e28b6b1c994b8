"""Cross-site and DNS-rebinding defence (``server/api/edge/checks.py``), and a form's model checked before admission
(``request_admission.py``), through the app on fake engines."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

from server.api import ServingFlags, api_settings
from server.api.edge.checks import LOOPBACK_HOSTS, default_allowed_hosts, host_allowed, machine_hosts
from server.profiles.schema import ModelProfile, Profile, Switching
from tests.api.conftest import MakeClient, admin
from tests.fakes.engines import FakeLoader

CHAT = {"model": "tools", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
async def test_a_json_route_refuses_a_simple_cross_site_body_with_415(
    make_client: MakeClient, content_type: str
) -> None:
    client, _ = await make_client()
    body = httpx.Request("POST", "/", json=CHAT).content
    for path, headers in (("/v1/chat/completions", {}), ("/v1/messages", {}), ("/v1/models/switch", admin())):
        response = await client.post(path, content=body, headers={**headers, "content-type": content_type})
        assert response.status_code == 415, (path, response.text)
        assert "application/json" in response.text and "Traceback" not in response.text
    response = await client.post("/v1/chat/completions", content=body, headers={"content-type": content_type})
    assert "error" in response.json()


async def test_json_and_json_suffix_types_are_served(make_client: MakeClient) -> None:
    client, _ = await make_client()
    body = httpx.Request("POST", "/", json=CHAT).content
    for content_type in ("application/json", "application/json; charset=utf-8", "application/vnd.api+json"):
        response = await client.post("/v1/chat/completions", content=body, headers={"content-type": content_type})
        assert response.status_code == 200, (content_type, response.text)


async def test_a_form_route_takes_only_multipart(make_client: MakeClient) -> None:
    client, _ = await make_client()
    body = httpx.Request("POST", "/", json={"model": "tools"}).content
    response = await client.post("/v1/audio/transcriptions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 415 and "multipart/form-data" in response.text


async def test_a_foreign_host_is_403_on_a_loopback_server(make_client: MakeClient) -> None:
    client, _ = await make_client(allowed_hosts=default_allowed_hosts("127.0.0.1", None))
    for host in ("localhost:8000", "127.0.0.1:8000", "127.3.4.5", "[::1]:8000", "api.localhost"):
        response = await client.get("/v1/models", headers={"host": host})
        assert response.status_code == 200, (host, response.text)
    for host in ("evil.example:8000", "localhost.evil.example", "10.0.0.1", ""):
        response = await client.get("/v1/models", headers={"host": host})
        assert response.status_code == 403, (host, response.text)
        assert response.json()["error"]["message"] and "evil" not in response.text
    response = await client.post("/v1/chat/completions", json=CHAT, headers={"host": "evil.example"})
    assert response.status_code == 403


async def test_a_server_bound_to_every_interface_answers_only_this_machines_names(make_client: MakeClient) -> None:
    # Bound to 0.0.0.0 without server.allowed_hosts, any Host was answered: a DNS rebinding page could read the
    # answers. The settings as turnout serve assembles them (no socket is bound here).
    profile = Profile(path="/p/profile.yaml", default_model="tools", models={"tools": ModelProfile(model="/m/tools")})
    settings = api_settings(profile, ServingFlags(host="0.0.0.0", machine_names=True), {})
    assert settings.allowed_hosts is not None
    client, _ = await make_client(allowed_hosts=settings.allowed_hosts)
    name = socket.gethostname()
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", name, f"{name}:8000", f"{name.upper()}:8000"):
        response = await client.get("/v1/models", headers={"host": host})
        assert response.status_code == 200, (host, response.text)
    for host in ("evil.example", "evil.example:8000", f"{name}.evil.example"):
        for response in (
            await client.get("/v1/models", headers={"host": host}),
            await client.post("/v1/chat/completions", json=CHAT, headers={"host": host}),
        ):
            assert response.status_code == 403, (host, response.text)
            error = response.json()["error"]  # the API's error shape, naming the key that lets it in
            assert "server.allowed_hosts" in error["message"] and "evil" not in response.text


def test_machine_hosts_name_the_machine_its_addresses_and_a_specific_bind_address() -> None:
    import psutil

    hosts = machine_hosts("0.0.0.0")
    assert {socket.gethostname().lower(), socket.getfqdn().lower(), *LOOPBACK_HOSTS} <= set(hosts)
    assert "0.0.0.0" not in hosts and "*" not in hosts
    addresses = [
        address.address
        for entries in psutil.net_if_addrs().values()
        for address in entries
        if address.family in (socket.AF_INET, socket.AF_INET6)
    ]
    for address in addresses:
        bare = address.split("%", 1)[0]
        assert host_allowed(f"[{bare}]:8000" if ":" in bare else f"{bare}:8000", hosts), address
    assert "turnout.lan" in machine_hosts("turnout.lan")  # a name given as --host is one clients use
    assert default_allowed_hosts("0.0.0.0", None, machine_names=True) == hosts
    assert default_allowed_hosts("0.0.0.0", ["api.example.com"], machine_names=True) == ("api.example.com",)
    assert host_allowed("[FE80:0::1]:8000", ["fe80::1"]) and host_allowed("fe80::1", ["[fe80::1]"])


def test_allowed_hosts_default_by_bind_address_and_patterns() -> None:
    assert default_allowed_hosts("127.0.0.1", None) == LOOPBACK_HOSTS
    assert default_allowed_hosts("::1", None) == LOOPBACK_HOSTS
    assert default_allowed_hosts("localhost", None) == LOOPBACK_HOSTS
    assert default_allowed_hosts("0.0.0.0", None) is None
    assert default_allowed_hosts("127.0.0.1", ["api.example.com"]) == ("api.example.com",)
    assert host_allowed("API.example.com:443", ["api.example.com"])
    assert host_allowed("a.b.example.com", ["*.example.com"]) and not host_allowed(
        "example.com.evil", ["*.example.com"]
    )
    assert host_allowed("anything", ["*"]) and not host_allowed("127.0.0.1", ["api.example.com"])


# -- cross-site requests and forms (issue 39: a page's form moved the device; an empty POST loaded a model) --------

EVIL = {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}
SPEECH_MODELS = {
    "tools": ModelProfile(model="/m/tools"),
    "plain": ModelProfile(model="/m/plain"),
    "speech": ModelProfile(model="/m/tiny-whisper"),
}
WAV = {"file": ("clip.wav", b"RIFF....WAVEfmt fake audio", "audio/wav")}


def _fake_tasks(_: str, model: ModelProfile) -> frozenset[str]:
    # As the fake bundles decide it (tests/fakes/bundles.py): a whisper path transcribes, the rest chat.
    return frozenset({"transcription"}) if "whisper" in model.model else frozenset({"generate"})


async def _auto_client(make_client: MakeClient, **settings: Any) -> tuple[httpx.AsyncClient, Any]:
    settings.setdefault("models", SPEECH_MODELS)
    return await make_client(  # type: ignore[no-any-return]
        switching=Switching(mode="auto"), model_tasks=_fake_tasks, admission_timeout=10.0, **settings
    )


async def test_a_cross_site_request_that_uses_or_changes_a_model_is_403_bodyless_ones_too(
    make_client: MakeClient,
) -> None:
    client, manager = await _auto_client(make_client, dev_mode=True, admin_token=None)
    attempts = [
        ("/v1/audio/transcriptions", {"data": {"model": "plain"}, "files": WAV}),
        ("/v1/chat/completions", {"json": {**CHAT, "model": "plain"}}),
        ("/v1/models/switch", {"json": {"model": "plain"}}),
        ("/admin/models/plain/load", {}),  # no body at all: no content type to check
        ("/admin/models/tools/unload", {}),
        ("/admin/reload", {}),
    ]
    for headers in (EVIL, {"origin": "https://evil.example"}, {"origin": "null"}):
        for path, body in attempts:
            response = await client.post(path, headers=headers, **body)
            assert response.status_code == 403, (path, headers, response.text)
            error = response.json()["error"]
            assert "cross-site" in error["message"] and "Traceback" not in response.text
    assert manager.active_model == "tools" and manager.switching_to is None
    assert {slot.name: slot.state for slot in manager.snapshot().slots}["plain"] == "stopped"
    # Reading is not refused: a page cannot read the answer without CORS anyway.
    assert (await client.get("/v1/models", headers=EVIL)).status_code == 200


async def test_same_origin_typed_and_headerless_requests_and_cors_allowed_origins_pass(
    make_client: MakeClient,
) -> None:
    client, _ = await _auto_client(make_client, cors={"allow_origins": ["https://app.example"]})
    passing = [
        {},  # curl, the SDKs
        {"sec-fetch-site": "same-origin", "origin": "http://turnout.test"},
        {"sec-fetch-site": "same-site", "origin": "https://app.example"},  # a sibling that CORS lists
        {"sec-fetch-site": "none"},
        {"origin": "http://turnout.test"},  # an older browser on this server's own page
        {"origin": "https://app.example", "sec-fetch-site": "cross-site"},  # CORS allows it
    ]
    for headers in passing:
        response = await client.post("/v1/chat/completions", json={**CHAT, "model": "tools"}, headers=headers)
        assert response.status_code == 200, (headers, response.text)
    refused = await client.post("/v1/chat/completions", json=CHAT, headers=EVIL)
    assert refused.status_code == 403


async def test_a_same_site_page_is_cross_site_unless_cors_lists_its_origin(make_client: MakeClient) -> None:
    # A page on a sibling subdomain (another team's app, a user's pages on a shared domain) is another origin.
    client, manager = await _auto_client(make_client, cors={"allow_origins": ["https://app.turnout.test"]})
    sibling = {"sec-fetch-site": "same-site", "origin": "http://ui.turnout.test"}
    for path, body in (("/v1/chat/completions", {"json": {**CHAT, "model": "plain"}}), ("/admin/reload", {})):
        response = await client.post(path, headers=sibling, **body)
        assert response.status_code == 403, (path, response.text)
        assert "cross-site" in response.json()["error"]["message"]
    assert manager.active_model == "tools" and manager.switching_to is None
    listed = {"sec-fetch-site": "same-site", "origin": "https://app.turnout.test"}
    assert (await client.post("/v1/chat/completions", json={**CHAT, "model": "tools"}, headers=listed)).is_success


@pytest.mark.parametrize("flag", ["--allowed-headers", "--allowed-methods"])
async def test_cors_flags_without_allowed_origins_let_no_page_cross(make_client: MakeClient, flag: str) -> None:
    # vLLM defaults the origins to '*' once any CORS flag is given, which let every page through the cross-site
    # check; Turnout takes only the origins listed.
    from server.cli.frontend_flags import split_frontend_flags
    from server.frontend import parse_frontend_flags

    given, _ = parse_frontend_flags([flag, '["POST", "content-type"]'])
    client, manager = await _auto_client(make_client, cors=split_frontend_flags(given).cors())
    response = await client.post("/v1/chat/completions", json={**CHAT, "model": "plain"}, headers=EVIL)
    assert response.status_code == 403, response.text
    assert manager.active_model == "tools" and manager.switching_to is None


async def test_a_form_naming_a_model_that_cannot_serve_it_is_refused_before_admission(
    make_client: MakeClient,
) -> None:
    loader = FakeLoader()
    client, manager = await _auto_client(make_client, loader=loader)
    for route, api in (("/v1/audio/transcriptions", "Transcriptions"), ("/v1/audio/translations", "Translations")):
        answer = await client.post(route, data={"model": "plain"}, files=WAV)
        assert answer.status_code == 404, answer.text
        # The body the model's bundle gives once loaded (vllm_adapter's `unsupported`), before any switch.
        assert answer.json() == {
            "error": {
                "message": f"The model 'plain' does not support the {api} API.",
                "type": "NotFoundError",
                "param": "model",
                "code": 404,
            }
        }
    assert manager.active_model == "tools" and loader.loads == ["tools"]
    # A form naming none goes to the active model, which cannot serve it either: refused, nothing loads.
    nameless = await client.post("/v1/audio/transcriptions", files=WAV)
    assert nameless.status_code == 404 and "'tools'" in nameless.json()["error"]["message"]
    # A model that transcribes still gets its form, switching to it as auto mode does.
    served = await client.post("/v1/audio/transcriptions", data={"model": "speech"}, files=WAV)
    assert served.status_code == 200, served.text
    assert manager.active_model == "speech" and loader.loads == ["tools", "speech"]
