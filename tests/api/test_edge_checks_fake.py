"""Cross-site and DNS-rebinding defence (``server/api/edge.py``), through the app on fake engines."""

from __future__ import annotations

import httpx
import pytest

from server.api.edge import LOOPBACK_HOSTS, default_allowed_hosts, host_allowed
from tests.api.conftest import MakeClient, admin

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
