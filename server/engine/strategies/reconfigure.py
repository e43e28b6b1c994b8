"""``reconfigure``: one engine host; a switch swaps the model inside vLLM's running processes.

The engine-core and worker processes stay, so a switch skips process spawn, the torch and vLLM imports and
engine shutdown: it costs the unload, the weights, the KV cache and the frontend refresh (``server/vllm_plugin``,
driven by ``server/engine/runtime/in_place_swap.py``). Memory holds one model at a time, as with ``stop``.

Transitions of the host (what it holds: a model, nothing, or unknown after a failure):
    * park: unload the old model in place; if that fails the host's state is unknown, so it is stopped
      (:class:`EngineLost`) and the target starts a fresh engine;
    * bring up: load the target in place and check which model the engine core then reports (a mismatch is
      an error, never published); a target the running processes cannot take (another tensor-parallel size,
      device, executor, quantization config) restarts the host instead;
    * rollback: the switch brings the previous model back through ``bring_up``; if loading it in place
      fails, the host restarts on it (the ``stop`` path).
The report says which happened: ``method: weights | reconfigure | restart`` (``weights``: a same-shape target's
weights copied into the loaded model, ``server/vllm_plugin/weights.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from server.engine.runtime import LoadOutcome
from server.engine.types import (
    ActivationMetrics,
    BroughtUp,
    Capabilities,
    EngineLoader,
    EngineLost,
    Parked,
    SlotAccess,
    SlotState,
    with_kept,
)
from server.profiles.schema import ModelProfile
from server.vllm_plugin.protocol import UnloadResult

__all__ = ["InPlaceSwapper", "ReconfigureStrategy", "in_place_metrics"]

logger = logging.getLogger("turnout.engine")


class InPlaceSwapper(Protocol):
    """Swaps models inside one running engine (``server/engine/runtime/in_place_swap.py``: ``InPlaceSwap``)."""

    async def incompatibility(self, engine: Any, held: ModelProfile, name: str, profile: ModelProfile) -> str | None:
        """Why ``engine``, which runs ``held``, cannot take ``name`` in place, or None."""

    async def unload(self, engine: Any) -> UnloadResult:
        """Release the engine's model and KV cache."""

    async def load(self, engine: Any, name: str, profile: ModelProfile) -> LoadOutcome:
        """Load ``name`` into ``engine`` and verify what the engine core reports."""

    def prepare(self, models: Sequence[tuple[str, ModelProfile]]) -> None:
        """Get ready, in the background, for swaps to ``models`` (their configs)."""


def in_place_metrics(outcome: LoadOutcome, unloaded: UnloadResult | None) -> ActivationMetrics:
    """The switch report's phases of one in-place swap."""
    result = outcome.result
    phases = ActivationMetrics(
        method=result.method,
        # The engine core may drop the kept model only once it knows the target (a full load): count it too.
        unload_ms=(unloaded.unload_ms if unloaded is not None else 0.0) + result.unload_ms,
        load_ms=result.load_ms,
        kv_cache_ms=result.kv_cache_ms + result.scheduler_ms,
        frontend_ms=outcome.frontend_ms,
    )
    # The unload keeps the model's prefix blocks; a load with no unload before it keeps them first.
    return with_kept(phases, unloaded, result)


class ReconfigureStrategy:
    """Holds one engine host and reloads its model in place on every switch."""

    name = "reconfigure"
    capabilities: ClassVar[Capabilities] = Capabilities(swaps_in_place=True)

    def __init__(self, loader: EngineLoader, swap: InPlaceSwapper) -> None:
        """Create the strategy.

        Args:
            loader: Starts and stops engines; its engines must carry the reconfigure worker extension.
            swap: Unloads and loads models inside a running engine.
        """
        self._loader = loader
        self._swap = swap
        self._host: Any = None
        self._host_profile: ModelProfile | None = None
        # The model the host holds; None when it holds none, or after a failure left it unknown.
        self._held: str | None = None
        # The model that last came up successfully: a rollback to it may fall back to a restart.
        self._last_good: str | None = None
        self._unloaded: UnloadResult | None = None

    async def park(self, name: str, engine: Any) -> Parked:
        if engine is not None and engine is self._host and self._held == name:
            try:
                self._unloaded = await self._swap.unload(self._host)
            except Exception as exc:
                # Half unloaded is no state to serve from: stop the host, the target starts a fresh one.
                await self._stop_host()
                raise EngineLost(f"unloading {name} in place failed: {exc}") from exc
            self._held = None
        return Parked(SlotState.STOPPED)

    async def bring_up(self, name: str, profile: ModelProfile, held: Any, slots: SlotAccess) -> BroughtUp:
        unloaded, self._unloaded = self._unloaded, None
        if self._host is None:
            started = await self._restart(name, profile)
            # The first switch would build its target's config: do it now, after start, off the switch path.
            self._swap.prepare([(other, model) for other, model in slots.models.items() if other != name])
            return started
        if self._held == name:
            return BroughtUp(self._host)
        assert self._host_profile is not None
        reason = await self._swap.incompatibility(self._host, self._host_profile, name, profile)
        if reason is not None:
            logger.info("reconfigure: restarting the engine for %s: %s", name, reason)
            return await self._restart(name, profile)
        try:
            outcome = await self._swap.load(self._host, name, profile)
        except Exception as exc:
            self._held = None
            if name != self._last_good:
                raise
            logger.error("reconfigure: loading %s back in place failed (%s); restarting its engine", name, exc)
            return await self._restart(name, profile)
        self._adopt(name, profile)
        return BroughtUp(self._host, in_place_metrics(outcome, unloaded), path="in_place")

    async def unload(self, name: str, engine: Any) -> None:
        # The host goes only with the model it holds (eviction, shutdown); after a failed load it stays for the
        # rollback to load the previous model into.
        if engine is not None and engine is self._host and self._held == name:
            await self._stop_host()

    async def close(self) -> None:
        """Stop the host (manager shutdown)."""
        await self._stop_host()

    async def _restart(self, name: str, profile: ModelProfile) -> BroughtUp:
        await self._stop_host()
        started = time.perf_counter()
        self._host = await self._loader.load(name, profile)
        self._adopt(name, profile)
        load_ms = (time.perf_counter() - started) * 1000.0
        return BroughtUp(self._host, ActivationMetrics(method="restart", load_ms=load_ms))

    def _adopt(self, name: str, profile: ModelProfile) -> None:
        self._held = self._last_good = name
        self._host_profile = profile

    async def _stop_host(self) -> None:
        host, self._host, self._held = self._host, None, None
        if host is None:
            return
        try:
            await self._loader.unload(host)
        except Exception:  # a broken host may fail its shutdown; it is dropped either way
            logger.exception("reconfigure: stopping the engine host failed")
