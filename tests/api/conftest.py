"""In-process app fixtures: the real app and manager over fake engines and fake bundles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from server.api import ApiSettings, create_app
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy
from server.profiles.schema import ModelProfile
from server.vllm_plugin import close_kv_pool, server_kv_pool
from server.vllm_plugin.kv_pool import KVPool
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader

ADMIN_TOKEN = "admin-secret-token"
MakeClient = Callable[..., Any]


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    made: list[tuple[httpx.AsyncClient, EngineManager[Any]]] = []

    async def make(
        *, loader: FakeLoader | None = None, **settings: Any
    ) -> tuple[httpx.AsyncClient, EngineManager[Any]]:
        settings.setdefault("admin_token", ADMIN_TOKEN)
        models = settings.pop("models", None) or {
            "tools": ModelProfile(model="/m/tools", enable_auto_tool_choice=True, tool_call_parser="hermes"),
            "plain": ModelProfile(model="/m/plain"),
        }
        manager: EngineManager[Any] = EngineManager(
            models,
            settings.pop("strategy", KeepStrategy)(loader or FakeLoader()),
            build_fake_serving_bundle,
            abort_grace=0.5,
            memory_probe=lambda: 1.0,
            admission_timeout=settings.pop("admission_timeout", 5.0),
            switching=settings.pop("switching", None),
            memory_plan=settings.pop("memory_plan", None),
            model_tasks=settings.pop("model_tasks", None),
        )
        await manager.initialize("tools")
        # httpx's ASGI transport runs requests concurrently on this loop (Litestar's test client serializes
        # them), which the switch tests need; the lifespan is covered by the live-server tests.
        reloader = settings.pop("reloader", None)
        app = create_app(manager, ApiSettings(**settings), reloader=reloader)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turnout.test")
        made.append((client, manager))
        return client, manager

    yield make
    for client, manager in made:
        await client.aclose()
        await manager.shutdown()


@pytest.fixture
def kept_kv_pool() -> Iterator[KVPool]:
    """The kept-KV pool of this process as a server's (its one owner's folder, as ``with_kv_keep`` names it),
    removed afterwards."""
    pool = KVPool(server_kv_pool().root, limit_bytes=1 << 20)
    try:
        yield pool
    finally:
        close_kv_pool()


def admin(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
