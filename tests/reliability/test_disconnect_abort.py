"""A client that disconnects mid-stream has its request aborted in the engine.

The server runs in this process (real uvicorn, real manager, a real tiny vLLM engine) so that the test can read
the engine itself: ``AsyncLLM``'s count of unfinished requests, and vLLM's own Prometheus counter of generated
tokens (its stat logger registers in this process's default registry). A request that was only forgotten by the
server, not aborted, would keep the count up and the token counter growing to ``max_tokens``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client import REGISTRY

from tests.fakes.manager_views import EngineRecorder
from tests.reliability.conftest import ServerPool, write_profile
from tests.reliability.traffic import HELLO

pytestmark = [pytest.mark.engine, pytest.mark.live_server("in-process")]

STREAMS = 4
MAX_TOKENS = 900
# Its own served name, so that vLLM's metrics of this engine are told apart from other engines in the process.
MODEL = "disconnect-tools"


class InProcessServer:
    """The app served by uvicorn on this event loop, with its manager at hand."""

    def __init__(self, url: str, manager: Any, engines: EngineRecorder[Any]) -> None:
        self.url = url
        self.manager = manager
        self._engines = engines

    @property
    def engine(self) -> Any:
        """The engine the active model's bundle was built over."""
        return self._engines.engines[self.manager.active_model]

    def unfinished(self) -> int:
        count: int = self.engine.output_processor.get_num_unfinished_requests()
        return count


def _generated_tokens() -> float:
    value = REGISTRY.get_sample_value("vllm:generation_tokens_total", {"model_name": MODEL, "engine": "0"})
    return value or 0.0


@pytest.fixture(scope="module")
async def in_process(
    server_pool: ServerPool, reliability_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[InProcessServer]:
    from server.api import ApiSettings, create_app
    from server.cli.listener import bind_listener
    from server.engine.factory import build_manager
    from server.frontend import FrontendSettings, build_bundle_for_profile
    from server.frontend.vllm_adapter import build_renderer
    from server.profiles import load_profile

    server_pool.close()  # the two-engines rule: no pool server alongside this one
    folder = tmp_path_factory.mktemp("in-process")
    path = write_profile(folder, {MODEL: reliability_models["tools"]}, {"strategy": "stop"}, default=MODEL)
    profile = load_profile(path)

    async def build_bundle(name: str, model: Any, engine: Any) -> Any:
        return await build_bundle_for_profile(name, model, engine, FrontendSettings())

    engines = EngineRecorder(build_bundle)
    manager: Any = build_manager(profile, engines, build_renderer=build_renderer)
    app = create_app(manager, ApiSettings(dev_mode=True), default_model=MODEL)
    # Bound before the engine loads, as `turnout serve` binds it: no other connection can be handed the port.
    listener = bind_listener("127.0.0.1", 0)
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    deadline = time.monotonic() + 600
    while not server.started:
        assert not serving.done(), "the in-process server stopped during start-up"
        assert time.monotonic() < deadline, "the in-process server did not start"
        await asyncio.sleep(0.2)
    try:
        yield InProcessServer(f"http://127.0.0.1:{port}", manager, engines)
    finally:
        server.should_exit = True
        await serving


async def _first_chunk_then_leave(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "messages": HELLO, "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                return  # leaving the block closes the connection mid-stream


async def _wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.05)
    return bool(condition())


async def test_a_client_that_disconnects_mid_stream_has_its_engine_request_aborted(
    in_process: InProcessServer,
) -> None:
    before = _generated_tokens()
    async with httpx.AsyncClient(base_url=in_process.url, timeout=120) as client:
        await asyncio.gather(*(_first_chunk_then_leave(client) for _ in range(STREAMS)))
    # The engine lets go of every request soon after its client left...
    assert await _wait_for(lambda: in_process.unfinished() == 0, timeout=10), in_process.unfinished()
    # ...and stops generating for them: the token counter settles far below what the requests asked for.
    await asyncio.sleep(1.0)
    settled = _generated_tokens()
    await asyncio.sleep(1.0)
    assert _generated_tokens() == settled
    generated = settled - before
    assert 0 < generated < STREAMS * MAX_TOKENS / 2, generated
    assert in_process.manager.snapshot().in_flight == 0


async def test_a_stream_read_to_the_end_generates_every_token(in_process: InProcessServer) -> None:
    """The control: the same request, read to the end, makes the counter grow by max_tokens."""
    before = _generated_tokens()
    body = {"model": MODEL, "messages": HELLO, "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True}
    async with (
        httpx.AsyncClient(base_url=in_process.url, timeout=300) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert await _wait_for(lambda: _generated_tokens() - before >= MAX_TOKENS, timeout=10)
    assert in_process.unfinished() == 0
