"""Builds an :class:`EngineManager` for a profile: real loader, the strategy for this device, its settings."""

from __future__ import annotations

from typing import TypeVar

from server.engine.manager import BundleBuilder, EngineManager
from server.engine.scheduler import SchedulerPolicy
from server.engine.strategies import EngineLoader, select_strategy
from server.engine.vllm_loader import (
    VllmEngineLoader,
    detect_device,
    ram_allows_another_engine,
    stash_host_factory,
)
from server.profiles.schema import Profile

__all__ = ["build_manager"]

B = TypeVar("B")


def build_manager(
    profile: Profile,
    build_bundle: BundleBuilder[B],
    *,
    loader: EngineLoader | None = None,
    device: str | None = None,
    admission_timeout: float = 600.0,
) -> EngineManager[B]:
    """The manager for ``profile``; raises ``StrategyUnavailable`` when its strategy cannot run here."""
    strategy = select_strategy(
        profile.switching,
        loader or VllmEngineLoader(),
        device=device or detect_device(),
        stash_factory=stash_host_factory(profile.models),
        memory_allows=ram_allows_another_engine,
    )
    return EngineManager(
        profile.models,
        strategy,
        build_bundle,
        mode=profile.switching.mode,
        drain_timeout=profile.switching.drain_timeout,
        admission_timeout=admission_timeout,
        scheduling=SchedulerPolicy.from_switching(profile.switching),
    )
