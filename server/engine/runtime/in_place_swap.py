"""Drives an in-place model swap from Turnout's process: unload, load, refresh the frontend, verify.

This is the only part of the in-place swap that runs in Turnout's process; it talks to the engine core through
vLLM's utility calls (``engine.engine_core.call_utility_async``), names from :mod:`protocol`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from server.engine.runtime.faults import FAULTS
from server.engine.runtime.frontend_state import RendererFactory, refresh_async_llm
from server.engine.supervision import EngineWatches, LoadTimedOut, engine_pids, kill_process_trees
from server.profiles.schema import ModelProfile
from server.profiles.vllm_version import IN_PLACE_ADAPTER, check_vllm_version
from server.vllm_plugin import KEPT_KV_CONNECTOR
from server.vllm_plugin.protocol import (
    LOAD_UTILITY,
    LOADED_MODEL_UTILITY,
    PLUGIN_GROUP,
    PLUGIN_NAME,
    UNLOAD_UTILITY,
    WORKER_EXTENSION,
    LoadedModel,
    LoadResult,
    UnloadResult,
    decode_result,
)

__all__ = [
    "InPlaceSwap",
    "LoadOutcome",
    "LoadedModelMismatch",
    "PluginMissing",
    "TargetConfig",
    "check_plugin",
    "profile_incompatibility",
]


logger = logging.getLogger("turnout.engine")


class PluginMissing(RuntimeError):
    """vLLM would not load Turnout's engine-core plugin, so the engine core would lack the utilities."""


def check_plugin(environ: Mapping[str, str] | None = None) -> None:
    """Fail at start, not at the first switch, when vLLM's engine core would not get the reconfigure utilities.

    Raises:
        PluginMissing: The entry point is not installed (the package was installed without ``pip install -e .``
            or before the entry point existed), or ``VLLM_PLUGINS`` leaves it out.
    """
    from importlib.metadata import entry_points

    env = os.environ if environ is None else environ
    if not any(point.name == PLUGIN_NAME for point in entry_points(group=PLUGIN_GROUP)):
        raise PluginMissing(
            f"strategy 'reconfigure' needs the {PLUGIN_GROUP} entry point {PLUGIN_NAME!r} of this package; "
            "reinstall it (bash scripts/setup.sh, or pip install -e .)"
        )
    allowed = env.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in allowed.split(","):
        raise PluginMissing(f"strategy 'reconfigure' needs {PLUGIN_NAME!r} in VLLM_PLUGINS (now {allowed!r})")


class LoadedModelMismatch(RuntimeError):
    """The engine core reports another model than the one it was asked to load."""


@dataclass(frozen=True)
class TargetConfig:
    """One model's ``VllmConfig``, cloudpickled once and unpickled fresh for every use (vLLM mutates it)."""

    profile: ModelProfile
    payload: bytes
    model: str
    served_model_name: str

    def fresh(self) -> Any:
        """A new ``VllmConfig`` object from the payload."""
        import cloudpickle

        return cloudpickle.loads(self.payload)


@dataclass(frozen=True)
class LoadOutcome:
    """An in-place load: the engine core's phase times and the frontend refresh time."""

    result: LoadResult
    frontend_ms: float


#: Builds a model's ``VllmConfig``: ``(name, profile) -> VllmConfig``.
ConfigBuilder = Callable[[str, ModelProfile], Any]


