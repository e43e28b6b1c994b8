"""The Responses API's tool server (``--tool-server``): opened once per spec, shared, and a failure says why."""

from __future__ import annotations

import socket

import pytest

from server.frontend.settings import FrontendConfigError
from server.frontend.vllm_adapter import _tool_server as tool_server
from server.frontend.vllm_adapter._tool_server import open_tool_server


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool_server, "_opened", {})


async def test_no_spec_no_tool_server() -> None:
    assert await open_tool_server(None) is None and await open_tool_server("") is None


async def test_a_spec_is_opened_once_and_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    async def open_one(spec: str) -> object:
        opened.append(spec)
        return object()

    monkeypatch.setattr(tool_server, "_open", open_one)
    first = await open_tool_server("127.0.0.1:9001")
    assert await open_tool_server("127.0.0.1:9001") is first  # every model's bundle, every rebuild
    assert await open_tool_server("127.0.0.1:9002") is not first
    assert opened == ["127.0.0.1:9001", "127.0.0.1:9002"]


async def test_an_mcp_server_that_does_not_answer_is_a_config_error_naming_it() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = f"127.0.0.1:{port}"
    with pytest.raises(FrontendConfigError, match=rf"tool_server '{spec}' cannot be opened: \w+"):
        await open_tool_server(spec)
    assert spec not in tool_server._opened  # the next bundle build tries again


async def test_the_demo_spec_opens_vllms_demo_tool_server(monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[object] = []

    async def init_and_validate(self: object) -> None:
        validated.append(self)

    monkeypatch.setattr(tool_server.DemoToolServer, "init_and_validate", init_and_validate)
    server = await open_tool_server("demo")
    assert isinstance(server, tool_server.DemoToolServer) and validated == [server]
