"""``sleep``: vLLM sleep mode. Level 1 offloads the weights to host RAM, level 2 discards them.

Only verified against a fake that follows ``AsyncLLM``'s contract: vLLM refuses sleep mode on CPU, and the
machine this was written on has no accelerator. The level-2 wake-up sequence (weights, ``reload_weights``, KV
cache) is the one vLLM 0.32 itself uses in ``vllm/snapshot/server.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from server.engine.strategies.base import LoaderStrategy
from server.engine.supervision import EngineWatches
from server.engine.types import BroughtUp, Capabilities, EngineLoader, Parked, SleepableEngine, SlotAccess, SlotState
from server.profiles.schema import ModelProfile

__all__ = ["SleepStrategy"]


class SleepStrategy(LoaderStrategy):
    """Parks the old engine asleep; waking it skips process start, weight loading and warm-up.

    Falling asleep and waking up run inside the engine core's busy loop, which answers no health check meanwhile
    (a level-2 wake reloads every weight from disk): the engine's watch, when ``watches`` has one, waits up to
    ``slow_timeout_s`` for its round trip then instead of its usual timeout, so a slow wake is not taken for a
    hang, and a wake that really hangs still ends.
    """

    name = "sleep"
    capabilities: ClassVar[Capabilities] = Capabilities(holds_left_model=True)

    def __init__(
        self,
        loader: EngineLoader,
        *,
        level: int = 1,
        watches: EngineWatches | None = None,
        slow_timeout_s: float = 600.0,
    ) -> None:
        super().__init__(loader)
        self._level = level
        self._watches = watches
        self._slow_timeout_s = slow_timeout_s

    async def park(self, name: str, engine: Any) -> Parked:
        sleeper: SleepableEngine = engine
        async with self._slow(engine):
            await sleeper.sleep(level=self._level)
        return Parked(SlotState.SLEEPING, engine)

    async def bring_up(self, name: str, profile: ModelProfile, held: Any, slots: SlotAccess) -> BroughtUp:
        if held is None:
            # Engines are created with sleep mode on; vLLM cannot enable it on a running engine.
            return BroughtUp(await self._loader.load(name, profile, sleep_mode=True))
        if await _is_asleep(held):
            async with self._slow(held):
                await self._wake(held)
            return BroughtUp(held, path="wake")
        return BroughtUp(held)

    @contextlib.asynccontextmanager
    async def _slow(self, engine: Any) -> AsyncIterator[None]:
        """Widen ``engine``'s health check while its busy loop sleeps or wakes."""
        if self._watches is None:
            yield
            return
        async with self._watches.slow(engine, self._slow_timeout_s):
            yield

    async def _wake(self, engine: SleepableEngine) -> None:
        if self._level == 1:
            await engine.wake_up()
            return
        # Level 2 threw the weights away: wake the buffers, reload weights from disk, then the KV cache.
        await engine.wake_up(tags=["weights"])
        await engine.collective_rpc("reload_weights")
        await engine.wake_up(tags=["kv_cache"])


async def _is_asleep(engine: SleepableEngine) -> bool:
    is_sleeping = getattr(engine, "is_sleeping", None)
    return True if is_sleeping is None else bool(await is_sleeping())