class InPlaceSwap:
    """Unloads and loads models inside one running vLLM engine (``AsyncLLM``) started with the worker extension.

    An unload or a load that outlives ``load_timeout_s`` kills the engine's processes and raises
    :class:`LoadTimedOut`: a swap holds the engine core's busy loop, so nothing else could end it. The engine's
    health checks pause meanwhile (the busy loop cannot answer them), and its watch then reports the death.

    Args:
        build_config: Builds a model's ``VllmConfig`` (vllm_loader's engine args with the worker extension).
        build_renderer: Rebuilds ``AsyncLLM``'s renderer for the loaded model (from the frontend adapter).
        watches: The loader's engine watches (None: engines are not watched).
        load_timeout_s: The longest one unload or load inside the engine core may take.
    """

    def __init__(
        self,
        build_config: ConfigBuilder,
        build_renderer: RendererFactory,
        *,
        watches: EngineWatches | None = None,
        load_timeout_s: float = 600.0,
    ) -> None:
        check_vllm_version(adapter=IN_PLACE_ADAPTER)
        check_plugin()
        self._build_config = build_config
        self._build_renderer = build_renderer
        self._watches = watches or EngineWatches()
        self._load_timeout_s = load_timeout_s
        self._targets: dict[str, TargetConfig] = {}
        self._preparing: asyncio.Task[None] | None = None

    async def target(self, name: str, profile: ModelProfile) -> TargetConfig:
        """``name``'s config, built on first use (it reads the model's config from disk) and cached."""
        cached = self._targets.get(name)
        if cached is not None and cached.profile == profile:
            return cached
        config = await asyncio.to_thread(self._build_config, name, profile)
        target = await asyncio.to_thread(_pickle_target, profile, config)
        self._targets[name] = target
        return target

    def prepare(self, models: Sequence[tuple[str, ModelProfile]]) -> None:
        """Build the configs of ``models`` in the background, so the first switch to each costs a warm one's.

        Called once the engine serves (readiness does not wait for it); a switch that comes first builds its
        own target as before. A config that fails to build is left to that switch to report.
        """
        if self._preparing is not None and not self._preparing.done():
            return
        self._preparing = asyncio.create_task(self._prepare(list(models)), name="turnout-prepare-targets")

    async def _prepare(self, models: list[tuple[str, ModelProfile]]) -> None:
        for name, profile in models:
            try:
                await self.target(name, profile)
            except Exception as exc:
                logger.info("in-place swap: %s's config did not build ahead of its switch (%s)", name, exc)

    async def incompatibility(self, engine: Any, held: ModelProfile, name: str, profile: ModelProfile) -> str | None:
        """Why ``engine``, running ``held``, cannot take ``name`` in place (a restart can), or None when it can."""
        reason = profile_incompatibility(held, profile)
        if reason is not None:
            return reason
        target = (await self.target(name, profile)).fresh()
        return describe_incompatibility(engine.vllm_config, target)

    async def unload(self, engine: Any) -> UnloadResult:
        """Release the engine's model and KV cache; the engine processes stay."""
        answer = await self._bounded(engine, "unloading", str(engine.model_config.model), UNLOAD_UTILITY)
        result: UnloadResult = decode_result(answer, UnloadResult)
        return result

    async def load(self, engine: Any, name: str, profile: ModelProfile) -> LoadOutcome:
        """Load ``name`` into ``engine``, refresh its frontend state and check what the engine core holds.

        Raises:
            LoadedModelMismatch: The engine core reports another model afterwards.
            Exception: Whatever the engine core or a worker raised while loading (vLLM reports it as
                ``Exception("Call to turnout_load_model method failed: ...")``).
        """
        target = await self.target(name, profile)
        answer = await self._bounded(engine, "loading in place", name, LOAD_UTILITY, target.payload)
        result: LoadResult = decode_result(answer, LoadResult)
        _expect(target, result.loaded)
        if FAULTS.take("weights", name):
            damaged = await engine.collective_rpc("turnout_damage_weights")
            logger.warning("fault drill: %s was loaded in place with %s negated", name, damaged[0])
        started = time.perf_counter()
        await refresh_async_llm(engine, target.fresh(), result.loaded, self._build_renderer)
        frontend_ms = (time.perf_counter() - started) * 1000.0
        _expect(target, await self.loaded_model(engine))
        if str(engine.model_config.model) != target.model:
            raise LoadedModelMismatch(f"the frontend state names {engine.model_config.model}, not {target.model}")
        return LoadOutcome(result, frontend_ms)

    async def _bounded(self, engine: Any, what: str, name: str, utility: str, *args: Any) -> Any:
        """Call ``utility`` within the load timeout, with the engine's health checks paused."""
        async with self._watches.suspended(engine):
            try:
                async with asyncio.timeout(self._load_timeout_s):
                    return await engine.engine_core.call_utility_async(utility, *args)
            except TimeoutError:
                await asyncio.to_thread(kill_process_trees, engine_pids(engine))
                raise LoadTimedOut(name, what, self._load_timeout_s) from None

    async def loaded_model(self, engine: Any) -> LoadedModel:
        """What the engine core reports it holds now."""
        answer = await engine.engine_core.call_utility_async(LOADED_MODEL_UTILITY)
        loaded: LoadedModel = decode_result(answer, LoadedModel)
        return loaded


