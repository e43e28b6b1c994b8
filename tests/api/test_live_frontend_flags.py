"""End to end: vLLM's frontend flags on a real ``turnout serve``: HTTPS, CORS, a tool-parser plugin, a response role.

One tiny engine (tiny-tools). The certificate is self-signed, made here; the plugin file registers a parser that
the profile names, so it must be loaded before the profile is validated.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.api.live_server import LiveServer, start_server, wait_ready
from tests.cli.test_frontend_flags import PLUGIN

pytestmark = pytest.mark.engine

ORIGIN = "https://app.example"
FINGERPRINT = "turnout-test-fp"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def trusting(cert: Path) -> ssl.SSLContext:
    """A client TLS context that trusts ``cert`` (httpx takes a context, not a file name)."""
    return ssl.create_default_context(cafile=str(cert))


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    key_file, cert_file = folder / "key.pem", folder / "cert.pem"
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_file, cert_file


@pytest.fixture(scope="module")
def tls(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    folder = tmp_path_factory.mktemp("flags")
    key, cert = _self_signed(folder)
    plugin = folder / "shouting.py"
    plugin.write_text(PLUGIN)
    profile = folder / "flags.yaml"
    profile.write_text(
        f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n    dtype: float32\n    max_model_len: 512\n"
        "    kv_cache_memory_bytes: 16777216\n    enforce_eager: true\n    enable_auto_tool_choice: true\n"
        "    tool_call_parser: shouting_hermes\n    response_role: bot\n"
    )
    args = ["--ssl-keyfile", str(key), "--ssl-certfile", str(cert), "--enable-ssl-refresh"]
    args += ["--allowed-origins", f'["{ORIGIN}"]']
    args += ["--tool-parser-plugin", str(plugin)]
    args += ["--enable-request-id-headers", "--enable-tokenizer-info-endpoint"]
    args += ["--fingerprint-mode", "custom", "--fingerprint-value", FINGERPRINT]
    live = start_server(profile, folder / "flags.log", {"TURNOUT_ADMIN_TOKEN": "t"}, *args)
    live.url = live.url.replace("http://", "https://")
    try:
        wait_ready(live, verify=trusting(cert))
        yield live, cert
    finally:
        live.stop()


def test_https_with_a_self_signed_certificate(tls: tuple[LiveServer, Path]) -> None:
    live, cert = tls
    assert httpx.get(f"{live.url}/v1/models", verify=trusting(cert)).json()["data"][0]["id"] == "tools"
    with pytest.raises(httpx.ConnectError):  # an unknown certificate is refused, so TLS is really on
        httpx.get(f"{live.url}/v1/models")
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(live.url.replace("https://", "http://") + "/v1/models")


def test_a_cors_preflight_is_answered_for_the_allowed_origin_only(tls: tuple[LiveServer, Path]) -> None:
    live, cert = tls
    headers = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    allowed = httpx.options(f"{live.url}/v1/chat/completions", headers=headers, verify=trusting(cert))
    assert allowed.status_code in (200, 204) and allowed.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.options(
        f"{live.url}/v1/chat/completions", headers={**headers, "Origin": "https://evil.example"}, verify=trusting(cert)
    )
    assert other.headers.get("access-control-allow-origin") != "https://evil.example"


def test_the_plugins_parser_named_by_the_profile_parses_tool_calls(tls: tuple[LiveServer, Path]) -> None:
    live, cert = tls
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    with httpx.Client(verify=trusting(cert)) as http:  # closed here: an open TLS socket is a ResourceWarning
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, http_client=http)
        answer = client.chat.completions.create(
            model="tools",
            messages=weather,  # type: ignore[arg-type]
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            temperature=0,
            max_tokens=64,
        )
    message = answer.choices[0].message
    assert [call.function.name for call in message.tool_calls or []] == ["GET_WEATHER"]  # the plugin's own parser
    assert message.role == "bot"  # type: ignore[comparison-overlap]  # the profile's response_role


def test_a_renewed_certificate_is_served_without_a_restart(tls: tuple[LiveServer, Path]) -> None:
    live, cert = tls
    old = trusting(cert)
    _self_signed(cert.parent)  # new key and certificate in the same files
    renewed = trusting(cert)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{live.url}/health", verify=renewed).status_code == 200:
                break
        except httpx.ConnectError:
            time.sleep(0.5)
    else:
        pytest.fail("the server never served the renewed certificate")
    with pytest.raises(httpx.ConnectError):  # and the old one is gone
        httpx.get(f"{live.url}/health", verify=old)


def test_request_id_headers_tokenizer_info_and_the_fingerprint(tls: tuple[LiveServer, Path]) -> None:
    live, cert = tls
    with httpx.Client(base_url=live.url, verify=trusting(cert), timeout=120) as http:
        body = {"model": "tools", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4}
        chat = http.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "client-7"})
        assert chat.status_code == 200 and chat.headers["x-request-id"] == "client-7"
        assert chat.json()["system_fingerprint"] == FINGERPRINT  # vLLM's serving objects read the mode
        info = http.get("/tokenizer_info")
        assert info.status_code == 200, info.text
        assert info.json()["tokenizer_class"]  # the tokenizer's own class name, as vLLM reports it
        assert len(info.headers["x-request-id"]) == 32  # made up when the client sent none
