"""Builds an :class:`EngineManager` for a profile: real loader, the strategy for this device, its settings.

:func:`prepare_profile` runs first: it builds every model's vLLM engine config (so a bad engine argument fails
before any engine starts) and sizes the KV caches that the profile leaves to Turnout (``residency/kv_budget.py``).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from server.engine.manager import BundleBuilder, EngineManager
from server.engine.residency import (
    ENGINE_OVERHEAD_BYTES,
    Weighing,
    budget_eviction,
    host_held_bytes,
    plan_kv_cache,
    resident_together,
    with_kv_budget,
)
from server.engine.runtime import (
    FAULTS,
    RendererFactory,
    StateDir,
    VllmEngineLoader,
    build_engine_configs,
    detect_device,
    digest_cache_file,
    generation_tasks,
    memory_check,
    model_shape,
    read_device_memory,
    stash_host_factory,
)
from server.engine.strategies import (
    InPlaceSwapper,
    StrategyUnavailable,
    capabilities_of,
    choose_strategy,
    resolve_strategy_name,
    select_strategy,
)
from server.engine.supervision import EngineWatches, Supervision
from server.engine.types import CostBook, EngineLoader, MemoryBudgetExceeded, MemoryPlan, MemoryReading, ModelProbe
from server.profiles.memory_budget import budget_bytes
from server.profiles.schema import Profile
from server.vllm_plugin import WORKER_EXTENSION, with_kv_keep

__all__ = ["build_manager", "prepare_profile", "with_engine_defaults"]

B = TypeVar("B")
logger = logging.getLogger("turnout.engine")


def prepare_profile(
    profile: Profile,
    *,
    engine_defaults: Mapping[str, Any] | None = None,
    device: str | None = None,
    memory: MemoryReading | None = None,
) -> tuple[Profile, MemoryPlan | None]:
    """Check every model's engine arguments with vLLM, then budget the KV caches the profile leaves open.

    Args:
        profile: The validated profile.
        engine_defaults: Engine arguments from the command line, for every model; a model's own key wins.
        device: ``cpu``, ``cuda`` or ``hpu`` (default: what vLLM detects).
        memory: The reading to budget from. Default: read it now, which is right only before any engine
            runs; a reload passes the start-up reading, so that its engines' own use is not counted twice.

    Returns:
        The profile with each budgeted model's ``kv_cache_memory_bytes`` set, and the plan (None where Turnout
        does not budget: HPU, or CUDA without NVML).

    Raises:
        EngineConfigInvalid: vLLM refused a model's engine arguments.
        MemoryBudgetExceeded: A model cannot hold one sequence of its ``max_model_len``.
        StrategyUnavailable: The profile's strategy cannot run on this device.
    """
    device = device or detect_device()
    profile = with_engine_defaults(profile, engine_defaults or {})
    # The pool's own folder goes when the server stops: the digests are cached in the state folder, which stays.
    keeps = profile.switching.kv_keep_bytes is not None
    cache = digest_cache_file() if keeps else None
    profile = with_kv_keep(profile, digest_cache=cache, flip_bytes=FAULTS.models("kv"))
    configs = build_engine_configs(profile.models)
    memory = memory or read_device_memory(device)
    if memory is None:
        return profile, None
    # The kept-KV pool is host memory: on CPU it is out of what the engines and the memory budget may take.
    held = host_held_bytes(profile.switching.kv_keep_bytes, memory)
    strategy = resolve_strategy_name(
        profile.switching.strategy,
        device=device,
        stash_available=importlib.util.find_spec("vllm_gaudi") is not None,
    )
    plan = plan_kv_cache(
        [model_shape(name, model, configs[name]) for name, model in profile.models.items()],
        memory,
        resident=resident_together(
            capabilities_of(strategy).serves_several,
            max_active=profile.switching.max_active,
            models=len(profile.models),
        ),
        strategy=strategy,
        engine_overhead_bytes=ENGINE_OVERHEAD_BYTES.get(device, 0),
        budget_bytes=(
            budget_bytes(
                profile.switching.memory_budget,
                total_bytes=memory.total_bytes,
                available_bytes=memory.available_bytes - held,
            )
            if capabilities_of(strategy).budgets_bytes
            else None
        ),
        host_held_bytes=held,
    )
    if plan.errors:
        raise MemoryBudgetExceeded(plan)
    return with_kv_budget(profile, plan), plan


def with_engine_defaults(profile: Profile, defaults: Mapping[str, Any]) -> Profile:
    """``profile`` with ``defaults`` under every model's engine arguments (the model's own keys win)."""
    if not defaults:
        return profile
    models = {
        name: msgspec.structs.replace(model, engine_args={**defaults, **model.engine_args})
        for name, model in profile.models.items()
    }
    return msgspec.structs.replace(profile, models=models)


def _in_place_loader(
    build_renderer: RendererFactory, *, required: bool, watches: EngineWatches, load_timeout_s: float
) -> tuple[EngineLoader | None, InPlaceSwapper | None]:
    """A loader whose engines carry the reconfigure worker extension, and the in-place swap over them.

    ``auto`` only prefers the in-place swap: where it cannot run (another vLLM, the plugin not installed) auto
    falls back to unloading resident engines, with a warning. ``reconfigure`` refuses to start instead.
    """
    from server.engine.runtime import InPlaceSwap, PluginMissing
    from server.profiles.vllm_version import UnsupportedVllmError

    vllm_loader = VllmEngineLoader(worker_extension=WORKER_EXTENSION, watches=watches, load_timeout_s=load_timeout_s)
    try:
        swap = InPlaceSwap(vllm_loader.vllm_config, build_renderer, watches=watches, load_timeout_s=load_timeout_s)
        return vllm_loader, swap
    except (PluginMissing, UnsupportedVllmError) as exc:
        if required:
            raise StrategyUnavailable(str(exc)) from exc
        logger.warning("strategy auto: no in-place swap (%s); resident engines are unloaded instead", exc)
        return None, None


def build_manager(
    profile: Profile,
    build_bundle: BundleBuilder[B],
    *,
    build_renderer: RendererFactory,
    loader: EngineLoader | None = None,
    device: str | None = None,
    admission_timeout: float | None = None,
    memory_plan: MemoryPlan | None = None,
    warm_launcher: bool = False,
    costs: CostBook | None = None,
    probe: ModelProbe | None = None,
    state: StateDir | None = None,
) -> EngineManager[B]:
    """The manager for ``profile``; raises ``StrategyUnavailable`` when its strategy cannot run here.

    ``warm_launcher``: start the engine launcher now, beside the server's own start, when its engines would be
    forked from it (``server/engine/runtime``); otherwise it starts at the first engine start.

    ``costs``: the measured reload costs, kept between runs (None: a fresh book in memory).

    ``build_bundle`` and ``build_renderer`` come from the frontend layer (the CLI wires them): the bundle of a
    loaded model, and ``AsyncLLM``'s own renderer that the in-place swap rebuilds after a load; ``probe``, the
    switches' proof of each model they publish (``switching.verify``), from the frontend too, its fingerprints kept
    in ``state`` (default: this user's state folder).
    """
    device = device or detect_device()
    costs = costs if costs is not None else CostBook()
    stash_factory = stash_host_factory()
    in_place = None
    # Every engine the real loader starts is watched; the manager is told of deaths once it exists.
    watches = EngineWatches(Supervision.from_switching(profile.switching)) if loader is None else None
    load_timeout_s = profile.switching.load_timeout_s
    choice = choose_strategy(profile.switching.strategy, device=device, stash_available=stash_factory is not None)
    if choice.in_place != "no" and watches is not None:
        loader, in_place = _in_place_loader(
            build_renderer, required=choice.in_place == "required", watches=watches, load_timeout_s=load_timeout_s
        )
    engine_loader = loader or VllmEngineLoader(watches=watches, load_timeout_s=load_timeout_s)
    if warm_launcher and isinstance(engine_loader, VllmEngineLoader):
        engine_loader.warm_up_launcher()
    strategy = select_strategy(
        profile.switching,
        engine_loader,
        device=device,
        stash_factory=stash_factory,
        memory_allows=memory_check(device, profile.models),
        in_place=in_place,
        # Eviction by bytes under a memory budget (keep), over the manager's current plan (a reload replaces it).
        by_bytes=(
            budget_eviction(lambda: manager.memory_plan, Weighing.of(profile.switching, costs))
            if memory_plan and memory_plan.budget_bytes
            else None
        ),
        watches=watches,
    )
    manager: EngineManager[B] = EngineManager(
        profile.models,
        strategy,
        build_bundle,
        switching=profile.switching,
        admission_timeout=admission_timeout,
        memory_plan=memory_plan,
        costs=costs,
        # A given loader is a test's: its models are no vLLM's to read.
        model_tasks=generation_tasks if loader is None else None,
        probe=probe,
        state=state,
    )
    if watches is not None:
        watches.supervise(manager.engine_died)
    return manager
