"""``sleep``: vLLM sleep mode. Level 1 offloads the weights to host RAM, level 2 discards them.

Only verified against a fake that follows ``AsyncLLM``'s contract: vLLM refuses sleep mode on CPU, and the
machine this was written on has no accelerator. The level-2 wake-up sequence (weights, ``reload_weights``, KV
cache) is the one vLLM 0.32 itself uses in ``vllm/snapshot/server.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.engine.report import ActivationMetrics
from server.engine.states import Slot, SlotState
from server.engine.strategies.base import EngineLoader, SleepableEngine, unload_slot

__all__ = ["SleepStrategy"]


class SleepStrategy:
    """Parks the old engine asleep; waking it skips process start, weight loading and warm-up."""

    name = "sleep"

    def __init__(self, loader: EngineLoader, *, level: int = 1) -> None:
        self._loader = loader
        self._level = level

    async def deactivate(self, slot: Slot) -> SlotState:
        engine: SleepableEngine = slot.engine
        await engine.sleep(level=self._level)
        return SlotState.SLEEPING

    async def activate(self, slot: Slot, slots: Sequence[Slot]) -> ActivationMetrics | None:
        if slot.engine is None:
            # Engines are created with sleep mode on; vLLM cannot enable it on a running engine.
            slot.attach(await self._loader.load(slot.name, slot.profile, sleep_mode=True))
        elif slot.state is SlotState.LOADING and await _is_asleep(slot.engine):
            await self._wake(slot.engine)
        return None

    async def release(self, slot: Slot) -> None:
        await unload_slot(slot, self._loader)

    async def close(self) -> None:
        pass  # every engine belongs to a slot, and the slots are released first

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
