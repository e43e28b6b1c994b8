"""The contracts between the manager, its strategies and the engines they load.

The manager decides *when* a model is parked or brought up; a strategy decides *how*. Each strategy is a small
class behind :class:`SwitchStrategy`, and all engine creation goes through an :class:`EngineLoader`, so the switch
logic is tested against fakes and the real vLLM loader lives in one module (``server/engine/vllm_loader.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from server.engine.report import ActivationMetrics
from server.engine.states import Slot, SlotState
from server.profiles.schema import ModelProfile

__all__ = ["Engine", "EngineLoader", "SleepableEngine", "SwitchStrategy", "unload_slot"]


@runtime_checkable
class Engine(Protocol):
    """The part of vLLM's ``AsyncLLM`` the manager uses."""

    async def abort(self, request_id: str | Iterable[str]) -> None:
        """Abort requests by id."""


@runtime_checkable
class SleepableEngine(Engine, Protocol):
    """``AsyncLLM`` with sleep mode (vLLM: ``sleep(level)``, ``wake_up(tags)``, ``collective_rpc``)."""

    async def sleep(self, level: int = 1) -> None:
        """Offload (level 1) or discard (level 2) the weights and drop the KV cache."""

    async def wake_up(self, tags: list[str] | None = None) -> Any:
        """Bring back the parts named by ``tags`` (all when None)."""

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = ()) -> Any:
        """Run ``method`` on every worker (level 2 uses ``reload_weights``)."""


class EngineLoader(Protocol):
    """Creates and destroys engines for models of the profile."""

    async def load(self, name: str, model: ModelProfile, *, sleep_mode: bool = False) -> Any:
        """Start an engine for ``model``; raise on any failure (nothing may be left running then)."""

    async def unload(self, engine: Any) -> None:
        """Shut ``engine`` down and free its memory."""


class SwitchStrategy(Protocol):
    """What happens to the model being left, and how the target is brought up.

    Strategies change a slot's engine only through ``Slot.attach`` and ``Slot.detach``. ``activate`` must
    leave ``slot.engine`` live and ready to generate. ``deactivate`` returns the state the
    slot is parked in. ``release`` frees whatever the slot still holds (eviction, failure, shutdown). ``close``
    frees what the strategy itself holds, once, after every slot is released at shutdown.
    """

    name: str

    async def deactivate(self, slot: Slot) -> SlotState:
        """Park the drained ``slot``."""

    async def activate(self, slot: Slot, slots: Sequence[Slot]) -> ActivationMetrics | None:
        """Bring ``slot`` up; ``slots`` lets a strategy evict others first."""

    async def release(self, slot: Slot) -> None:
        """Free everything ``slot`` holds."""

    async def close(self) -> None:
        """Free what the strategy holds besides the slots' engines (manager shutdown)."""


async def unload_slot(slot: Slot, loader: EngineLoader) -> None:
    """Detach ``slot``'s engine first (so a failed shutdown never leaves it reachable), then unload it."""
    engine = slot.detach()
    if engine is not None:
        await loader.unload(engine)
