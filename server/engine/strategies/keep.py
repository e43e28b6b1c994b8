"""``keep``: the model being left stays resident, so switching back only swaps the pointer.

Residency is bounded: by ``max_resident`` engines and, when a ``memory_allows`` check is given (the ``auto``
policy), by memory, and by the memory budget's bytes. Before a new engine loads, the model slots evict residents in
the residency policy's order (``residency/policy.py``: least recently used first, never pinned or busy ones) until
every bound holds. With an in-place swap (``auto`` on CPU and CUDA) a full house does not evict and start anew:
the first resident engine in that order that can take the target takes it in place (``reconfigure``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from server.engine.residency import BudgetEviction
from server.engine.residency import policy as residency_policy
from server.engine.strategies.base import LoaderStrategy
from server.engine.strategies.reconfigure import InPlaceSwapper, in_place_metrics
from server.engine.types import (
    ActivationMetrics,
    BroughtUp,
    Capabilities,
    EngineLoader,
    Parked,
    ResidencyRefused,
    SlotAccess,
    SlotState,
)
from server.profiles.schema import ModelProfile

__all__ = ["KeepStrategy"]

logger = logging.getLogger("turnout.engine")


class KeepStrategy(LoaderStrategy):
    """Engines stay loaded; activation of a resident model is a pointer swap."""

    name = "keep"
    capabilities: ClassVar[Capabilities] = Capabilities(
        holds_left_model=True, serves_several=True, budgets_bytes=True, loads_without_activating=True
    )

    def __init__(
        self,
        loader: EngineLoader,
        *,
        max_resident: int | None = None,
        memory_allows: Callable[[], bool] | None = None,
        in_place: InPlaceSwapper | None = None,
        by_bytes: BudgetEviction | None = None,
    ) -> None:
        """Create the strategy.

        Args:
            loader: Starts and stops engines.
            max_resident: Most engines held at once, the active one included (None: no count limit).
            memory_allows: Says whether another engine fits next to those held; None means always.
            in_place: Swaps the model inside a resident engine when no other fits; ``loader`` must start
                engines with its worker extension.
            by_bytes: The memory budget: which residents to evict so that a model's footprint fits.
        """
        super().__init__(loader)
        self._max_resident = max_resident
        self._memory_allows = memory_allows
        self._in_place = in_place
        self._by_bytes = by_bytes

    async def park(self, name: str, engine: Any) -> Parked:
        return Parked(SlotState.RESIDENT, engine)

    async def bring_up(self, name: str, profile: ModelProfile, held: Any, slots: SlotAccess) -> BroughtUp:
        if held is not None:
            return BroughtUp(held)
        if self._in_place is not None and self._full(slots):
            reused = await self._reconfigure_a_resident(name, profile, slots, self._in_place)
            if reused is not None:
                return reused
        await self._evict_by_bytes(name, slots)
        await self._evict_while_full(name, slots)
        engine = await self._loader.load(name, profile)
        return BroughtUp(engine, ActivationMetrics(method="restart") if self._in_place is not None else None)

    async def load_resident(self, name: str, profile: ModelProfile, slots: SlotAccess) -> Any:
        """Load ``name`` next to the active engine, evicting least recently active residents as a switch does."""
        if self._max_resident == 1:
            raise ResidencyRefused(
                f"Cannot load '{name}' next to the active model: switching.max_active is 1 under keep."
            )
        await self._evict_by_bytes(name, slots)
        await self._evict_while_full(name, slots, "loading ")
        if self._full(slots):
            limit = f"max_active {self._max_resident}" if self._max_resident is not None else "memory"
            raise ResidencyRefused(
                f"Cannot load '{name}': no room within {limit} (the other engines are active or pinned)."
            )
        return await self._loader.load(name, profile)

    async def _evict_by_bytes(self, name: str, slots: SlotAccess) -> None:
        """Evict what the memory budget says ``name``'s footprint needs; refuse when it cannot fit now."""
        if self._by_bytes is None:
            return
        decision = self._by_bytes(name, slots.holders())
        if not decision.fits:
            raise ResidencyRefused(decision.reason)
        for victim in decision.evict:
            logger.info("keep: evicting resident %s %s", victim, decision.reason)
            await slots.evict(victim, f"evicted {decision.reason}")

    async def _evict_while_full(self, name: str, slots: SlotAccess, doing: str = "") -> None:
        """Evict residents in the residency policy's order (as :class:`SlotAccess` lists them) while no other engine
        fits (by count, or by the memory check, read again after each eviction)."""
        for victim in slots.residents():
            if not self._full(slots):
                break
            logger.info("keep: evicting resident %s to make room for %s%s", victim.name, doing, name)
            await slots.evict(victim.name)

    def _full(self, slots: SlotAccess) -> bool:
        over_count = not residency_policy.one_more_fits(slots.engines_held(), max_active=self._max_resident)
        return over_count or (self._memory_allows is not None and not self._memory_allows())

    async def _reconfigure_a_resident(
        self, name: str, profile: ModelProfile, slots: SlotAccess, in_place: InPlaceSwapper
    ) -> BroughtUp | None:
        """Load ``name`` into the first resident engine, in the residency policy's order, that can take it in place."""
        for victim in slots.residents():
            reason = await in_place.incompatibility(victim.engine, victim.profile, name, profile)
            if reason is not None:
                logger.info("keep: %s cannot take %s in place (%s)", victim.name, name, reason)
                continue
            logger.info("keep: no room for another engine; %s's engine takes %s in place", victim.name, name)
            engine = slots.take_engine(victim.name)
            try:
                unloaded = await in_place.unload(engine)
                outcome = await in_place.load(engine, name, profile)
            except BaseException:
                # The taken engine is nobody's now: free it before the failure goes up.
                try:
                    await self.unload(name, engine)
                except Exception:
                    logger.exception("keep: unloading %s's engine after a failed in-place load failed", name)
                raise
            return BroughtUp(engine, in_place_metrics(outcome, unloaded), path="in_place")
        return None
