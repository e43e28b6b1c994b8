"""``stop``: unload the model being left; every activation starts a fresh engine.

With ``switching.kv_keep_bytes`` the engine keeps its prefix blocks in the pool before it stops; the report of
the switch that stopped it says what was kept.
"""

from __future__ import annotations

from typing import Any, ClassVar

from server.engine.strategies.base import LoaderStrategy
from server.engine.types import (
    ActivationMetrics,
    BroughtUp,
    Capabilities,
    EngineLoader,
    EngineLost,
    KeepFigures,
    Parked,
    SlotAccess,
    SlotState,
    with_kept,
)
from server.profiles.schema import ModelProfile

__all__ = ["StopStrategy"]


class StopStrategy(LoaderStrategy):
    """Holds at most one engine: the cheapest in memory, the slowest to switch."""

    name = "stop"
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, loader: EngineLoader) -> None:
        super().__init__(loader)
        # What the last park kept, for the report of the switch it belongs to (the next bring-up).
        self._kept: KeepFigures | None = None

    async def park(self, name: str, engine: Any) -> Parked:
        self._kept = None
        try:
            if engine is not None:
                self._kept = await self._loader.unload(engine)
        except Exception as exc:
            # The slot gives the engine up either way: a half-shut engine is no state to serve from.
            raise EngineLost(f"unloading {name} reported {exc!r}") from exc
        return Parked(SlotState.STOPPED)

    async def bring_up(self, name: str, profile: ModelProfile, held: Any, slots: SlotAccess) -> BroughtUp:
        kept, self._kept = self._kept, None
        if held is not None:
            return BroughtUp(held)
        engine = await self._loader.load(name, profile)
        return BroughtUp(engine, with_kept(ActivationMetrics(), kept))
