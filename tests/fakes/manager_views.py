"""The manager seen as the API sees it: requests admitted through ``acquire``/``release``, states from the status
snapshot, engines as the bundle builder was given them. Tests use these instead of reaching into the manager."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

from server.engine import EngineManager, Lease, SlotState
from server.profiles.schema import ModelProfile

__all__ = ["EngineRecorder", "admitted", "served_engine", "state_of"]

B = TypeVar("B")


@asynccontextmanager
async def admitted(
    manager: EngineManager[B], model: str | None, *, wait_timeout: float | None = None
) -> AsyncIterator[Lease[B]]:
    """One request's lease for a ``with`` block, as the API's admission holds it."""
    lease = await manager.acquire(model, wait_timeout=wait_timeout)
    try:
        yield lease
    finally:
        manager.release(lease)


def state_of(manager: EngineManager[Any], name: str) -> SlotState:
    """``name``'s slot state, as the status route reports it."""
    return SlotState(next(slot.state for slot in manager.snapshot().slots if slot.name == name))


async def served_engine(manager: EngineManager[Any]) -> Any:
    """The engine a request admitted now is served by (the fake bundles carry the engine they were built for)."""
    async with admitted(manager, None, wait_timeout=0) as lease:
        return lease.bundle.engine


class EngineRecorder(Generic[B]):
    """Wraps a bundle builder and remembers the engine each model's latest bundle was built over."""

    def __init__(self, build: Callable[[str, ModelProfile, Any], Awaitable[B]]) -> None:
        self._build = build
        self.engines: dict[str, Any] = {}

    async def __call__(self, name: str, profile: ModelProfile, engine: Any) -> B:
        bundle = await self._build(name, profile, engine)
        self.engines[name] = engine
        return bundle