def _pickle_target(profile: ModelProfile, config: Any) -> TargetConfig:
    import cloudpickle

    served = config.model_config.served_model_name
    return TargetConfig(
        profile=profile,
        payload=cloudpickle.dumps(config),
        model=str(config.model_config.model),
        served_model_name=str(served[0] if isinstance(served, list | tuple) else served),
    )


def _expect(target: TargetConfig, loaded: LoadedModel) -> None:
    if loaded.model != target.model or loaded.served_model_name != target.served_model_name:
        raise LoadedModelMismatch(
            f"the engine core reports {loaded.served_model_name!r} ({loaded.model}) loaded, "
            f"not {target.served_model_name!r} ({target.model})"
        )


def profile_incompatibility(held: ModelProfile, target: ModelProfile) -> str | None:
    """What in the profiles alone rules an in-place swap out, or None."""
    if held.quant_config != target.quant_config:
        # QUANT_CONFIG is read from the engine processes' environment, which only a new process changes.
        return "quant_config differs"
    return None


def describe_incompatibility(current: Any, target: Any) -> str | None:
    """Why an engine running ``current`` cannot load ``target`` in place, or None.

    The worker processes, their devices and distributed groups, and the executor stay across an in-place swap,
    so everything that shaped them must match. Disaggregated serving connectors are left to a restart.
    """
    checks = (
        ("tensor_parallel_size", lambda c: c.parallel_config.tensor_parallel_size),
        ("pipeline_parallel_size", lambda c: c.parallel_config.pipeline_parallel_size),
        ("data_parallel_size", lambda c: c.parallel_config.data_parallel_size),
        ("distributed_executor_backend", lambda c: str(c.parallel_config.distributed_executor_backend)),
        ("worker_cls", lambda c: str(c.parallel_config.worker_cls)),
        ("device", lambda c: str(c.device_config.device_type)),
        ("async_scheduling", lambda c: bool(c.scheduler_config.async_scheduling)),
        ("enable_sleep_mode", lambda c: bool(c.model_config.enable_sleep_mode)),
    )
    for what, read in checks:
        if read(current) != read(target):
            return f"{what} differs ({read(current)} -> {read(target)})"
    if target.parallel_config.worker_extension_cls != WORKER_EXTENSION:
        return f"worker_extension_cls is {target.parallel_config.worker_extension_cls!r}, not Turnout's"
    if _connector(target) not in (None, KEPT_KV_CONNECTOR) or target.ec_transfer_config is not None:
        # Turnout's own (kept KV) outlives a model runner; another connector's worker side is bound to one.
        return "a KV or encoder-cache transfer connector is configured"
    if _connector(current) != _connector(target):
        return f"the KV connector differs ({_connector(current)} -> {_connector(target)})"
    return None


def _connector(config: Any) -> str | None:
    transfer = config.kv_transfer_config
    return None if transfer is None else str(getattr(transfer, "kv_connector", None) or "unnamed")
