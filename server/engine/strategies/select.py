"""Picks the strategy a profile asks for, resolving ``auto`` by device.

``auto``: stash on HPU with vllm_gaudi; on CPU and CUDA keep engines resident while memory allows, otherwise
reconfigure (a keep strategy whose memory check makes the least recently used resident engine take the target in
place; without the in-place swap it unloads that engine before a new one loads).
``reconfigure`` runs on vLLM's CPU and CUDA workers; on Gaudi, vLLM-Gaudi's own in-process swap is ``stash``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from server.engine.residency import BudgetEviction
from server.engine.residency import policy as residency_policy
from server.engine.strategies.keep import KeepStrategy
from server.engine.strategies.reconfigure import InPlaceSwapper, ReconfigureStrategy
from server.engine.strategies.sleep import SleepStrategy
from server.engine.strategies.stash import StashStrategy
from server.engine.strategies.stop import StopStrategy
from server.engine.supervision import EngineWatches
from server.engine.types import Capabilities, EngineLoader, MemoryPlan, StashHostFactory, SwitchStrategy
from server.profiles.schema import Switching

__all__ = [
    "STRATEGIES",
    "StrategyChoice",
    "StrategyUnavailable",
    "capabilities_of",
    "choose_strategy",
    "models_held_at_once",
    "resolve_strategy_name",
    "select_strategy",
]

#: The registry: every strategy by its name (a new strategy is its module and one entry here, and its branch in
#: :func:`select_strategy`).
STRATEGIES: Mapping[str, type[SwitchStrategy]] = {
    strategy.name: strategy
    for strategy in (StopStrategy, KeepStrategy, SleepStrategy, ReconfigureStrategy, StashStrategy)
}


def capabilities_of(strategy: str) -> Capabilities:
    """What the (resolved) ``strategy`` can do."""
    return STRATEGIES[strategy].capabilities


def models_held_at_once(strategy: str, max_active: int | None, configured: int, plan: MemoryPlan | None = None) -> int:
    """How many models one device holds at once under a (resolved) ``strategy``: 1 where a switch unloads the
    model left (``stop``, ``reconfigure``); under ``keep`` with a memory budget (``plan``), the most models whose
    footprints fit in it together, at most ``max_active`` (the residency policy's ``most_resident``); else
    ``max_active`` where it applies (``keep``), or every configured model.

    The gateway's ``max_lora`` and Ray Serve's ``max_num_models_per_replica`` are this number
    (:meth:`EngineManager.models_held_at_once`).
    """
    capabilities = capabilities_of(strategy)
    if not capabilities.holds_left_model:
        return 1
    if capabilities.budgets_bytes and plan is not None and plan.budget_bytes is not None:
        return max(1, len(residency_policy.most_resident(plan.footprints(), plan.budget_bytes, max_active=max_active)))
    if capabilities.serves_several and max_active is not None:
        return max(1, min(max_active, configured))
    return max(1, configured)


class StrategyUnavailable(ValueError):
    """The profile asks for a strategy this device cannot run."""


@dataclass(frozen=True)
class StrategyChoice:
    """What a profile's ``strategy`` means on one device: the one place that says what ``auto`` is.

    Attributes:
        name: The concrete strategy.
        memory_bounded: ``keep`` holds engines while memory allows (``auto``), not only up to ``max_active``.
        in_place: Whether models are swapped inside a running engine: ``required`` (``reconfigure``),
            ``preferred`` (``auto`` on CPU and CUDA: a full house reuses its least recently used engine), or ``no``.
    """

    name: str
    memory_bounded: bool = False
    in_place: Literal["required", "preferred", "no"] = "no"


def choose_strategy(requested: str, *, device: str, stash_available: bool) -> StrategyChoice:
    """What ``requested`` means on ``device``; raises when it cannot run there."""
    if requested == "auto":
        if device == "hpu" and stash_available:
            return StrategyChoice("stash")
        return StrategyChoice("keep", memory_bounded=True, in_place="preferred" if device in ("cpu", "cuda") else "no")
    name = resolve_explicit(requested, device=device, stash_available=stash_available)
    return StrategyChoice(name, in_place="required" if capabilities_of(name).swaps_in_place else "no")


def resolve_strategy_name(requested: str, *, device: str, stash_available: bool) -> str:
    """The concrete strategy for ``requested`` on ``device``; raises when it cannot run there."""
    return choose_strategy(requested, device=device, stash_available=stash_available).name


def resolve_explicit(requested: str, *, device: str, stash_available: bool) -> str:
    """A strategy named explicitly, checked against ``device``."""
    if requested == "stash" and not stash_available:
        raise StrategyUnavailable("strategy 'stash' needs vLLM-Gaudi (the vllm_gaudi package), which is not installed")
    if requested == "sleep" and device == "cpu":
        raise StrategyUnavailable("strategy 'sleep' needs vLLM sleep mode, which vLLM refuses on CPU; use keep or stop")
    if requested == "reconfigure" and device == "hpu":
        raise StrategyUnavailable(
            "strategy 'reconfigure' runs on vLLM's CPU and CUDA workers; on Gaudi use 'stash' (vLLM-Gaudi's own)"
        )
    return requested


def select_strategy(
    switching: Switching,
    loader: EngineLoader,
    *,
    device: str,
    stash_factory: StashHostFactory | None = None,
    memory_allows: Callable[[], bool] | None = None,
    in_place: InPlaceSwapper | None = None,
    by_bytes: BudgetEviction | None = None,
    watches: EngineWatches | None = None,
) -> SwitchStrategy:
    """Build the strategy for ``switching`` on ``device``.

    Args:
        switching: The profile's switching section.
        loader: Starts and stops engines.
        device: ``cpu``, ``cuda`` or ``hpu``.
        stash_factory: Builds vLLM-Gaudi's host; None when vllm_gaudi is not installed.
        memory_allows: The memory check of the ``auto`` policy (host RAM on CPU, device memory on CUDA).
        in_place: Swaps models inside a running engine (``reconfigure``, and ``auto`` when memory is short);
            ``loader`` must start engines with its worker extension.
        by_bytes: The memory budget's eviction by bytes (``keep``); None: by count (and ``memory_allows``) only.
        watches: The loader's engine watches (``sleep`` widens their health check while an engine sleeps or
            wakes, up to ``load_timeout_s``).
    """
    choice = choose_strategy(switching.strategy, device=device, stash_available=stash_factory is not None)
    name = choice.name
    if name == "stop":
        return StopStrategy(loader)
    if name == "sleep":
        return SleepStrategy(
            loader, level=switching.sleep_level, watches=watches, slow_timeout_s=switching.load_timeout_s
        )
    if name == "reconfigure":
        if in_place is None:
            raise StrategyUnavailable("strategy 'reconfigure' needs the in-place swap (server/vllm_plugin/)")
        return ReconfigureStrategy(loader, in_place)
    if name == "stash":
        assert stash_factory is not None  # resolve_strategy_name refused stash without it
        return StashStrategy(stash_factory)
    if choice.memory_bounded:
        return KeepStrategy(
            loader, max_resident=switching.max_active, memory_allows=memory_allows, in_place=in_place, by_bytes=by_bytes
        )
    return KeepStrategy(loader, max_resident=switching.max_active, by_bytes=by_bytes)
