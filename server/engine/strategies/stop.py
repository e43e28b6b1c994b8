"""``stop``: unload the model being left; every activation starts a fresh engine."""

from __future__ import annotations

from typing import Any

from server.engine.states import SlotState
from server.engine.strategies.base import BroughtUp, EngineLost, LoaderStrategy, Parked, Room
from server.profiles.schema import ModelProfile

__all__ = ["StopStrategy"]


class StopStrategy(LoaderStrategy):
    """Holds at most one engine: the cheapest in memory, the slowest to switch."""

    name = "stop"

    async def park(self, name: str, engine: Any) -> Parked:
        try:
            await self.unload(name, engine)
        except Exception as exc:
            # The slot gives the engine up either way: a half-shut engine is no state to serve from.
            raise EngineLost(f"unloading {name} reported {exc!r}") from exc
        return Parked(SlotState.STOPPED)

    async def bring_up(self, name: str, profile: ModelProfile, held: Any, room: Room) -> BroughtUp:
        return BroughtUp(held if held is not None else await self._loader.load(name, profile))
