"""The manager's drain, the first step of a graceful shutdown, on fake engines."""

from __future__ import annotations

import asyncio
import time

import pytest

from server.api.admission.request_admission import install_abort_hook
from server.engine import EngineManager, ManagerClosed
from server.profiles.schema import Switching
from tests.engine.conftest import MakeManager
from tests.fakes.manager_views import admitted, served_engine
from tests.waiting import until


async def _generate(manager: EngineManager, steps: int) -> list[str]:
    async with admitted(manager, None) as lease:
        install_abort_hook(lease)
        tokens = [token async for token in lease.bundle.engine.generate(lease.request_id, steps, 0.01)]
        lease.raise_if_aborted()
        return tokens


@pytest.mark.parametrize("mode", ["manual", "auto"])
async def test_drain_refuses_new_requests_lets_short_ones_finish_and_ends_the_rest(
    make_manager: MakeManager, mode: str
) -> None:
    manager = make_manager("keep", switching=Switching(mode=mode))  # type: ignore[arg-type]
    await manager.initialize("a")
    engine = await served_engine(manager)
    short = asyncio.create_task(_generate(manager, 10))
    long = asyncio.create_task(_generate(manager, 1000))
    await until(lambda: engine.running == 2, what="both requests to start")
    started = time.perf_counter()
    ended = await manager.drain(0.5)
    took = time.perf_counter() - started
    assert ended == 1 and 0.5 <= took < 1.5
    assert await short == ["a"] * 10
    with pytest.raises(ManagerClosed) as closed:
        await long
    assert (closed.value.status_code, closed.value.code) == (503, "server_shutting_down")
    with pytest.raises(ManagerClosed):
        await manager.acquire("a")


async def test_drain_returns_at_once_when_nothing_is_in_flight(make_manager: MakeManager) -> None:
    manager = make_manager("keep")
    await manager.initialize("a")
    started = time.perf_counter()
    assert await manager.drain(30) == 0
    assert time.perf_counter() - started < 0.5
